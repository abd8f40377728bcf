// Room evals/: the top room: the sweep harness and the CLI (evals/cli/).
// Nothing includes it but evals itself; it may include every room below.
//
// Policy sweeps: `kvlab run CONFIG.toml` and `kvlab merge`. A sweep config
// names models, policy stacks with parameter grids, tasks, context lengths,
// batch sizes, seeds and repetitions; it expands to points (the uncompressed
// `full` baseline always among them), each run through the engine and
// appended to results.jsonl the moment it finishes. Reruns skip points
// already recorded; --shard I/N runs every N-th point. Torch-free (the engine
// header is).
//
//   name = "quickstart"                 # default: the file's stem
//   models = ["../../datasets/models/tiny-gqa"]   # paths relative to the config; or presets
//   tasks = ["bpb", "passkey", "latency"]        # the registry's (evals/tasks/task.h; docs/sweeps.md lists them)
//   lengths = [512, 1024]
//   batch_sizes = [1]                   # latency task only; accuracy tasks run one sequence
//   seeds = [0]
//   repetitions = 1
//   kv_dtype = "bf16"
//   block_size = 16
//   threads = 0                         # 0: all cores
//   max_step_tokens = 64                # with selection / an encoding / offload: tokens a step adds (0: chunks as given)
//   run_blocks = 32                     # decode-time blocks per run reserved ahead for each stream (0 or 1: off)
//   baseline = true                     # add the `full` stack (only false for tests of the harness)
//   [task.passkey]  depths = [0.0, 0.5, 1.0]; samples = 2
//                   # [task.NAME]: the options task NAME declares (TaskOption; its
//                   # file in evals/tasks/; docs/sweeps.md lists them per task)
//   [[sweep]]                           # a stack; list-valued parameters form a grid
//   [[sweep.policy]]
//   name = "sink"
//   window = [64, 128]
//   [[point]]                           # a hand-picked stack, no grids
//   [[point.policy]]
//   name = "h2o"
//   ratio = 0.2
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

// One option of a task's [task.NAME] table, declared by the task
// (SweepTaskInfo::options, evals/tasks/task.h): its name, type, default,
// valid values and meaning. The config parser reads and checks every option
// from these declarations alone, so it names no task and no option.
struct TaskOption {
  enum class Type {
    kInt,        // an integer in [min, max]
    kFloat,      // a number in [min, max]
    kBool,       // true or false
    kPath,       // a file, relative to the config's directory; "" = none
    kIntList,    // integers in [min, max] (a single one is a list of one)
    kFloatList,  // numbers in [min, max] (a single one is a list of one)
  };
  std::string name;
  Type type = Type::kInt;
  nlohmann::ordered_json default_value;  // of the type: 4, 0.5, true, "", [1, 16]
  double min = 0, max = 0;               // numbers and list entries
  std::string help;                      // one line; for kPath, what the file is ("a text file")
};

// The options of one task at one point: every option the task declares, the
// config's value or the declared default. A task reads only what it declares
// (reading another name aborts: a programming error, not a user's).
class SweepTaskOptions {
 public:
  SweepTaskOptions() = default;
  // The declared defaults.
  explicit SweepTaskOptions(const std::vector<TaskOption>& declared);

  int64_t Int(const std::string& name) const;
  double Float(const std::string& name) const;
  bool Bool(const std::string& name) const;
  const std::string& Path(const std::string& name) const;
  std::vector<int64_t> Ints(const std::string& name) const;
  std::vector<double> Floats(const std::string& name) const;

  void Set(const std::string& name, nlohmann::ordered_json value) { values_[name] = std::move(value); }
  bool Has(const std::string& name) const { return values_.contains(name); }
  const nlohmann::ordered_json& values() const { return values_; }

 private:
  const nlohmann::ordered_json& Get(const std::string& name) const;
  nlohmann::ordered_json values_ = nlohmann::ordered_json::object();
};

