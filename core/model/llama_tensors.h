// The tensors of a decoder checkpoint in Hugging Face layout, for every family
// DecoderSpec describes (biases, q/k norms, fused projections, Gemma's extra
// norms): names, shapes and what each one is, in the order kvlab saves them.
// The one list that the engine's loader and saver, the trainer and
// `kvlab convert` read. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_config.h"

namespace kvlab {

enum class LlamaTensor {
  kEmbed, kInputNorm, kQ, kK, kV, kO, kPostNorm, kGate, kUp, kDown, kFinalNorm, kLmHead,
  kQBias, kKBias, kVBias, kOBias, kQNorm, kKNorm, kQKV, kGateUp, kGateBias, kUpBias, kDownBias,
  kPreFfnNorm, kPostFfnNorm
};

struct LlamaTensorSpec {
  std::string name;            // e.g. "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for projections
  LlamaTensor role;
  int64_t layer = -1;          // -1 outside the layers
};

// "model.layers.<i>.<rest>" (no family prefix).
std::string LlamaLayerTensorName(int64_t layer, const char* rest);

// Every tensor of a config, in save order: embeddings, each layer's (the
// family's kinds), the final norm, and lm_head unless the embeddings are
// tied. Names carry config.spec.tensor_prefix.
std::vector<LlamaTensorSpec> LlamaTensorSpecs(const ModelConfig& c);

}  // namespace kvlab
