// RULER's synthetic tasks as sweep tasks (niah_single_1 ... fwe; the
// generators are datasets/tasks/ruler.h): `samples` prompts a point, each
// `length` tokens of the point's model with RULER's generation budget
// counted, answered by greedy generation and scored as RULER scores
// (string_match_all). docs/sweeps.md, "RULER".
#include <algorithm>
#include <cstdio>

#include "datasets/tasks/ruler.h"
#include "evals/stats.h"
#include "evals/tasks/sample_text.h"
#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

// The prompt between the haystack and the answer prefix (kvpress's `question`).
std::string RulerQuestion(const RulerSample& s) {
  const size_t begin = static_cast<size_t>(std::max<int64_t>(0, s.context_end));
  size_t end = s.prompt.size();
  if (end >= s.answer_prefix.size() && s.prompt.compare(end - s.answer_prefix.size(), std::string::npos,
                                                        s.answer_prefix) == 0) {
    end -= s.answer_prefix.size();
  }
  return begin < end ? s.prompt.substr(begin, end - begin) : std::string();
}

// Prefills the whole prompt and generates the whole budget (every stack then
// holds the same tokens at the end, so memory compares like with like); the
// text is what came before EOS.
Status GenerateWhole(TaskContext* ctx, const SweepPoint& p, const Tokenizer& tok, const std::vector<int32_t>& ids,
                     int64_t context, int64_t tokens_to_generate, std::string* text, MemoryStats* mem) {
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(PointEngineOptions(ctx->config(), p, context, 1), p.stack, &e));
  GenerateOptions go;
  go.max_new_tokens = tokens_to_generate;
  go.stop_at_eos = false;
  std::vector<GenerateResult> results;
  GenerateStats st;
  KVLAB_RETURN_IF_ERROR(e->Generate({ids}, go, &results, &st));
  std::vector<int32_t> gen = results[0].tokens;
  const auto eos = std::find(gen.begin(), gen.end(), tok.eos_id());
  if (tok.eos_id() >= 0) gen.erase(eos, gen.end());
  KVLAB_RETURN_IF_ERROR(ContinuationText(tok, ids, gen, text));
  *mem = st.memory_at_end;
  return Status::OK();
}

Status RunRuler(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  RulerTaskInfo info;
  KVLAB_RETURN_IF_ERROR(GetRulerTask(p.task, &info));
  const Tokenizer* tok = nullptr;
  const Status ts = ctx->ModelTokenizer(p, &tok);
  if (!ts.ok()) {
    std::string why = ts.message();
    const size_t hint = why.find("; give token ids");
    if (hint != std::string::npos) why.resize(hint);
    return Status::InvalidArgument("task '" + p.task + "' needs the tokenizer of model '" + p.model_label +
                                   "' for its text prompts: " + why +
                                   "; add the checkpoint's tokenizer.json or tokenizer.model");
  }
  const std::string* essay = nullptr;
  if (info.needs_essay) {
    if (o.Path("text").empty()) {
      return Status::InvalidArgument("task '" + p.task + "' reads an essay haystack: set [task." + p.task +
                                     "] text = a prose file (for example the built corpus "
                                     "datasets/corpus/brown-heldout.txt, `bash datasets/build.sh`)");
    }
    KVLAB_RETURN_IF_ERROR(ctx->Text(o.Path("text"), &essay));
  }
  std::unique_ptr<ChatTemplate> chat;
  if (o.Bool("chat")) KVLAB_RETURN_IF_ERROR(PointChatTemplate(p, &chat));
  int64_t overhead = 0;  // the chat template's tokens count in the length
  KVLAB_RETURN_IF_ERROR(ChatOverheadTokens(*tok, chat.get(), &overhead));
  const TokenCounter count = [tok, overhead](const std::string& text, int64_t* n) {
    std::vector<int32_t> ids;
    KVLAB_RETURN_IF_ERROR(tok->Encode(text, /*add_bos=*/true, &ids));
    *n = static_cast<int64_t>(ids.size()) + overhead;
    return Status::OK();
  };
  json per_score = json::array(), per_depth = json::array(), per_tokens = json::array(), per_question = json::array();
  std::map<double, std::pair<double, int64_t>> by_depth;  // depth -> (score sum, samples)
  double sum = 0, tokens = 0;
  MemoryStats mem;
  SampleTextLog texts;  // what was generated, the question and the references (bounded)
  const uint64_t task_seed = SeedOf(p.task);
  const std::vector<double> depths = info.has_depth ? o.Floats("depths") : std::vector<double>();
  const int64_t fewshot = info.default_fewshot > 0 ? o.Int("fewshot") : -1;  // -1: RULER's (none without one)
  for (int64_t s = 0; s < o.Int("samples"); ++s) {
    RulerSpec spec;
    spec.task = p.task;
    spec.length = p.length;
    spec.depth = info.has_depth ? depths[static_cast<size_t>(s) % depths.size()] : -1;
    spec.tokens_to_generate = o.Int("tokens_to_generate");
    spec.fewshot = static_cast<int>(fewshot);
    spec.essay = essay;
    spec.seed = task_seed ^ (p.seed * 1000003ull + static_cast<uint64_t>(s) * 101ull +
                             static_cast<uint64_t>(p.repetition) * 65537ull);
    RulerSample sample;
    KVLAB_RETURN_IF_ERROR(MakeRulerSample(spec, count, &sample));
    // RULER's chat prompts: the input as the user's message, the answer prefix after the generation prompt.
    const std::string& pr = sample.prompt;
    const std::string& prefix = sample.answer_prefix;
    const bool ends = pr.size() >= prefix.size() && pr.compare(pr.size() - prefix.size(), prefix.size(), prefix) == 0;
    const std::string user = ends ? pr.substr(0, pr.size() - prefix.size()) : pr;
    std::vector<int32_t> ids;
    size_t split = 0;
    KVLAB_RETURN_IF_ERROR(EncodeTaskPrompt(*tok, chat.get(), user, ends ? prefix : "",
                                           static_cast<size_t>(sample.context_end), &ids, &split));
    const int64_t context = static_cast<int64_t>(ids.size()) + sample.tokens_to_generate + 1;
    std::string text;
    if (o.Bool("query_aware")) {
      KVLAB_RETURN_IF_ERROR(GenerateWhole(ctx, p, *tok, ids, context, sample.tokens_to_generate, &text, &mem));
    } else {  // the haystack (and its needles) compressed before the question is read
      per_question.push_back(ids.size() - split);
      KVLAB_RETURN_IF_ERROR(GenerateAfterSplit(ctx, p, *tok, ids, split, sample.tokens_to_generate, &text, &mem));
    }
    const double score = RulerScore(sample, text);
    texts.Add(text, RulerQuestion(sample), sample.outputs, {{"answer_prefix", sample.answer_prefix}});
    sum += score;
    tokens += static_cast<double>(sample.prompt_tokens + sample.tokens_to_generate);
    per_score.push_back(score);
    per_tokens.push_back(sample.prompt_tokens);
    if (info.has_depth) {
      per_depth.push_back(sample.depth);
      auto& d = by_depth[sample.depth];
      d.first += score;
      ++d.second;
    }
  }
  const double n = static_cast<double>(o.Int("samples"));
  (*m)["accuracy"] = sum / n;  // RULER's score / 100
  (*m)["score"] = 100 * sum / n;
  (*m)["metric"] = info.metric;
  (*m)["samples"] = o.Int("samples");
  (*m)["tokens_to_generate"] = o.Int("tokens_to_generate") > 0 ? o.Int("tokens_to_generate") : info.tokens_to_generate;
  (*m)["fewshot"] = fewshot < 0 ? info.default_fewshot : fewshot;
  (*m)["sequence_tokens_mean"] = tokens / n;  // prompt + generation budget
  if (info.has_depth) {
    json bd = json::object();
    for (const auto& [depth, v] : by_depth) {
      char key[32];
      std::snprintf(key, sizeof(key), "%.3g", depth);
      bd[key] = v.first / static_cast<double>(v.second);
    }
    (*m)["accuracy_by_depth"] = bd;
  }
  json per = json::object();
  per["accuracy"] = per_score;
  if (info.has_depth) per["depth"] = per_depth;
  per["prompt_tokens"] = per_tokens;
  if (!o.Bool("query_aware")) per["question_tokens"] = per_question;
  (*m)["per_sample"] = per;
  texts.Put(m);
  (*m)["query_aware"] = o.Bool("query_aware");
  (*m)["chat"] = o.Bool("chat");
  (*m)["memory"] = MemoryJson(mem);
  return Status::OK();
}

}  // namespace

