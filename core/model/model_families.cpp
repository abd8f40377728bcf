#include "core/model/model_families.h"

#include <algorithm>

#include "core/model/config_json.h"

namespace kvlab {
namespace {

using json = nlohmann::json;
using namespace config_json;

bool IsGemma(const std::string& mt) { return mt == "gemma2" || mt == "gemma3_text"; }

// A number key whose null means "off" (0), as HF's Optional[float] fields.
Status GetOptionalDouble(const std::string& file, const json& j, const std::string& key, double* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = 0;
    return Status::OK();
  }
  return GetDouble(file, j, key, false, out);
}

// HF's "layer_types": "full_attention" or "sliding_attention" per layer.
Status ParseLayerTypes(const std::string& file, const json& types, ModelConfig* c) {
  if (!types.is_array() || static_cast<int64_t>(types.size()) != c->num_hidden_layers) {
    return Status::InvalidArgument(file + ": key 'layer_types' must be a list of " +
                                   std::to_string(c->num_hidden_layers) + " strings (num_hidden_layers)");
  }
  c->layer_sliding_window.assign(types.size(), 0);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == "sliding_attention") {
      if (c->sliding_window <= 0) {
        return Status::InvalidArgument(file + ": key 'layer_types' names sliding_attention layers but "
                                       "'sliding_window' is not a positive integer");
      }
      c->layer_sliding_window[i] = c->sliding_window;
    } else if (types[i] != "full_attention") {
      return Status::InvalidArgument(file + ": key 'layer_types' entry " + std::to_string(i) + " is " +
                                     QuoteJson(types[i]) + "; kvlab models \"full_attention\" and \"sliding_attention\"");
    }
  }
  return Status::OK();
}

void AllLayers(ModelConfig* c, int64_t window) {
  c->layer_sliding_window.assign(static_cast<size_t>(c->num_hidden_layers), window);
}

Status CheckActivation(const std::string& file, const json& j, const std::string& mt, DecoderSpec* s) {
  // Gemma's MLP reads hidden_activation (its configs carry hidden_act too, unused).
  const char* key = IsGemma(mt) ? "hidden_activation" : "hidden_act";
  const std::string expected = IsGemma(mt) ? "gelu_pytorch_tanh" : "silu";
  auto it = j.find(key);
  if (IsGemma(mt) && (it == j.end() || it->is_null())) {  // Gemma falls back to hidden_act
    key = "hidden_act";
    it = j.find(key);
  }
  if (it != j.end() && !(it->is_null() && IsGemma(mt)) && *it != expected) {
    return Status::InvalidArgument(file + ": key '" + key + "' is " + QuoteJson(*it) + "; kvlab's " + mt +
                                   " supports \"" + expected + "\"");
  }
  s->hidden_act = expected;
  return Status::OK();
}

// Qwen2/Qwen3: layers from max_window_layers on slide, when use_sliding_window.
Status QwenWindows(const std::string& file, const json& j, ModelConfig* c) {
  bool use = false;
  KVLAB_RETURN_IF_ERROR(GetBool(file, j, "use_sliding_window", &use));
  if (!use) {  // HF sets sliding_window to None: every layer global, and sliding layer_types an error
    const auto types = j.find("layer_types");
    if (types != j.end() && types->is_array()) {
      for (const json& t : *types) {
        if (t == "sliding_attention") {
          return Status::InvalidArgument(file + ": key 'layer_types' names sliding_attention layers but "
                                         "'use_sliding_window' is false, so transformers has no 'sliding_window'");
        }
      }
    }
    return Status::OK();
  }
  if (j.contains("layer_types") && !j["layer_types"].is_null()) return ParseLayerTypes(file, j["layer_types"], c);
  int64_t first = 0;
  KVLAB_RETURN_IF_ERROR(GetInt(file, j, "max_window_layers", false, &first));
  if (c->sliding_window <= 0) {
    return Status::InvalidArgument(file + ": key 'use_sliding_window' is true but 'sliding_window' is not a positive "
                                   "integer");
  }
  AllLayers(c, 0);
  for (int64_t i = first; i < c->num_hidden_layers; ++i) c->layer_sliding_window[static_cast<size_t>(i)] = c->sliding_window;
  return Status::OK();
}

