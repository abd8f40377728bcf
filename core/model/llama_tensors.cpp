#include "core/model/llama_tensors.h"

namespace kvlab {

std::string LlamaLayerTensorName(int64_t layer, const char* rest) {
  return "model.layers." + std::to_string(layer) + "." + rest;
}

std::vector<LlamaTensorSpec> LlamaTensorSpecs(const ModelConfig& c) {
  const int64_t D = c.hidden_size, d = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  std::vector<LlamaTensorSpec> s = {{"model.embed_tokens.weight", {V, D}, LlamaTensor::kEmbed, -1}};
  struct PerLayer {
    const char* rest;
    LlamaTensor role;
    std::vector<int64_t> shape;
  };
  const std::vector<PerLayer> per_layer = {
      {"input_layernorm.weight", LlamaTensor::kInputNorm, {D}},
      {"self_attn.q_proj.weight", LlamaTensor::kQ, {Hq * d, D}},
      {"self_attn.k_proj.weight", LlamaTensor::kK, {Hkv * d, D}},
      {"self_attn.v_proj.weight", LlamaTensor::kV, {Hkv * d, D}},
      {"self_attn.o_proj.weight", LlamaTensor::kO, {D, Hq * d}},
      {"post_attention_layernorm.weight", LlamaTensor::kPostNorm, {D}},
      {"mlp.gate_proj.weight", LlamaTensor::kGate, {I, D}},
      {"mlp.up_proj.weight", LlamaTensor::kUp, {I, D}},
      {"mlp.down_proj.weight", LlamaTensor::kDown, {D, I}},
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (const PerLayer& t : per_layer) s.push_back({LlamaLayerTensorName(i, t.rest), t.shape, t.role, i});
  }
  s.push_back({"model.norm.weight", {D}, LlamaTensor::kFinalNorm, -1});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {V, D}, LlamaTensor::kLmHead, -1});
  return s;
}

}  // namespace kvlab
