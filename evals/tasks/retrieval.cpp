// Tasks passkey, multi-needle and recall: generated prompts with a fact at a
// depth, answered by greedy generation and scored by exact match on the
// decoded text (docs/sweeps.md). Any model with a tokenizer; prompts' lengths
// are in the model's tokens (evals/tasks/retrieval.h).
#include "evals/tasks/retrieval.h"

#include <algorithm>
#include <cstdio>

#include "evals/tasks/sample_text.h"
#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

// Tokens of the prompt generated at `chars` characters; -1 when the generator
// finds that too short for the task.
Status CountAt(TaskSpec spec, int64_t chars, const Tokenizer& tok, TaskSample* sample, std::vector<int32_t>* ids,
               int64_t* count) {
  spec.length = chars;
  if (chars < 1 || !MakeTask(spec, sample).ok()) {
    *count = -1;
    return Status::OK();
  }
  KVLAB_RETURN_IF_ERROR(tok.Encode(sample->prompt, /*add_bos=*/true, ids));
  *count = static_cast<int64_t>(ids->size());
  return Status::OK();
}

Status Unreachable(const TaskSpec& spec, int64_t length, const std::string& why) {
  return Status::InvalidArgument(std::string("task '") + TaskKindName(spec.kind) + "': cannot build a prompt of " +
                                 std::to_string(length) + " tokens: " + why);
}

}  // namespace

Status BuildRetrievalPrompt(TaskSpec spec, int64_t length, const Tokenizer& tok, RetrievalPrompt* out) {
  *out = RetrievalPrompt();
  // The answer does not depend on the length (the generator draws it before
  // the filler), so one sample at a generous length gives it.
  TaskSample probe;
  spec.length = std::max<int64_t>(length, 4096);
  KVLAB_RETURN_IF_ERROR(MakeTask(spec, &probe));
  std::vector<int32_t> answer_ids;
  KVLAB_RETURN_IF_ERROR(tok.Encode(probe.answer, /*add_bos=*/false, &answer_ids));
  const int64_t answer_tokens = static_cast<int64_t>(answer_ids.size());
  const int64_t want = length - answer_tokens;  // prompt tokens, BOS / template tokens included
  if (want < 1) return Unreachable(spec, length, "the answer alone has " + std::to_string(answer_tokens));

  TaskSample sample;
  std::vector<int32_t> ids;
  int64_t n = 0;
  // First guess: one token a character, the byte tokenizer's rule (BOS plus
  // length - 1 characters of prompt and answer), exact for byte-level models.
  int64_t hi = length - 1;
  KVLAB_RETURN_IF_ERROR(CountAt(spec, hi, tok, &sample, &ids, &n));
  int64_t lo = 0;  // a length known to give fewer than `want` tokens
  const int64_t limit = 64 * length + 4096;
  while (n < want) {
    lo = hi;
    // Extrapolate by the characters a token has taken so far.
    const int64_t step = n > 0 ? std::max<int64_t>(1, (want - n) * hi / n) : hi;
    hi = std::min(limit, hi + step);
    KVLAB_RETURN_IF_ERROR(CountAt(spec, hi, tok, &sample, &ids, &n));
    if (n < want && hi == limit) return Unreachable(spec, length, "the generator's text stays shorter");
  }
  // The smallest length with at least `want` tokens, between lo and hi.
  if (hi - 1 > lo) {
    int64_t m = 0;
    KVLAB_RETURN_IF_ERROR(CountAt(spec, hi - 1, tok, &sample, &ids, &m));
    if (m < want) lo = hi - 1;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    int64_t m = 0;
    KVLAB_RETURN_IF_ERROR(CountAt(spec, mid, tok, &sample, &ids, &m));
    (m >= want ? hi : lo) = mid;
  }
  // One character may add two tokens: then try the next lengths.
  for (int64_t c = hi; c < hi + 64; ++c) {
    KVLAB_RETURN_IF_ERROR(CountAt(spec, c, tok, &sample, &ids, &n));
    if (n == want) {
      if (sample.answer != probe.answer) return Unreachable(spec, length, "the answer changed with the length");
      out->sample = std::move(sample);
      out->ids = std::move(ids);
      out->answer_tokens = answer_tokens;
      out->max_new_tokens = std::max<int64_t>(answer_tokens, static_cast<int64_t>(out->sample.answer.size()));
      out->characters = c;
      return Status::OK();
    }
  }
  // Too short for the task at all: the generator's own error (for byte-level
  // models, the one it always gave).
  spec.length = length - 1;
  KVLAB_RETURN_IF_ERROR(MakeTask(spec, &sample));
  return Unreachable(spec, length, "no character length near " + std::to_string(hi) + " gives exactly " +
                                       std::to_string(want) + " prompt tokens");
}

Status GeneratedText(const RetrievalPrompt& prompt, const Tokenizer& tok, const std::vector<int32_t>& generated,
                     std::string* text) {
  std::string before, all;
  KVLAB_RETURN_IF_ERROR(tok.Decode(prompt.ids, &before));
  std::vector<int32_t> ids = prompt.ids;
  ids.insert(ids.end(), generated.begin(), generated.end());
  KVLAB_RETURN_IF_ERROR(tok.Decode(ids, &all));
  if (all.compare(0, before.size(), before) == 0) {
    *text = all.substr(before.size());
    return Status::OK();
  }
  return tok.Decode(generated, text);
}

