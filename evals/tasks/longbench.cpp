// Datasets from files as sweep tasks: longbench-NAME for each of LongBench's
// 21 datasets (its files and LongBench-E's), longbench-v2, and
// infinitebench-NAME for InfiniteBench's 12 tasks. A point reads
// the first `samples` records of [task.T] file, fills the dataset's template,
// generates greedily and scores as LongBench scores (datasets/tasks/longbench.h).
// query_aware = false prefills the context alone first (the policies act on
// it), then the question. docs/sweeps.md, "LongBench".
#include <algorithm>
#include <map>

#include "core/base/untrusted.h"
#include "datasets/tasks/infinitebench.h"
#include "datasets/tasks/longbench.h"
#include "evals/tasks/sample_text.h"
#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kPrefix = "longbench-";

// One prompt ready to run: its ids (BOS first) and where the context ends.
struct Prompt {
  std::vector<int32_t> ids;
  size_t split = 0;      // ids[0, split): instructions and context; then the question
  bool truncated = false;
  int64_t line = 0;
};

// Encodes head + tail, finds the split, and applies LongBench's middle
// truncation (its first and last halves of `budget` tokens) or refuses.
// With a chat template, the whole prompt is the user's message (LongBench's build_chat).
Status BuildPrompt(const Tokenizer& tok, const ChatTemplate* chat, const SplitPrompt& sp, const std::string& file,
                   int64_t line, int64_t budget, bool truncate, Prompt* out) {
  out->line = line;
  size_t split = 0;
  KVLAB_RETURN_IF_ERROR(EncodeTaskPrompt(tok, chat, sp.head + sp.tail, "", sp.head.size(), &out->ids, &split));
  const int64_t n = static_cast<int64_t>(out->ids.size());
  if (n > budget) {
    if (!truncate) {
      return Status::InvalidArgument(file + ":" + std::to_string(line) + ": field 'context': the prompt is " +
                                     std::to_string(n) + " tokens, over the " + std::to_string(budget) +
                                     " the point's length leaves after generation; set truncate = true "
                                     "(LongBench's middle truncation) or a larger length");
    }
    const size_t half = static_cast<size_t>(budget / 2), removed = static_cast<size_t>(n) - 2 * half;
    std::vector<int32_t> kept(out->ids.begin(), out->ids.begin() + static_cast<std::ptrdiff_t>(half));
    kept.insert(kept.end(), out->ids.end() - static_cast<std::ptrdiff_t>(half), out->ids.end());
    split = split <= half ? split : split >= half + removed ? split - removed : half;
    out->ids = std::move(kept);
    out->truncated = true;
  }
  out->split = split;
  return Status::OK();
}

// Prefills the prompt (whole, or context then question: GenerateAfterSplit).
Status RunPrompt(TaskContext* ctx, const SweepPoint& p, const Tokenizer& tok, const Prompt& pr, int64_t gen,
                 bool query_aware, std::string* text, MemoryStats* mem) {
  const size_t split = query_aware ? pr.ids.size() : pr.split;
  return GenerateAfterSplit(ctx, p, tok, pr.ids, split, gen, text, mem);
}

// What both kinds of dataset task share: the file, the tokenizer, the budget.
struct DatasetRun {
  const Tokenizer* tok = nullptr;
  std::unique_ptr<ChatTemplate> chat;  // chat = true
  std::string text;  // the file
  int64_t gen = 0, budget = 0, max_positions = 0;
};

Status StartDatasetRun(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, int64_t default_gen,
                       DatasetRun* r) {
  if (o.Path("file").empty()) {
    return Status::InvalidArgument("task '" + p.task + "' reads a dataset file: set [task." + p.task +
                                   "] file = a LongBench-format .jsonl (docs/sweeps.md, \"LongBench\")");
  }
  KVLAB_RETURN_IF_ERROR(ctx->ModelTokenizer(p, &r->tok));
  if (o.Bool("chat")) KVLAB_RETURN_IF_ERROR(PointChatTemplate(p, &r->chat));
  KVLAB_RETURN_IF_ERROR(ReadFileBounded(o.Path("file"), kMaxDatasetBytes, &r->text));
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(PointModelConfig(p, &mc));
  r->max_positions = mc.max_position_embeddings;
  r->gen = o.Int("tokens_to_generate") > 0 ? o.Int("tokens_to_generate") : default_gen;
  r->budget = p.length - r->gen;
  if (r->budget < 16) {
    return Status::InvalidArgument("task '" + p.task + "': length " + std::to_string(p.length) +
                                   " leaves under 16 prompt tokens after the generation budget of " +
                                   std::to_string(r->gen) + "; set a larger length or a smaller tokens_to_generate");
  }
  return Status::OK();
}

