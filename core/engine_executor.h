// The scheduler's StepExecutor over the real Engine: greedy (argmax) next
// tokens from the engine's logits, pools sized from a ServePoolSpec. Lives in
// kvlab_model (it creates an Engine); its header is torch-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/model_free_executor.h"
#include "core/scheduler.h"

namespace kvlab {

// `options` gives the model, weights, attention backend, threads, block size
// and storage dtype; its pool fields (num_blocks, max_seqs, max_context) are
// replaced by the plan of `pool`. `model` is options.model's config.
Status NewEngineExecutor(const EngineOptions& options, const ModelConfig& model, const std::vector<PolicySpec>& policies,
                         const ServePoolSpec& pool, std::unique_ptr<StepExecutor>* out);

}  // namespace kvlab