struct SweepPoint {
  int64_t index = 0;       // in the expanded order
  std::string key;         // canonical identity (JSON text): what resume and merge match on
  std::string model;       // as resolved (path or preset)
  std::string model_label; // as written in the config
  std::vector<PolicySpec> stack;
  std::string stack_label; // "sink(sink=4,window=64)+kivi(bits=2)": the given parameters
  bool baseline = false;
  std::string task;
  int64_t length = 0, batch = 1, repetition = 0;
  uint64_t seed = 0;
};

struct SweepConfig {
  std::string path, name;
  std::vector<std::string> overrides;  // the --set KEY=VALUE items applied on top of the file
  // models: resolved paths or presets; specs: as written (part of each point's
  // identity); labels: the preset or the directory's last component.
  std::vector<std::string> models, model_specs, model_labels;
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths = {512}, batch_sizes = {1};
  std::vector<uint64_t> seeds = {0};
  int64_t repetitions = 1, threads = 0;
  DType kv_dtype = DType::kBF16;
  int block_size = 16;
  bool baseline = true;
  // Run past the models' max_position_embeddings (EngineOptions::allow_long_context);
  // recorded in every record.
  bool allow_long_context = false;
  // EngineOptions::max_step_tokens: with selection, an encoding or offload, a
  // chunk runs as steps of at most this many tokens (0: chunks as given).
  // Part of a point's key when it is not the default.
  int64_t max_step_tokens = 64;
  // EngineOptions::run_blocks: decode-time blocks per run reserved ahead for
  // each stream (0 or 1: off). Part of a point's key when not the default.
  int run_blocks = 32;
  std::map<std::string, SweepTaskOptions> task_options;  // per task of `tasks`, filled by the parser
  std::vector<std::vector<PolicySpec>> stacks;  // expanded grids and points, baseline first
};

// Parses a sweep config; `overrides` are --set KEY=VALUE items (VALUE is TOML:
// lengths=[256], task.passkey.samples=1, name="x"), applied before validation.
Status LoadSweepConfig(const std::string& path, const std::vector<std::string>& overrides, SweepConfig* out);
Status ParseSweepConfig(const std::string& text, const std::string& path, const std::vector<std::string>& overrides,
                        SweepConfig* out);

// All points, in run order (model, stack, task, length, batch, seed, repetition).
std::vector<SweepPoint> ExpandPoints(const SweepConfig& config);

struct RunSweepOptions {
  std::string out_dir;        // default results/NAME
  int shard = 0, num_shards = 1;
  bool dry_run = false;
  bool retry_failed = false;  // rerun points whose record holds an error
  bool progress = true;       // progress bar on stderr
  bool print_summary = true;
  // Asked before each point and when a point throws: true stops the run there
  // (a caller's interrupt, e.g. Ctrl-C in Python), the interrupted point not
  // recorded, so a rerun resumes with it. Null: never.
  std::function<bool()> interrupted;
  // Another process holds the output directory (ResultsDirLock): wait for it
  // (then resume past the points it wrote) instead of failing at once.
  bool wait_if_locked = false;
  // Called with the holder's pid when the run starts waiting (default: a line on stderr).
  std::function<void(const std::string&)> on_lock_wait;
};

// Runs (or lists, with dry_run) the sweep; writes results.jsonl, results.csv
// and summary.md under the output directory. `report` receives what the
// command prints (the dry-run listing or the summary table).
Status RunSweep(const SweepConfig& config, const RunSweepOptions& options, std::string* report);

// Joins results.jsonl of several shard directories into `out_dir` (records
// deduplicated by point key), then writes results.csv and summary.md.
Status MergeResults(const std::vector<std::string>& dirs, const std::string& out_dir, std::string* report);

// Regenerates results.csv and summary.md from results.jsonl in `dir`.
Status WriteReports(const std::string& dir, std::string* summary);

}  // namespace kvlab