// The model's positions must hold prompt and generation (unless allow_long_context).
Status CheckPositions(const TaskContext& ctx, const SweepPoint& p, const DatasetRun& r, const Prompt& pr,
                      const std::string& file) {
  const int64_t need = static_cast<int64_t>(pr.ids.size()) + r.gen;
  if (ctx.config().allow_long_context || r.max_positions <= 0 || need <= r.max_positions) return Status::OK();
  return Status::InvalidArgument(file + ":" + std::to_string(pr.line) + ": field 'context': the prompt (" +
                                 std::to_string(pr.ids.size()) + " tokens) and its generation (" +
                                 std::to_string(r.gen) + ") pass the max_position_embeddings (" +
                                 std::to_string(r.max_positions) + ") of model '" + p.model_label + "'" +
                                 "; use a length of at most " + std::to_string(r.max_positions) +
                                 " with truncate = true, or allow_long_context = true");
}

void PutCommon(const SweepTaskOptions& o, const DatasetRun& r, int64_t n, double sum, double tokens, int64_t truncated,
               const MemoryStats& mem, json* m) {
  (*m)["accuracy"] = n > 0 ? sum / static_cast<double>(n) : 0.0;
  (*m)["score"] = n > 0 ? 100 * sum / static_cast<double>(n) : 0.0;
  (*m)["samples"] = n;
  (*m)["tokens_to_generate"] = r.gen;
  (*m)["query_aware"] = o.Bool("query_aware");
  (*m)["truncate"] = o.Bool("truncate");
  (*m)["chat"] = o.Bool("chat");
  (*m)["truncated"] = truncated;
  (*m)["sequence_tokens_mean"] = n > 0 ? tokens / static_cast<double>(n) : 0.0;
  (*m)["memory"] = MemoryJson(mem);
}

json MeansBy(const std::map<std::string, std::pair<double, int64_t>>& by) {
  json out = json::object();
  for (const auto& [k, v] : by) out[k] = v.first / static_cast<double>(v.second);
  return out;
}

Status RunLongBench(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  const LongBenchDataset* d = FindLongBenchDataset(p.task.substr(std::string(kPrefix).size()));
  if (d == nullptr) return Status::InvalidArgument("unknown LongBench dataset in task '" + p.task + "'");
  DatasetRun r;
  KVLAB_RETURN_IF_ERROR(StartDatasetRun(ctx, p, o, d->max_gen, &r));
  std::vector<LongBenchRecord> recs;
  KVLAB_RETURN_IF_ERROR(LoadLongBenchFile(o.Path("file"), r.text, *d, o.Int("samples"), &recs));
  json per_score = json::array(), per_tokens = json::array(), per_length = json::array(), per_q = json::array();
  SampleTextLog texts;  // LongBench's "pred" per record, its question part and answers (bounded)
  std::map<std::string, std::pair<double, int64_t>> by_length;
  bool all_lengths = true;
  double sum = 0, tokens = 0;
  int64_t truncated = 0;
  MemoryStats mem;
  for (const LongBenchRecord& rec : recs) {
    Prompt pr;
    const SplitPrompt sp = LongBenchPrompt(*d, rec);
    KVLAB_RETURN_IF_ERROR(BuildPrompt(*r.tok, r.chat.get(), sp, o.Path("file"), rec.line, r.budget, o.Bool("truncate"), &pr));
    KVLAB_RETURN_IF_ERROR(CheckPositions(*ctx, p, r, pr, o.Path("file")));
    std::string text;
    KVLAB_RETURN_IF_ERROR(RunPrompt(ctx, p, *r.tok, pr, r.gen, o.Bool("query_aware"), &text, &mem));
    const double s = LongBenchScore(*d, text, rec);
    texts.Add(text, sp.tail, rec.answers);
    sum += s;
    tokens += static_cast<double>(pr.ids.size() + static_cast<size_t>(r.gen));
    truncated += pr.truncated ? 1 : 0;
    per_score.push_back(s);
    per_tokens.push_back(pr.ids.size());
    per_q.push_back(pr.ids.size() - pr.split);
    all_lengths = all_lengths && rec.length >= 0;
    per_length.push_back(rec.length);
    if (rec.length >= 0) {
      auto& b = by_length[LongBenchLengthBucket(rec.length)];
      b.first += s;
      ++b.second;
    }
  }
  PutCommon(o, r, static_cast<int64_t>(recs.size()), sum, tokens, truncated, mem, m);
  (*m)["metric"] = d->metric;
  (*m)["dataset"] = d->name;
  texts.Put(m);
  if (!recs.empty() && !recs[0].all_classes.empty()) {  // trec, lsht: eval.py scores against the first record's list
    json classes = json::array();
    for (const std::string& c : recs[0].all_classes) {
      if (classes.size() < 256) classes.push_back(KeptText(c, kMaxQuestionBytes));
    }
    (*m)["all_classes"] = classes;
  }
  if (all_lengths && !recs.empty()) (*m)["accuracy_by_length"] = MeansBy(by_length);  // LongBench-E's buckets
  json per = json::object();
  per["accuracy"] = per_score;
  per["prompt_tokens"] = per_tokens;
  per["question_tokens"] = per_q;  // after the context: what query_aware = false reads after compression
  if (all_lengths) per["length"] = per_length;
  (*m)["per_sample"] = per;
  return Status::OK();
}

