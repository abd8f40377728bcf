// The tensors of a Llama-family checkpoint in Hugging Face layout: names,
// shapes and what each one is, in the order kvlab saves them. The one list
// that the engine's loader and saver and the trainer read. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_config.h"

namespace kvlab {

enum class LlamaTensor { kEmbed, kInputNorm, kQ, kK, kV, kO, kPostNorm, kGate, kUp, kDown, kFinalNorm, kLmHead };

struct LlamaTensorSpec {
  std::string name;            // e.g. "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for projections
  LlamaTensor role;
  int64_t layer = -1;          // -1 outside the layers
};

// "model.layers.<i>.<rest>".
std::string LlamaLayerTensorName(int64_t layer, const char* rest);

// Every tensor of a config, in save order: embeddings, each layer's nine,
// the final norm, and lm_head unless the embeddings are tied.
std::vector<LlamaTensorSpec> LlamaTensorSpecs(const ModelConfig& c);

}  // namespace kvlab
