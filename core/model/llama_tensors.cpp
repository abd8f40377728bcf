#include "core/model/llama_tensors.h"

namespace kvlab {

std::string LlamaLayerTensorName(int64_t layer, const char* rest) {
  return "model.layers." + std::to_string(layer) + "." + rest;
}

std::vector<LlamaTensorSpec> LlamaTensorSpecs(const ModelConfig& c) {
  const int64_t D = c.hidden_size, d = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const DecoderSpec& f = c.spec;
  const std::string& pre = f.tensor_prefix;
  std::vector<LlamaTensorSpec> s = {{pre + "model.embed_tokens.weight", {V, D}, LlamaTensor::kEmbed, -1}};
  struct PerLayer {
    const char* rest;
    LlamaTensor role;
    std::vector<int64_t> shape;
  };
  using T = LlamaTensor;
  std::vector<PerLayer> per_layer = {{"input_layernorm.weight", T::kInputNorm, {D}}};
  if (f.fused_qkv) {
    per_layer.push_back({"self_attn.qkv_proj.weight", T::kQKV, {(Hq + 2 * Hkv) * d, D}});
  } else {
    per_layer.push_back({"self_attn.q_proj.weight", T::kQ, {Hq * d, D}});
    per_layer.push_back({"self_attn.k_proj.weight", T::kK, {Hkv * d, D}});
    per_layer.push_back({"self_attn.v_proj.weight", T::kV, {Hkv * d, D}});
  }
  if (f.qkv_bias) {
    per_layer.push_back({"self_attn.q_proj.bias", T::kQBias, {Hq * d}});
    per_layer.push_back({"self_attn.k_proj.bias", T::kKBias, {Hkv * d}});
    per_layer.push_back({"self_attn.v_proj.bias", T::kVBias, {Hkv * d}});
  }
  if (f.qk_norm) {
    per_layer.push_back({"self_attn.q_norm.weight", T::kQNorm, {d}});
    per_layer.push_back({"self_attn.k_norm.weight", T::kKNorm, {d}});
  }
  per_layer.push_back({"self_attn.o_proj.weight", T::kO, {D, Hq * d}});
  if (f.o_bias) per_layer.push_back({"self_attn.o_proj.bias", T::kOBias, {D}});
  per_layer.push_back({"post_attention_layernorm.weight", T::kPostNorm, {D}});
  if (f.sandwich_norms) {
    per_layer.push_back({"pre_feedforward_layernorm.weight", T::kPreFfnNorm, {D}});
    per_layer.push_back({"post_feedforward_layernorm.weight", T::kPostFfnNorm, {D}});
  }
  if (f.fused_gate_up) {
    per_layer.push_back({"mlp.gate_up_proj.weight", T::kGateUp, {2 * I, D}});
  } else {
    per_layer.push_back({"mlp.gate_proj.weight", T::kGate, {I, D}});
    per_layer.push_back({"mlp.up_proj.weight", T::kUp, {I, D}});
  }
  per_layer.push_back({"mlp.down_proj.weight", T::kDown, {D, I}});
  if (f.mlp_bias) {
    per_layer.push_back({"mlp.gate_proj.bias", T::kGateBias, {I}});
    per_layer.push_back({"mlp.up_proj.bias", T::kUpBias, {I}});
    per_layer.push_back({"mlp.down_proj.bias", T::kDownBias, {D}});
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (const PerLayer& t : per_layer) s.push_back({pre + LlamaLayerTensorName(i, t.rest), t.shape, t.role, i});
  }
  s.push_back({pre + "model.norm.weight", {D}, T::kFinalNorm, -1});
  if (!c.tie_word_embeddings) s.push_back({pre + "lm_head.weight", {V, D}, T::kLmHead, -1});
  return s;
}

}  // namespace kvlab
