// The sweep's tasks, by name: what a point measures (bpb, passkey, latency,
// paging, ...). Called by the sweep harness (evals/sweep_*.cpp) only.
//
// Each task file defines a Register<Name>Tasks() function;
// RegisterBuiltinSweepTasks() (evals/tasks/registry.cpp) calls them, one line
// per file in KVLAB_BUILTIN_TASKS. Explicit calls instead of static
// initialisers, so a static library link can never silently drop a task (as
// policies/registry.h does for policies); CMake compiles every
// evals/tasks/*.cpp. Adding a task: docs/sweeps.md, "Adding a task".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/untrusted.h"
#include "core/engine/engine.h"
#include "core/tokenizer/chat_template.h"
#include "core/model/model_config.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/sweep.h"

namespace kvlab {

// A task's text as token ids of the point's model, without BOS: a token-id
// file's ids (path ends in .ids), or the text (the file's; the built-in one
// when path is empty) encoded by the model's tokenizer (LoadTokenizer).
struct TaskTokens {
  std::vector<int32_t> ids;
  int32_t bos = -1;           // what a window starts with; -1: nothing
  std::string unit = "byte";  // what one id is: "byte" (byte tokenizer) or "token"
};

// What the sweep runner lends a task while it runs a point: the config, and
// caches that live as long as the sweep. Not thread-safe (points run one at a time).
class TaskContext {
 public:
  virtual ~TaskContext() = default;
  virtual const SweepConfig& config() const = 0;
  // The text at `path` (empty: the built-in text) as the point's model's tokens.
  virtual Status Tokens(const SweepPoint& p, const std::string& path, const TaskTokens** out) = 0;
  // The text file at `path` (read once per sweep); its error names the file.
  virtual Status Text(const std::string& path, const std::string** out) = 0;
  // The point's model's tokenizer (LoadTokenizer); its error names the model.
  virtual Status ModelTokenizer(const SweepPoint& p, const Tokenizer** out) = 0;
  // Logits kept across points by a key the task chooses (the baseline's, so
  // that every stack of a window compares against one computation).
  virtual std::map<std::string, std::vector<float>>* logits_cache() = 0;
};

// The per-token costs a task's estimate is made of, from the model's shape
// (on a CPU like the 2-core machine; rough by design).
struct TaskCost {
  double token_s = 0;          // one token through the weights
  double attention_s = 0;      // one token attending to one position
  double step_overhead_s = 0;  // one engine step's fixed cost
};

struct SweepTaskInfo {
  std::string name;     // as written in `tasks = [...]`
  std::string summary;  // one line: what it measures
  // The [task.NAME] keys it reads, with their types, defaults and ranges:
  // the parser reads and checks a task's table by them alone.
  std::vector<TaskOption> options;
  bool batched = false;  // runs once per batch size (batch_sizes); else one sequence
  // Adds the options that are part of a point's identity to its key (resume
  // and merge match on the key's text, so the order of insertion is fixed).
  std::function<void(const SweepTaskOptions&, nlohmann::ordered_json* key)> key_options;
  // Rough seconds for a point.
  std::function<double(const TaskCost&, const SweepPoint&, const SweepTaskOptions&)> estimate;
  // Runs the point: its metrics (a JSON object), or the error that stopped it.
  std::function<Status(TaskContext*, const SweepPoint&, const SweepTaskOptions&, nlohmann::ordered_json*)> run;

  // What summary.md shows of the task (evals/sweep_report.cpp names no task).
  struct Column {
    std::string metric, title, fmt;  // a number of the record's metrics, its header, its printf format
  };
  // Columns of each model's table: each metric's mean with its interval, and
  // its paired difference from the baseline; tasks in registration order.
  std::vector<Column> columns;
  // The metric of a table by context length ("": none), what it is (the
  // title's "(bits per byte)") and its format.
  std::string length_metric, length_unit, length_fmt;
  // A benchmark of several tasks (RULER, LongBench): the tasks of one family
  // share a table per length of their scores (%) and their average.
  std::string family;
  bool family_average_column = false;  // and the family's average in each model's table
  bool decode_columns = false;         // each model's table shows decode ms and its ratio to the baseline
  // A section of its own after each model's tables, from the model's records.
  std::function<void(const std::vector<nlohmann::ordered_json>& records, const std::string& model, std::string* md)>
      section;
};

class SweepTaskRegistry {
 public:
  // The process-wide registry, with the built-in tasks registered.
  static SweepTaskRegistry& Global();