namespace {

Status RunRetrieval(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  TaskKind kind;
  KVLAB_RETURN_IF_ERROR(ParseTaskKind(p.task, &kind));
  const Tokenizer* tok = nullptr;
  const Status ts = ctx->ModelTokenizer(p, &tok);
  if (!ts.ok()) {
    // LoadTokenizer's hint (give token ids) does not apply: these prompts are text.
    std::string why = ts.message();
    const size_t hint = why.find("; give token ids");
    if (hint != std::string::npos) why.resize(hint);
    return Status::InvalidArgument("task '" + p.task + "' needs the tokenizer of model '" + p.model_label +
                                   "' for its text prompts: " + why +
                                   "; add the checkpoint's tokenizer.json or tokenizer.model");
  }
  json by_depth = json::object();
  // Per prompt, in order (depth-major), for the reports' intervals and paired differences.
  json per_exact = json::array(), per_chars = json::array(), per_depth = json::array();
  double correct = 0, chars = 0;
  int64_t total = 0;
  MemoryStats mem;
  SampleTextLog texts;  // the generated texts and answers (bounded); the question is the prompt's end
  const std::vector<double> depths = o.Floats("depths");
  for (size_t di = 0; di < depths.size(); ++di) {
    double depth_correct = 0;
    for (int64_t s = 0; s < o.Int("samples"); ++s) {
      TaskSpec spec;
      spec.kind = kind;
      spec.depth = depths[di];
      // Each kind reads the options it declares (multi-needle's needles, recall's pairs).
      if (o.Has("needles")) spec.num_needles = static_cast<int>(o.Int("needles"));
      if (o.Has("pairs")) spec.num_pairs = static_cast<int>(o.Int("pairs"));
      spec.seed = p.seed * 1000003ull + static_cast<uint64_t>(s) * 101ull + di * 7ull +
                  static_cast<uint64_t>(p.repetition) * 65537ull;
      RetrievalPrompt prompt;
      KVLAB_RETURN_IF_ERROR(BuildRetrievalPrompt(spec, p.length, *tok, &prompt));
      const int64_t context = static_cast<int64_t>(prompt.ids.size()) + prompt.max_new_tokens + 1;
      std::unique_ptr<Engine> e;
      KVLAB_RETURN_IF_ERROR(Engine::Create(PointEngineOptions(ctx->config(), p, context, 1), p.stack, &e));
      GenerateOptions go;
      go.max_new_tokens = prompt.max_new_tokens;
      go.stop_at_eos = false;
      std::vector<GenerateResult> results;
      GenerateStats st;
      KVLAB_RETURN_IF_ERROR(e->Generate({prompt.ids}, go, &results, &st));
      std::string got;
      KVLAB_RETURN_IF_ERROR(GeneratedText(prompt, *tok, results[0].tokens, &got));
      const double ok = ScoreExact(prompt.sample, got);
      const double ch = ScoreChars(prompt.sample, got);
      texts.Add(got, "", {prompt.sample.answer});
      correct += ok;
      depth_correct += ok;
      chars += ch;
      per_exact.push_back(ok);
      per_chars.push_back(ch);
      per_depth.push_back(depths[di]);
      ++total;
      mem = st.memory_at_end;
    }
    char key[32];
    std::snprintf(key, sizeof(key), "%.3g", depths[di]);
    by_depth[key] = depth_correct / static_cast<double>(o.Int("samples"));
  }
  (*m)["accuracy"] = correct / static_cast<double>(total);
  (*m)["char_accuracy"] = chars / static_cast<double>(total);
  (*m)["accuracy_by_depth"] = by_depth;
  (*m)["samples"] = total;
  (*m)["per_sample"] = json{{"accuracy", per_exact}, {"char_accuracy", per_chars}, {"depth", per_depth}};
  texts.Put(m);
  (*m)["memory"] = MemoryJson(mem);
  return Status::OK();
}

void Register(SweepTaskRegistry* registry, const std::string& name, const std::string& summary,
              std::vector<TaskOption> options) {
  SweepTaskInfo info;
  info.name = name;
  info.summary = summary;
  info.options = std::move(options);
  info.key_options = [name](const SweepTaskOptions& o, json* k) {
    (*k)["depths"] = o.Floats("depths");
    (*k)["samples"] = o.Int("samples");
    if (name == "multi-needle") (*k)["needles"] = o.Int("needles");
    if (name == "recall") (*k)["pairs"] = o.Int("pairs");
  };
  info.estimate = [](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
    const double L = static_cast<double>(p.length);
    const double n = static_cast<double>(o.Floats("depths").size() * static_cast<size_t>(o.Int("samples")));
    return n * (L * (c.token_s + c.attention_s * L / 2) + 6 * (c.step_overhead_s + c.token_s + c.attention_s * L) + 0.05);
  };
  info.run = RunRetrieval;
  info.columns = {{"accuracy", name, "%.2f"}};
  info.length_metric = "accuracy";
  info.length_unit = "accuracy";
  info.length_fmt = "%.2f";
  registry->Register(info);
}

}  // namespace

void RegisterRetrievalTasks(SweepTaskRegistry* registry) {
  Register(registry, "passkey", "a pass key hidden in filler at each depth, asked for at the end",
           {DepthsOption(), SamplesOption()});
  Register(registry, "multi-needle", "several key-value facts in filler, one asked for",
           {DepthsOption(), SamplesOption(), IntOption("needles", 4, 1, kMaxCount, "facts in the filler")});
  Register(registry, "recall", "key:value pairs at each depth, one key queried (associative recall)",
           {DepthsOption(), SamplesOption(), IntOption("pairs", 8, 1, kMaxCount, "key:value pairs")});
}

}  // namespace kvlab
