// Llama-family model hyperparameters: read from and written to Hugging Face
// config.json, or taken from named presets (real model shapes, used with random
// weights for memory and latency work). Torch-free; the model loader, the memory
// calculator and `kvlab train` call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvlab {

// HF "rope_scaling". Only Llama 3's frequency-dependent scaling is supported.
struct RopeScaling {
  std::string rope_type;  // "" (none) or "llama3"
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string name;  // preset name, or HF "_name_or_path" / the config's directory
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0,
          num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 2048;  // HF LlamaConfig's default
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;  // -1: none
  // HF "sliding_window" as config.json states it (0: none); which layers use it
  // is layer_sliding_window's business.
  int64_t sliding_window = 0;
  // Per layer: 0 = global (full) attention, else the sliding window in tokens
  // (HF's rule: key j is visible from query i when i - window < j <= i).
  // Empty = every layer global. Filled by LoadModelConfig per family.
  std::vector<int64_t> layer_sliding_window;
  std::string torch_dtype = "float32";  // informational: the dtype weights are stored in

  // Bytes of K and V per token over all layers: 2 * L * H_kv * d_h * bytes_per_elem.
  int64_t KVBytesPerToken(int bytes_per_elem) const;
  // Checks sizes and ratios; `source` (a file or "preset X") starts every message.
  Status Validate(const std::string& source) const;
};

// Reads an HF config.json (model_type llama or mistral) and validates it. Missing
// num_key_value_heads / head_dim take HF's defaults (num_attention_heads,
// hidden_size / num_attention_heads); a list eos_token_id gives its first entry.
Status LoadModelConfig(const std::string& config_json_path, ModelConfig* out);
// Writes config.json in HF layout (model_type "llama", LlamaForCausalLM) so that
// transformers can load what kvlab trains.
Status SaveModelConfig(const std::string& path, const ModelConfig& config);

// Named shapes: llama-2-7b, llama-3.1-8b, llama-3.1-70b, mistral-7b, small.
Status PresetConfig(const std::string& name, ModelConfig* out);
std::vector<std::string> PresetNames();

}  // namespace kvlab