  void Register(SweepTaskInfo info);
  const SweepTaskInfo* Find(const std::string& name) const;
  std::vector<std::string> Names() const;  // in registration order
  const std::vector<SweepTaskInfo>& infos() const { return infos_; }

 private:
  std::vector<SweepTaskInfo> infos_;
};

void RegisterBuiltinSweepTasks(SweepTaskRegistry* registry);

// ---- helpers the task files share (registry.cpp) ----

// Task options by type (TaskOption): an integer or number in [min, max], a
// flag, a file (`what` it is, for the error: "a text file"), lists.
TaskOption IntOption(const std::string& name, int64_t value, int64_t min, int64_t max, const std::string& help);
TaskOption FloatOption(const std::string& name, double value, double min, double max, const std::string& help);
TaskOption BoolOption(const std::string& name, bool value, const std::string& help);
TaskOption PathOption(const std::string& name, const std::string& what);
TaskOption IntListOption(const std::string& name, std::vector<int64_t> value, int64_t min, int64_t max,
                         const std::string& help);
TaskOption FloatListOption(const std::string& name, std::vector<double> value, double min, double max,
                           const std::string& help);
// The options several tasks take, each with one meaning and default.
TaskOption TextOption();             // text: a text file ("": the built-in text)
TaskOption SamplesOption();          // samples: prompts (per depth where there are depths)
TaskOption DepthsOption();           // depths: where the needle sits, 0 = start, 1 = end
TaskOption TokensToGenerateOption(); // tokens_to_generate: 0 = the task's own
TaskOption QueryAwareOption();       // query_aware: the question inside what the policies compress
TaskOption ChatOption();             // chat: the prompt through the model's chat template

// The point's model config: a preset's, or MODEL/config.json.
Status PointModelConfig(const SweepPoint& p, ModelConfig* out);
// Engine options of a point: its model, the sweep's dtype, block size and threads.
EngineOptions PointEngineOptions(const SweepConfig& c, const SweepPoint& p, int64_t max_context, int64_t seqs);
// metrics.memory of a record (docs/sweeps.md, "memory, in every record").
nlohmann::ordered_json MemoryJson(const MemoryStats& m);
// The generated text as it continues the prompt: Decode(prompt + generated)
// past Decode(prompt), else Decode(generated) (a tokenizer that merges
// across the boundary).
Status ContinuationText(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                        std::string* text);
// Greedy generation for the text tasks: ids[0, split) prefilled (in
// prefill_chunk pieces, the policies acting after each), then ids[split, end)
// (split 0 or past the end: all at once), then `gen` tokens decoded, all of
// them (every stack holds the same tokens at the end, so memory compares like
// with like); the text up to EOS as it continues the prompt. A split before the
// question is the question-agnostic mode (query_aware = false).
Status GenerateAfterSplit(TaskContext* ctx, const SweepPoint& p, const Tokenizer& tok, const std::vector<int32_t>& ids,
                          size_t split, int64_t gen, std::string* text, MemoryStats* mem);
// How many leading ids of `ids` (a prompt, BOS first) Encode(head) shares: where the head ends.
size_t SharedPrefix(const Tokenizer& tok, const std::string& head, const std::vector<int32_t>& ids);
// "a, b, c"
std::string JoinNames(const std::vector<std::string>& names);

// ---- chat = true (chat_prompt.cpp) ----

// The chat template of the point's model (core/tokenizer/chat_template.h); a model
// without one (a preset, a byte-level or base model) is an error naming the
// task, the key and the model directory.
Status PointChatTemplate(const SweepPoint& p, std::unique_ptr<ChatTemplate>* out);
// A task's prompt as the model reads it, BOS first: `user` then `answer_prefix`.
// chat null: Encode(user + answer_prefix) with BOS. Else the chat template over
// one user message `user` with the generation prompt, then answer_prefix
// after it (where RULER puts its answer prefix), tokenised as transformers
// does (ChatTemplate::Encode: special tokens as special tokens, no second BOS).
// head_end non-null: how many leading ids hold user[0, head_bytes) and all
// the template put before it (the split of query_aware = false); an error
// when the rendered chat does not contain the prompt.
Status EncodeTaskPrompt(const Tokenizer& tok, const ChatTemplate* chat, const std::string& user,
                        const std::string& answer_prefix, size_t head_bytes, std::vector<int32_t>* ids,
                        size_t* head_end);
// How many more tokens the chat template adds around a prompt (0 for chat null):
// what a length-targeting generator adds to its text's count.
Status ChatOverheadTokens(const Tokenizer& tok, const ChatTemplate* chat, int64_t* out);

}  // namespace kvlab
