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
//   tasks = ["bpb", "passkey", "latency"]        # bpb | bpb-recompute | passkey | multi-needle | recall | latency | paging
//                                       # | RULER's niah_single_1 ... niah_multiquery, vt, cwe, fwe
//                                       # | longbench-NAME (LongBench's 21 datasets), longbench-v2, infinitebench-NAME
//                                       # (the registry, evals/tasks/task.h; docs/sweeps.md "Adding a task")
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
//   [task.bpb]      text = "../../datasets/corpus/heldout.txt"; windows = 1; prefill = 0; buckets = 4
//   [task.passkey]  depths = [0.0, 0.5, 1.0]; samples = 2
//   [task.multi-needle] depths = [...]; samples = 2; needles = 4
//   [task.recall]   depths = [...]; samples = 4; pairs = 8
//   [task.latency]  decode_tokens = 16; text = "..."
//   [task.bpb-recompute] text = "..."; window = 256   # StreamingLLM's "sliding window with
//                   # recompute": each prediction recomputes the last `window` tokens from
//                   # scratch (positions 0..window-1); KL and top-1 are against full-cache logits
//   [task.paging]   requests = 256; median = 0; sigma = 1.0; block_sizes = [1, 16, 64, 256]
//   [task.niah_single_2] samples = 20; depths = [...]; text = "essays.txt"; tokens_to_generate = 0
//   [task.vt]       samples = 20; fewshot = 1      # RULER's tasks (datasets/tasks/ruler.h)
//   [task.longbench-hotpotqa] file = "hotpotqa.jsonl"; samples = 200; query_aware = true; truncate = true
//                   # LongBench-format files (datasets/tasks/longbench.h); also longbench-v2
//                   # vLLM's paging: share of reserved KV memory holding real tokens
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

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

struct SweepTaskOptions {
  std::string text;                        // bpb / latency: a text file (empty: built-in text), or token
                                           // ids when it ends in .ids (then bpb is bits per token)
  int64_t windows = 1, prefill = 0, buckets = 4;
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t samples = 2, needles = 4, pairs = 8;
  int64_t decode_tokens = 16;
  int64_t window = 256;                    // bpb-recompute: tokens recomputed for each prediction
  // paging: requests with lognormal lengths (median, sigma; clipped to
  // [16, length]) held in paged pools of each block size, against a
  // contiguous reservation of `length` tokens per request.
  int64_t requests = 256, median = 0;      // median 0: length / 8
  double sigma = 1.0;
  std::vector<int64_t> block_sizes = {1, 16, 64, 256};
  // RULER's tasks: tokens generated per prompt (0: RULER's, per task) and its
  // worked example before vt and cwe (-1: RULER's one; 0 drops it).
  int64_t tokens_to_generate = 0, fewshot = -1;
  // Dataset tasks (longbench-*, infinitebench-*; evals/tasks/longbench.cpp): the
  // user's JSONL file, whether the question is in what the policies compress
  // (query_aware, RULER's tasks too; false: the context is prefilled and
  // compressed first), and LongBench's middle truncation to the point's
  // length (false: an error).
  std::string file;
  bool query_aware = true, truncate = true;
  // RULER's and the dataset tasks: the prompt sent as one user message
  // through the model's chat template (its tokenizer_config.json's
  // chat_template; core/model/chat_template.h) before tokenising; false: the
  // plain text with BOS.
  bool chat = false;
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
  std::map<std::string, SweepTaskOptions> task_options;
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