void RegisterRulerTasks(SweepTaskRegistry* registry) {
  const char* summaries[] = {
      "RULER niah_single_1: a 7-digit number for a word key, in noise",
      "RULER niah_single_2: a 7-digit number for a word key, in essays",
      "RULER niah_single_3: a UUID for a word key, in essays",
      "RULER niah_multikey_1: one of 4 keys' numbers, in essays",
      "RULER niah_multikey_2: a key's number among distractor needles",
      "RULER niah_multikey_3: a UUID key's UUID among distractor needles",
      "RULER niah_multivalue: all 4 numbers of one key, in essays",
      "RULER niah_multiquery: the numbers of 4 keys, in essays",
      "RULER vt: the 5 variables of a 4-hop assignment chain, in noise",
      "RULER cwe: the 10 most common words of a numbered list",
      "RULER fwe: the 3 most frequent coded words of a Zipf text",
  };
  size_t i = 0;
  for (const std::string& name : RulerTaskNames()) {
    RulerTaskInfo t;
    if (!GetRulerTask(name, &t).ok()) continue;
    SweepTaskInfo info;
    info.name = name;
    info.summary = summaries[i++];
    info.options = {SamplesOption(), TokensToGenerateOption(), QueryAwareOption(), ChatOption()};
    if (t.has_depth) info.options.push_back(DepthsOption());
    if (t.needs_essay) info.options.push_back(PathOption("text", "a prose file, the essay haystack"));
    if (t.default_fewshot > 0) {
      info.options.push_back(IntOption("fewshot", -1, 0, 1, "RULER's worked example before the task (-1: RULER's one)"));
    }
    info.key_options = [t](const SweepTaskOptions& o, json* k) {
      (*k)["samples"] = o.Int("samples");
      if (t.has_depth) (*k)["depths"] = o.Floats("depths");
      (*k)["tokens_to_generate"] = o.Int("tokens_to_generate");
      if (t.default_fewshot > 0) (*k)["fewshot"] = o.Int("fewshot");
      if (!o.Bool("query_aware")) (*k)["query_aware"] = false;  // only then: older records' keys stay valid
      if (o.Bool("chat")) (*k)["chat"] = true;
    };
    info.estimate = [t](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
      const double L = static_cast<double>(p.length);
      const double gen = static_cast<double>(o.Int("tokens_to_generate") > 0 ? o.Int("tokens_to_generate") : t.tokens_to_generate);
      return static_cast<double>(o.Int("samples")) *
             (L * (c.token_s + c.attention_s * L / 2) + gen * (c.step_overhead_s + c.token_s + c.attention_s * L) + 0.05);
    };
    info.run = RunRuler;
    info.family = "RULER";
    info.family_average_column = true;
    registry->Register(info);
  }
}

}  // namespace kvlab
