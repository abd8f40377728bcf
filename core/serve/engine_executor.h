// The scheduler's StepExecutor over the real Engine: greedy (argmax) next
// tokens from the engine's logits, pools sized from a ServePoolSpec, and the
// serve-bench entry points that may create an Engine. Lives in
// kvlab_serve_engine (libtorch); its header is torch-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/serve/model_free_executor.h"
#include "core/serve/scheduler.h"
#include "core/serve/serve_bench.h"

namespace kvlab {

// `options` gives the model, weights, attention backend, threads, block size
// and storage dtype; its pool fields (num_blocks, max_seqs, max_context) are
// replaced by the plan of `pool`. `model` is options.model's config.
Status NewEngineExecutor(const EngineOptions& options, const ModelConfig& model, const std::vector<PolicySpec>& policies,
                         const ServePoolSpec& pool, std::unique_ptr<StepExecutor>* out);

// The executor a config asks for: model-free, or the engine.
Status NewServeExecutor(const ServeBenchConfig& config, std::unique_ptr<StepExecutor>* out);
// Loads the config, runs it, and writes the human-readable report (and the
// CSV / JSON line the overrides ask for).
Status RunServeBench(const std::string& toml_path, const ServeBenchOverrides& overrides, std::string* report);

}  // namespace kvlab