Status GemmaFields(const std::string& file, const json& j, ModelConfig* c) {
  DecoderSpec& s = c->spec;
  s.norm_one_plus = s.sandwich_norms = s.scale_embeddings = true;
  KVLAB_RETURN_IF_ERROR(GetDouble(file, j, "query_pre_attn_scalar", true, &s.query_pre_attn_scalar));
  KVLAB_RETURN_IF_ERROR(GetOptionalDouble(file, j, "attn_logit_softcapping", &s.attn_logit_softcapping));
  KVLAB_RETURN_IF_ERROR(GetOptionalDouble(file, j, "final_logit_softcapping", &s.final_logit_softcapping));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) return ParseLayerTypes(file, j["layer_types"], c);
  if (c->sliding_window <= 0) {
    return Status::InvalidArgument(file + ": key 'sliding_window' must be a positive integer for " + s.model_type);
  }
  AllLayers(c, 0);
  if (s.model_type == "gemma2") {  // Gemma 2: even layers local, odd ones global
    for (int64_t i = 0; i < c->num_hidden_layers; i += 2) c->layer_sliding_window[static_cast<size_t>(i)] = c->sliding_window;
    return Status::OK();
  }
  int64_t pattern = 6;
  KVLAB_RETURN_IF_ERROR(GetInt(file, j, "sliding_window_pattern", false, &pattern));
  if (pattern < 1) return Status::InvalidArgument(file + ": key 'sliding_window_pattern' must be >= 1");
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
    if ((i + 1) % pattern != 0) c->layer_sliding_window[static_cast<size_t>(i)] = c->sliding_window;
  }
  return Status::OK();
}

}  // namespace

std::vector<std::string> FamilyNames() {
  return {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "gemma3"};
}

bool IsKnownFamily(const std::string& model_type) {
  for (const std::string& n : FamilyNames()) {
    if (n == model_type) return true;
  }
  return false;
}

