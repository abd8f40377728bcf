// serve-bench: runs a seeded chat workload through the scheduler over a KV
// pool of a given size and policy stack, on the real engine or model-free at
// real model shapes, and reports throughput, time to first token, time per
// output token, preemptions, recomputed tokens, the prefix-cache hit rate,
// pool occupancy over time and the share of KV memory holding real tokens. Configs are TOML; every
// unknown key or bad value is an error naming file:line:column. The CLI's
// `kvlab serve-bench` calls RunServeBench (core/serve/engine_executor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/serve/model_free_executor.h"
#include "core/serve/scheduler.h"
#include "core/serve/workload.h"

namespace kvlab {

// A serve-bench config (see docs/scenarios.md for a commented example):
//   model = "llama-3.1-70b"   preset, or HF directory (relative to the config's directory)
//   model_free = true         true: memory-only pools and dummy tokens, time in steps
//   kv_dtype = "bf16"         block_size = 16
//   pool_gb = 15.0            or pool_blocks = N (plain blocks; encoded_pool_blocks with an encoding)
//   plain_pool_gb = 1.0       optional, with an encoding stack: the plain pool's share of pool_gb
//   split_request_tokens = 0  with an encoding stack and no plain_pool_gb: the request length the automatic
//                             split sizes the pools for; 0: the workload's mean (ServePoolSpec::request_tokens)
//   max_num_batched_tokens = 2048   max_num_seqs = 64   max_prefill_chunk = 0   watermark = 0.01
//   max_context = 0           per-request cap on prompt + answer: the client drops the oldest history
//   max_steps = 100000
//   prefix_caching = true     share cached full blocks across requests; default: on for `full` (and head
//                             sharing alone), off for other stacks; true with a stack that cannot share is an error
//   weight_seed = 0   attention = "cpu"   threads = 0        (engine only)
//   [[policy]]  name = "quant" ...                          (the stack; default full)
//   [workload]  seed = 1
//   [[workload.users]]  name, count, start, arrival_rate, turns, user_tokens,
//                       output_tokens, think_steps, system_tokens
// A distribution is a number (fixed) or a table: {dist = "lognormal",
// median, sigma, min, max}, {dist = "pareto", alpha, scale, max},
// {dist = "exponential", mean, min, max}, {dist = "uniform", min, max}.
struct ServeBenchConfig {
  std::string path;              // the config file, for messages
  std::vector<std::string> sets; // --set KEY=VALUE overrides applied to it, in order
  bool model_free = true;
  EngineOptions engine;          // model, block_size, kv_dtype; weight_seed, attention, num_threads for the engine
  std::vector<PolicySpec> policies;
  ServePoolSpec pool;
  SchedulerOptions scheduler;
  int64_t max_context = 0;
  int64_t max_steps = 100000;
  WorkloadSpec workload;
};

struct ServeBenchOverrides {
  std::string csv_path;   // pool occupancy per step; "" = none
  std::string json_path;  // appends the summary as one JSON line; "" = none
  int64_t max_steps = 0;  // > 0 replaces the config's
  std::vector<std::string> sets;  // --set KEY=VALUE, applied to the config as it is read
  int threads = -1;       // >= 0 replaces the config's threads (engine only; 0: all cores)
};

struct Percentiles {
  int64_t count = 0;
  double median = 0, p90 = 0, p99 = 0, mean = 0;
};
// Nearest-rank percentiles of `values` (sorted in place).
Percentiles ComputePercentiles(std::vector<double>* values);

struct ServeBenchResult {
  std::string executor, model, policy;
  CacheShape shape;
  int64_t plain_pool_bytes = 0, encoded_pool_bytes = 0;
  int64_t split_request_tokens = 0;  // the request length the automatic plain/encoded split was sized for; 0: none
  int64_t kv_bytes_per_token = 0;  // uncompressed, stored heads: 2 * L * H_kv * d_h * b
  int64_t steps = 0;               // steps that ran a batch
  double end_time = 0;             // clock at the end, in steps (idle gaps included)
  bool hit_max_steps = false;
  double wall_ms = 0;              // engine: time inside steps
  int64_t conversations = 0, requests = 0, finished = 0, rejected = 0, aborted = 0, truncated_turns = 0;
  int64_t unfinished = 0;
  std::vector<std::string> reject_reasons;  // the first few
  int64_t prompt_tokens = 0, output_tokens = 0, batched_tokens = 0;
  int64_t preemptions = 0, preempted_requests = 0, recomputed_tokens = 0;
  // Prefix caching: prompt tokens of finished requests served from the cache
  // at their first admission (the hit rate is this over prompt_tokens), and
  // tokens served from it when preempted requests were admitted again.
  bool prefix_caching = false;
  int prefix_unit_tokens = 0;
  int64_t prompt_cached_tokens = 0, readmission_cached_tokens = 0;
  double mean_cached_only_bytes = 0;  // blocks only the cache holds (free for allocation), step average
  double mean_shared_saved_bytes = 0; // what running requests' shared blocks would take again unshared, step average
  double prefix_hit_rate() const {
    return prompt_tokens > 0 ? static_cast<double>(prompt_cached_tokens) / static_cast<double>(prompt_tokens) : 0.0;
  }
  Percentiles ttft_steps, tpot_steps, ttft_ms, tpot_ms;
  double mean_running = 0;
  int64_t peak_running = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t peak_plain_bytes = 0, peak_encoded_bytes = 0;  // each pool's own peak
  // Bytes in use are the blocks requests hold (each shared block once);
  // blocks only the prefix cache holds are counted apart (cached_only).
  double mean_occupancy = 0;       // device bytes in use / pool bytes, averaged over steps
  // Placement (offload): the device pools' bytes held by requests after each
  // step (peak: the pools' own peak, staging blocks included) and those moved
  // to host memory and disk. Without offloading, device = bytes in use.
  bool offload = false;
  int64_t peak_device_bytes = 0, peak_host_bytes = 0, peak_disk_bytes = 0;
  double mean_device_bytes = 0, mean_host_bytes = 0, mean_disk_bytes = 0;
  double token_share_of_used = 0;  // bytes of real token slots / bytes in use (blocks held), step average
  double token_share_of_pool = 0;  // bytes of real token slots / pool bytes, step average
  // The request that held the most KV memory at any step.
  int64_t largest_request_bytes = 0, largest_request_tokens = 0;
  std::string largest_request_class;
  struct ClassStats {
    std::string name;
    int64_t requests = 0, finished = 0, preemptions = 0, recomputed_tokens = 0, max_tokens = 0;
    Percentiles ttft_steps, tpot_steps;
  };
  std::vector<ClassStats> classes;
};

// `sets`: KEY=VALUE overrides (as `kvlab run --set`), applied before the keys are read.
Status ParseServeBenchConfig(const std::string& text, const std::string& path, ServeBenchConfig* out,
                             const std::vector<std::string>& sets = {});
Status LoadServeBenchConfig(const std::string& path, ServeBenchConfig* out, const std::vector<std::string>& sets = {});

// A preset, or a directory with config.json.
Status ResolveServeModel(const std::string& model, ModelConfig* out);
// Runs the config's workload on `executor` (built for the config).
Status RunServeBenchWith(const ServeBenchConfig& config, StepExecutor* executor, const ServeBenchOverrides& overrides,
                         ServeBenchResult* out);
// The report `kvlab serve-bench` prints.
std::string FormatServeBenchReport(const ServeBenchConfig& config, const ServeBenchResult& result);
// The pools a config asks for: config.pool, with request_tokens (when 0,
// pool_gb is split automatically and the stack seals an encoding) set to
// the mean tokens (prompt + answer) of the workload's requests.
Status ServePoolFor(const ServeBenchConfig& config, const ModelConfig& model, ServePoolSpec* out);
// The model-free executor of a config (REQUIRES: config.model_free).
Status NewModelFreeServeExecutor(const ServeBenchConfig& config, std::unique_ptr<StepExecutor>* out);

}  // namespace kvlab