Status RunLongBenchV2(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  DatasetRun r;
  KVLAB_RETURN_IF_ERROR(StartDatasetRun(ctx, p, o, kLongBenchV2MaxGen, &r));
  std::vector<LongBenchV2Record> recs;
  KVLAB_RETURN_IF_ERROR(LoadLongBenchV2File(o.Path("file"), r.text, o.Int("samples"), &recs));
  json per_score = json::array(), per_tokens = json::array(), per_answered = json::array(), per_q = json::array();
  SampleTextLog texts;
  std::map<std::string, std::pair<double, int64_t>> by_difficulty, by_length;
  double sum = 0, tokens = 0;
  int64_t truncated = 0;
  MemoryStats mem;
  for (const LongBenchV2Record& rec : recs) {
    Prompt pr;
    const SplitPrompt sp = LongBenchV2Prompt(rec);
    KVLAB_RETURN_IF_ERROR(BuildPrompt(*r.tok, r.chat.get(), sp, o.Path("file"), rec.line, r.budget, o.Bool("truncate"), &pr));
    KVLAB_RETURN_IF_ERROR(CheckPositions(*ctx, p, r, pr, o.Path("file")));
    std::string text;
    KVLAB_RETURN_IF_ERROR(RunPrompt(ctx, p, *r.tok, pr, r.gen, o.Bool("query_aware"), &text, &mem));
    const std::string choice = ExtractChoice(text);
    texts.Add(text, sp.tail, {rec.answer}, {{"difficulty", rec.difficulty}, {"length", rec.length}});
    const double s = choice == rec.answer ? 1 : 0;
    sum += s;
    tokens += static_cast<double>(pr.ids.size() + static_cast<size_t>(r.gen));
    truncated += pr.truncated ? 1 : 0;
    per_score.push_back(s);
    per_tokens.push_back(pr.ids.size());
    per_answered.push_back(choice.empty() ? 0 : 1);
    per_q.push_back(pr.ids.size() - pr.split);
    if (!rec.difficulty.empty()) {
      auto& b = by_difficulty[rec.difficulty];
      b.first += s;
      ++b.second;
    }
    if (!rec.length.empty()) {
      auto& b = by_length[rec.length];
      b.first += s;
      ++b.second;
    }
  }
  PutCommon(o, r, static_cast<int64_t>(recs.size()), sum, tokens, truncated, mem, m);
  (*m)["metric"] = "multiple_choice";
  (*m)["dataset"] = "longbench-v2";
  texts.Put(m);
  if (!by_difficulty.empty()) (*m)["accuracy_by_difficulty"] = MeansBy(by_difficulty);
  if (!by_length.empty()) (*m)["accuracy_by_length"] = MeansBy(by_length);
  json per = json::object();
  per["accuracy"] = per_score;
  per["prompt_tokens"] = per_tokens;
  per["question_tokens"] = per_q;
  per["answered"] = per_answered;
  (*m)["per_sample"] = per;
  return Status::OK();
}

