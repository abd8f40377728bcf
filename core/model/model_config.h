// Room core/model/: model configs and presets, loaders, the model, memory calculator.
// Called by core/tokenizer, core/engine, core/serve, datasets and evals; includes core/cache and below.
//
// Llama-family model hyperparameters: read from and written to Hugging Face
// config.json, or taken from named presets (real model shapes, used with random
// weights for memory and latency work). Torch-free; the model loader, the memory
// calculator and `kvlab train` call it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/cache/cache_shape.h"

namespace kvlab {

// HF "rope_scaling": Llama 3's frequency-dependent scaling, linear (position
// interpolation: every frequency divided by `factor`), or phi3's LongRoPE
// (per-frequency short/long factors, cos and sin times attention_factor).
struct RopeScaling {
  std::string rope_type;  // "" (none), "llama3", "linear" or "longrope"
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  std::vector<double> short_factor, long_factor;  // longrope: [rotary_dim / 2] each
  double attention_factor = 1.0;                   // longrope
};

// What transformers' modelling files vary between the decoder families kvlab
// runs (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text): one
// description that the model, the tensor list, the memory calculator and
// `kvlab convert` read. Defaults are Llama's.
struct DecoderSpec {
  std::string model_type = "llama";
  bool qkv_bias = false;     // q/k/v projections carry biases (qwen2; llama attention_bias)
  bool o_bias = false;       // o_proj carries a bias (llama attention_bias)
  bool mlp_bias = false;     // gate/up/down carry biases (llama mlp_bias)
  bool qk_norm = false;      // per-head RMSNorm of q and k over head_dim before RoPE (qwen3, gemma3)
  bool fused_qkv = false;    // self_attn.qkv_proj (phi3): q, k, v rows in that order
  bool fused_gate_up = false;  // mlp.gate_up_proj (phi3): gate rows, then up rows
  bool norm_one_plus = false;  // RMSNorm scales by (1 + w) (gemma)
  bool sandwich_norms = false;  // gemma2/3: post-attention, pre- and post-feedforward norms
  bool scale_embeddings = false;  // embeddings times sqrt(hidden_size) (gemma)
  std::string hidden_act = "silu";  // or "gelu_pytorch_tanh" (gemma)
  double partial_rotary_factor = 1.0;  // phi3: RoPE on the first head_dim * f channels
  double query_pre_attn_scalar = 0;    // scale = this^-1/2; 0: head_dim^-1/2
  double attn_logit_softcapping = 0;   // 0: none
  double final_logit_softcapping = 0;  // 0: none
  double rope_local_base_freq = 0;     // gemma3: RoPE base of sliding layers (default RoPE); 0: as global
  std::string tensor_prefix;           // "language_model." for multimodal gemma3 checkpoints
  std::string architecture = "LlamaForCausalLM";
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
  DecoderSpec spec;

  // Window of layer `l` in tokens, 0 when global.
  int64_t LayerWindow(int64_t l) const {
    return l < static_cast<int64_t>(layer_sliding_window.size()) ? layer_sliding_window[static_cast<size_t>(l)] : 0;
  }
  // Channels of each head that RoPE rotates (head_dim unless partial_rotary_factor < 1).
  int64_t RotaryDim() const;

  // Keeps the first n layers (n < num_hidden_layers; larger n keeps all) and
  // their per-layer settings: `--layers` of a preset or of `kvlab init`.
  void KeepFirstLayers(int64_t n) {
    num_hidden_layers = std::min(num_hidden_layers, n);
    if (layer_sliding_window.size() > static_cast<size_t>(num_hidden_layers)) {
      layer_sliding_window.resize(static_cast<size_t>(num_hidden_layers));
    }
  }
  // Bytes of K and V per token over all layers: 2 * L * H_kv * d_h * bytes_per_elem.
  int64_t KVBytesPerToken(int bytes_per_elem) const;
  // Checks sizes and ratios; `source` (a file or "preset X") starts every message.
  Status Validate(const std::string& source) const;
  Status ValidateSpec(const std::string& source) const;
};

// What the KV cache needs of a model (DeriveCacheShape's input): its layers,
// KV heads, head_dim and per-layer sliding windows.
inline ModelKvShape KvShapeOf(const ModelConfig& c) {
  ModelKvShape m;
  m.num_layers = static_cast<int>(c.num_hidden_layers);
  m.num_kv_heads = static_cast<int>(c.num_key_value_heads);
  m.head_dim = static_cast<int>(c.head_dim);
  m.layer_window = c.layer_sliding_window;
  return m;
}

// Reads an HF config.json (model_type llama, mistral, qwen2, qwen3, phi3,
// gemma2, gemma3_text, or gemma3 with a text_config) and validates it. Missing
// keys take the family's HF defaults; a list eos_token_id gives its first
// entry. An unknown model_type, or a value the model does not implement
// (rope_scaling type, hidden_act, ...), is an error naming the file and key.
Status LoadModelConfig(const std::string& config_json_path, ModelConfig* out);
// The KV shape only (layers, KV heads, head_dim, per-layer windows) of any
// decoder config.json, for `kvlab memory`: the families above are parsed in
// full; another model_type that states num_hidden_layers, num_attention_heads
// (or num_key_value_heads) and head_dim (or hidden_size) gets its shape and
// *unverified = that model_type.
Status LoadKvShape(const std::string& config_json_path, ModelConfig* out, std::string* unverified);
// Writes config.json in HF layout, of the config's own family, so that
// transformers can load what kvlab writes.
Status SaveModelConfig(const std::string& path, const ModelConfig& config);

// Named shapes: llama-2-7b, llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2.5-7b,
// qwen3-8b, phi-3-mini, gemma-2-9b, gemma-3-12b, small.
Status PresetConfig(const std::string& name, ModelConfig* out);
std::vector<std::string> PresetNames();

// A model as every command names it: a preset, a config.json path (ending in
// .json) or a model directory. ModelConfigPath is the config.json it names
// (MODEL itself, or MODEL/config.json); ModelNotFound the error for a model
// that is neither a preset nor a readable `path`, listing the presets.
std::string ModelConfigPath(const std::string& model);
Status ModelNotFound(const std::string& model, const std::string& path);
// The preset's config, or the config.json ModelConfigPath names (LoadModelConfig).
Status ResolveModelConfig(const std::string& model, ModelConfig* out);

}  // namespace kvlab