void AddFamilyDefaults(const std::string& mt, json* j) {
  json d = json::object();
  if (mt == "mistral") {
    d = {{"max_position_embeddings", 4096 * 32}, {"sliding_window", 4096}, {"num_key_value_heads", 8},
         {"rms_norm_eps", 1e-6}};
  } else if (mt == "qwen2" || mt == "qwen3") {
    d = {{"max_position_embeddings", 32768}, {"use_sliding_window", false}, {"sliding_window", 4096},
         {"max_window_layers", 28}, {"num_key_value_heads", 32}, {"rms_norm_eps", 1e-6}};
    if (mt == "qwen3") d["head_dim"] = 128;
  } else if (mt == "phi3") {
    d = {{"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5}};
  } else if (mt == "gemma2") {
    d = {{"head_dim", 256},          {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
         {"final_logit_softcapping", 30.0}, {"attn_logit_softcapping", 50.0}, {"tie_word_embeddings", true},
         {"max_position_embeddings", 8192}, {"num_key_value_heads", 4}, {"rms_norm_eps", 1e-6}};
  } else if (mt == "gemma3_text") {
    d = {{"vocab_size", 262208},     {"hidden_size", 2304},
         {"intermediate_size", 9216}, {"num_hidden_layers", 26},
         {"num_attention_heads", 8},  {"num_key_value_heads", 4},
         {"head_dim", 256},           {"rms_norm_eps", 1e-6},
         {"rope_theta", 1000000.0},   {"max_position_embeddings", 131072},
         {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
         {"rope_local_base_freq", 10000.0}, {"sliding_window_pattern", 6},
         {"tie_word_embeddings", true}, {"bos_token_id", 2},
         {"eos_token_id", 1},         {"pad_token_id", 0}};
  }
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (!j->contains(it.key())) (*j)[it.key()] = it.value();
  }
}

Status ParseFamily(const std::string& file, const json& j, ModelConfig* c) {
  DecoderSpec& s = c->spec;
  const std::string mt = s.model_type;
  KVLAB_RETURN_IF_ERROR(CheckActivation(file, j, mt, &s));
  if (mt != "phi3" && j.contains("partial_rotary_factor") && j["partial_rotary_factor"] != 1.0) {
    return Status::InvalidArgument(file + ": key 'partial_rotary_factor' is " + QuoteJson(j["partial_rotary_factor"]) +
                                   "; kvlab applies it to phi3 only");
  }
  bool bidirectional = false;
  KVLAB_RETURN_IF_ERROR(GetBool(file, j, "use_bidirectional_attention", &bidirectional));
  if (bidirectional) {
    return Status::InvalidArgument(file + ": key 'use_bidirectional_attention' is true; kvlab models causal decoders");
  }
  bool attention_bias = false;
  if (mt != "mistral" && mt != "phi3" && mt != "qwen2") {
    KVLAB_RETURN_IF_ERROR(GetBool(file, j, "attention_bias", &attention_bias));
  }
  s.qkv_bias = s.o_bias = attention_bias;
  c->layer_sliding_window.clear();
  if (mt == "llama") {
    s.architecture = "LlamaForCausalLM";
    KVLAB_RETURN_IF_ERROR(GetBool(file, j, "mlp_bias", &s.mlp_bias));
  } else if (mt == "mistral") {
    s.architecture = "MistralForCausalLM";
    if (c->sliding_window > 0) AllLayers(c, c->sliding_window);
  } else if (mt == "qwen2" || mt == "qwen3") {
    s.architecture = mt == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
    if (mt == "qwen2") s.qkv_bias = true;  // Qwen2's q/k/v always carry biases, o_proj none
    s.qk_norm = mt == "qwen3";
    KVLAB_RETURN_IF_ERROR(QwenWindows(file, j, c));
  } else if (mt == "phi3") {
    s.architecture = "Phi3ForCausalLM";
    s.fused_qkv = s.fused_gate_up = true;
    KVLAB_RETURN_IF_ERROR(GetDouble(file, j, "partial_rotary_factor", false, &s.partial_rotary_factor));
    if (c->sliding_window > 0) AllLayers(c, c->sliding_window);
  } else if (mt == "gemma2") {
    s.architecture = "Gemma2ForCausalLM";
    KVLAB_RETURN_IF_ERROR(GemmaFields(file, j, c));
  } else if (mt == "gemma3_text") {
    s.architecture = "Gemma3ForCausalLM";
    s.qk_norm = true;
    KVLAB_RETURN_IF_ERROR(GemmaFields(file, j, c));
    // Gemma3Attention stores attn_logit_softcapping but never passes it to the
    // attention function: transformers computes without it, and so does kvlab.
    s.attn_logit_softcapping = 0;
    KVLAB_RETURN_IF_ERROR(GetDouble(file, j, "rope_local_base_freq", true, &s.rope_local_base_freq));
  } else {
    return Status::InvalidArgument(file + ": key 'model_type' is \"" + mt + "\", which kvlab does not model");
  }
  return Status::OK();
}

void WriteFamily(const ModelConfig& c, nlohmann::ordered_json* out) {
  nlohmann::ordered_json& j = *out;
  const DecoderSpec& s = c.spec;
  const std::string& mt = s.model_type;
  j["architectures"] = {s.architecture};
  j["model_type"] = mt;
  if (IsGemma(mt)) {
    j["hidden_activation"] = s.hidden_act;
    j["hidden_act"] = s.hidden_act;
    j["query_pre_attn_scalar"] = s.query_pre_attn_scalar;
    auto opt = [](double v) { return v > 0 ? json(v) : json(nullptr); };
    j["attn_logit_softcapping"] = opt(s.attn_logit_softcapping);
    j["final_logit_softcapping"] = opt(s.final_logit_softcapping);
    if (mt == "gemma3_text") j["rope_local_base_freq"] = s.rope_local_base_freq;
  } else {
    j["hidden_act"] = s.hidden_act;
  }
  if (mt == "llama") {
    j["attention_bias"] = s.qkv_bias;
    j["mlp_bias"] = s.mlp_bias;
  } else if (mt == "qwen3" || IsGemma(mt)) {
    j["attention_bias"] = s.qkv_bias;
  }
  if (mt == "phi3") j["partial_rotary_factor"] = s.partial_rotary_factor;
  bool any_window = false;
  int64_t first_window = c.num_hidden_layers;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (c.LayerWindow(i) > 0) {
      any_window = true;
      first_window = std::min(first_window, i);
    }
  }
  if (mt == "llama") return;
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (mt == "qwen2" || mt == "qwen3") {
    j["use_sliding_window"] = any_window;
    j["max_window_layers"] = first_window;
  }
  if (mt == "qwen2" || mt == "qwen3" || IsGemma(mt)) {
    json types = json::array();
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      types.push_back(c.LayerWindow(i) > 0 ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = types;
  }
  if (mt == "gemma3_text") {
    // Older transformers read the pattern, not layer_types: write it when it describes the layers.
    int64_t first_global = 0;
    while (first_global < c.num_hidden_layers && c.LayerWindow(first_global) > 0) ++first_global;
    const int64_t p = first_global + 1;
    bool fits = true;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) fits = fits && ((c.LayerWindow(i) > 0) == ((i + 1) % p != 0));
    if (fits) j["sliding_window_pattern"] = p;
  }
}

}  // namespace kvlab