Status RunInfiniteBench(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  const InfiniteBenchTask* t = FindInfiniteBenchTask(p.task.substr(std::string("infinitebench-").size()));
  if (t == nullptr) return Status::InvalidArgument("unknown InfiniteBench task in task '" + p.task + "'");
  DatasetRun r;
  KVLAB_RETURN_IF_ERROR(StartDatasetRun(ctx, p, o, t->max_gen, &r));
  std::vector<InfiniteBenchRecord> recs;
  KVLAB_RETURN_IF_ERROR(LoadInfiniteBenchFile(o.Path("file"), r.text, *t, o.Int("samples"), &recs));
  json per_score = json::array(), per_tokens = json::array(), per_q = json::array();
  SampleTextLog texts;
  double sum = 0, tokens = 0;
  int64_t truncated = 0;
  MemoryStats mem;
  for (const InfiniteBenchRecord& rec : recs) {
    Prompt pr;
    const SplitPrompt sp = InfiniteBenchPrompt(*t, rec);
    KVLAB_RETURN_IF_ERROR(BuildPrompt(*r.tok, r.chat.get(), sp, o.Path("file"), rec.line, r.budget, o.Bool("truncate"), &pr));
    KVLAB_RETURN_IF_ERROR(CheckPositions(*ctx, p, r, pr, o.Path("file")));
    std::string text;
    KVLAB_RETURN_IF_ERROR(RunPrompt(ctx, p, *r.tok, pr, r.gen, o.Bool("query_aware"), &text, &mem));
    const double s = InfiniteBenchScore(*t, text, rec);
    texts.Add(text, sp.tail, rec.labels);
    sum += s;
    tokens += static_cast<double>(pr.ids.size() + static_cast<size_t>(r.gen));
    truncated += pr.truncated ? 1 : 0;
    per_score.push_back(s);
    per_tokens.push_back(pr.ids.size());
    per_q.push_back(pr.ids.size() - pr.split);
  }
  PutCommon(o, r, static_cast<int64_t>(recs.size()), sum, tokens, truncated, mem, m);
  (*m)["metric"] = t->metric;
  (*m)["dataset"] = t->name;
  texts.Put(m);
  json per = json::object();
  per["accuracy"] = per_score;
  per["prompt_tokens"] = per_tokens;
  per["question_tokens"] = per_q;
  (*m)["per_sample"] = per;
  return Status::OK();
}

SweepTaskInfo DatasetTask(const std::string& name, const std::string& summary, int64_t default_gen) {
  SweepTaskInfo info;
  info.name = name;
  info.summary = summary;
  info.options = {PathOption("file", "a dataset file"),
                  SamplesOption(),
                  TokensToGenerateOption(),
                  QueryAwareOption(),
                  BoolOption("truncate", true,
                             "LongBench's middle truncation of a prompt to the point's length (false: an error)"),
                  ChatOption()};
  info.key_options = [](const SweepTaskOptions& o, json* k) {
    // The file's name, not its directory: hotpotqa.jsonl and hotpotqa_e.jsonl
    // are different points, one file on two machines' paths is one point.
    const size_t slash = o.Path("file").find_last_of('/');
    (*k)["file"] = slash == std::string::npos ? o.Path("file") : o.Path("file").substr(slash + 1);
    (*k)["samples"] = o.Int("samples");
    (*k)["tokens_to_generate"] = o.Int("tokens_to_generate");
    (*k)["query_aware"] = o.Bool("query_aware");
    (*k)["truncate"] = o.Bool("truncate");
    if (o.Bool("chat")) (*k)["chat"] = true;  // only then: older records' keys stay valid
  };
  info.estimate = [default_gen](const TaskCost& c, const SweepPoint& p, const SweepTaskOptions& o) {
    const double L = static_cast<double>(p.length);
    const double gen = static_cast<double>(o.Int("tokens_to_generate") > 0 ? o.Int("tokens_to_generate") : default_gen);
    return static_cast<double>(o.Int("samples")) *
           (L * (c.token_s + c.attention_s * L / 2) + gen * (c.step_overhead_s + c.token_s + c.attention_s * L) + 0.05);
  };
  return info;
}

}  // namespace

void RegisterDatasetTasks(SweepTaskRegistry* registry) {
  for (const LongBenchDataset& d : LongBenchDatasets()) {
    SweepTaskInfo info = DatasetTask(kPrefix + d.name, "LongBench " + d.name + " from a file (" + d.metric + ")",
                                     d.max_gen);
    info.run = RunLongBench;
    info.family = "LongBench";
    registry->Register(info);
  }
  SweepTaskInfo v2 = DatasetTask("longbench-v2", "LongBench v2 from a file: multiple choice A-D (accuracy)",
                                 kLongBenchV2MaxGen);
  v2.run = RunLongBenchV2;
  v2.family = "LongBench v2";
  registry->Register(v2);
  for (const InfiniteBenchTask& t : InfiniteBenchTasks()) {
    SweepTaskInfo info = DatasetTask("infinitebench-" + t.name,
                                     "InfiniteBench " + t.name + " from a file (" + t.metric + ")", t.max_gen);
    info.run = RunInfiniteBench;
    info.family = "InfiniteBench";
    registry->Register(info);
  }
}

}  // namespace kvlab
