#include "core/model/model_config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/model/config_json.h"
#include "core/model/model_families.h"

namespace kvlab {
namespace {

using json = nlohmann::json;
using namespace config_json;

// Phi3's LongRoPE, as transformers' _compute_longrope_parameters reads it:
// factor defaults to max_position_embeddings / original, attention_factor to
// sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1).
Status ParseLongRope(const std::string& file, const json& j, const json& rs, RopeScaling* out) {
  const std::string f = file + " (rope_scaling)";
  out->rope_type = "longrope";
  out->original_max_position_embeddings = 4096;  // Phi3Config's default
  KVLAB_RETURN_IF_ERROR(GetInt(file, j, "original_max_position_embeddings", false,
                               &out->original_max_position_embeddings));
  KVLAB_RETURN_IF_ERROR(GetInt(f, rs, "original_max_position_embeddings", false, &out->original_max_position_embeddings));
  int64_t max_pos = 4096;
  KVLAB_RETURN_IF_ERROR(GetInt(file, j, "max_position_embeddings", false, &max_pos));
  if (out->original_max_position_embeddings <= 0) {
    return Status::InvalidArgument(file + ": key 'original_max_position_embeddings' must be positive");
  }
  out->factor = static_cast<double>(max_pos) / static_cast<double>(out->original_max_position_embeddings);
  if (rs.contains("factor") && !rs["factor"].is_null()) KVLAB_RETURN_IF_ERROR(GetDouble(f, rs, "factor", true, &out->factor));
  out->attention_factor = out->factor <= 1.0 ? 1.0
                                             : std::sqrt(1.0 + std::log(out->factor) /
                                                                   std::log(static_cast<double>(
                                                                       out->original_max_position_embeddings)));
  if (rs.contains("attention_factor") && !rs["attention_factor"].is_null()) {
    KVLAB_RETURN_IF_ERROR(GetDouble(f, rs, "attention_factor", true, &out->attention_factor));
  }
  for (const char* key : {"short_factor", "long_factor"}) {
    const auto it = rs.find(key);
    std::vector<double>& dst = std::string(key) == "short_factor" ? out->short_factor : out->long_factor;
    if (it == rs.end() || !it->is_array()) {
      return Status::InvalidArgument(file + ": key 'rope_scaling." + key + "' must be a list of numbers for longrope");
    }
    for (const json& v : *it) {
      if (!v.is_number()) return Status::InvalidArgument(file + ": key 'rope_scaling." + key + "' holds " + QuoteJson(v));
      dst.push_back(v.get<double>());
    }
  }
  return Status::OK();
}

Status ParseRopeScaling(const std::string& file, const json& j, const std::string& model_type, RopeScaling* out) {
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return Status::OK();
  if (!it->is_object()) {
    return Status::InvalidArgument(file + ": key 'rope_scaling' must be an object or null, got " + QuoteJson(*it));
  }
  // transformers renamed "type" to "rope_type"; configs in the wild carry either.
  auto t = it->find("rope_type");
  if (t == it->end()) t = it->find("type");
  if (t == it->end() || !t->is_string()) {
    return Status::InvalidArgument(file + ": key 'rope_scaling' needs a string 'rope_type'");
  }
  std::string type = t->get<std::string>();
  if (type == "default") return Status::OK();
  // Phi3Config maps the early names of LongRoPE ("su", "yarn") to longrope.
  if (model_type == "phi3" && (type == "su" || type == "yarn" || type == "longrope")) {
    return ParseLongRope(file, j, *it, out);
  }
  const std::string f = file + " (rope_scaling)";
  if (type == "linear") {
    out->rope_type = type;
    return GetDouble(f, *it, "factor", true, &out->factor);
  }
  if (type != "llama3") {
    return Status::InvalidArgument(file + ": key 'rope_scaling' (rope_scaling.rope_type / rope_scaling.type) is '" +
                                   QuoteBytes(type) + "', which kvlab does not implement for " + model_type +
                                   " (supported: default, linear, llama3, longrope for phi3, or null)");
  }
  out->rope_type = type;
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "factor", true, &out->factor));
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "low_freq_factor", true, &out->low_freq_factor));
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "high_freq_factor", true, &out->high_freq_factor));
  return GetInt(f, *it, "original_max_position_embeddings", true, &out->original_max_position_embeddings);
}

// The model_type (absent: llama). The multimodal "gemma3" wrapper is read as
// its text_config, whose tensors carry a "language_model." prefix.
Status ResolveFamily(const std::string& file, json* j, std::string* model_type, std::string* prefix) {
  *model_type = "llama";
  if (j->contains("model_type")) {
    const json& mt = (*j)["model_type"];
    if (!mt.is_string() || !IsKnownFamily(mt.get<std::string>())) {
      std::string known;
      for (const std::string& n : FamilyNames()) known += (known.empty() ? "" : ", ") + n;
      return Status::InvalidArgument(file + ": key 'model_type' is " + QuoteJson(mt) + "; kvlab models " + known);
    }
    *model_type = mt.get<std::string>();
  }
  if (*model_type == "gemma3") {
    const auto tc = j->find("text_config");
    if (tc == j->end() || !tc->is_object()) {
      return Status::InvalidArgument(file + ": key 'text_config' must be an object for model_type \"gemma3\"");
    }
    json text = *tc;
    for (const char* key : {"torch_dtype", "dtype", "_name_or_path"}) {
      if (j->contains(key) && !text.contains(key)) text[key] = (*j)[key];
    }
    *j = text;
    *model_type = "gemma3_text";
    *prefix = "language_model.";
  }
  return Status::OK();
}

Status WriteTextAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) return Status::IOError(tmp + ": cannot create: " + std::strerror(errno));
    o << text;
    o.close();
    if (!o) return Status::IOError(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError(path + ": cannot rename from " + tmp + ": " + std::strerror(errno));
  }
  return Status::OK();
}

Status ParseConfigJson(const std::string& path, json j, ModelConfig* out);

// Real shapes of the other families, from their published config.json.
template <class Make>
void AddFamilyPresets(std::vector<ModelConfig>* p, const Make&) {
  const std::pair<const char*, const char*> published[] = {
      {"qwen2.5-7b", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
        "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "hidden_act": "silu",
        "use_sliding_window": false, "sliding_window": 131072, "max_window_layers": 28, "tie_word_embeddings": false,
        "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"})"},
      {"qwen3-8b", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
        "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "hidden_act": "silu", "attention_bias": false, "use_sliding_window": false, "sliding_window": null,
        "max_window_layers": 36, "tie_word_embeddings": false, "bos_token_id": 151643, "eos_token_id": 151645,
        "torch_dtype": "bfloat16"})"},
      {"phi-3-mini", R"({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": null, "hidden_act": "silu", "sliding_window": 2047,
        "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
        "torch_dtype": "bfloat16"})"},
      {"gemma-2-9b", R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 3584,
        "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "torch_dtype": "float32"})"},
      {"gemma-3-12b", R"({"model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 3840,
        "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_local_base_freq": 10000.0,
        "sliding_window": 1024, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true, "bos_token_id": 2,
        "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "bfloat16"})"}};
  for (const auto& [name, text] : published) {
    ModelConfig c;
    const Status s = ParseConfigJson(std::string("preset ") + name, json::parse(text), &c);
    if (!s.ok()) continue;  // a broken literal shows as a missing preset, which model_config_test checks
    c.name = name;
    p->push_back(std::move(c));
  }
}

std::vector<ModelConfig> Presets() {
  auto make = [](const char* name, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                 int64_t kv_heads, double theta, int64_t max_pos, int64_t bos, int64_t eos) {
    ModelConfig c;
    c.name = name;
    c.vocab_size = vocab;
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.head_dim = hidden / heads;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = theta;
    c.max_position_embeddings = max_pos;
    c.bos_token_id = bos;
    c.eos_token_id = eos;
    c.torch_dtype = "bfloat16";
    return c;
  };
  RopeScaling llama3;
  llama3.rope_type = "llama3";
  llama3.factor = 8.0;
  llama3.low_freq_factor = 1.0;
  llama3.high_freq_factor = 4.0;
  llama3.original_max_position_embeddings = 8192;

  std::vector<ModelConfig> p;
  p.push_back(make("llama-2-7b", 32000, 4096, 11008, 32, 32, 32, 1e4, 4096, 1, 2));
  p.back().torch_dtype = "float16";
  p.push_back(make("llama-3.1-8b", 128256, 4096, 14336, 32, 32, 8, 5e5, 131072, 128000, 128001));
  p.back().rope_scaling = llama3;
  p.push_back(make("llama-3.1-70b", 128256, 8192, 28672, 80, 64, 8, 5e5, 131072, 128000, 128001));
  p.back().rope_scaling = llama3;
  p.push_back(make("mistral-7b", 32000, 4096, 14336, 32, 32, 8, 1e6, 32768, 1, 2));  // v0.2: no sliding window
  p.back().spec.model_type = "mistral";
  p.back().spec.architecture = "MistralForCausalLM";
  AddFamilyPresets(&p, make);
  // Byte-level testbed model: ids 0..255 are bytes, then BOS 256, EOS 257, PAD 258.
  p.push_back(make("small", 259, 256, 688, 4, 8, 2, 1e4, 4096, 256, 257));
  p.back().pad_token_id = 258;
  p.back().tie_word_embeddings = true;
  p.back().torch_dtype = "float32";
  return p;
}

}  // namespace

int64_t ModelConfig::KVBytesPerToken(int bytes_per_elem) const {
  return 2 * num_hidden_layers * num_key_value_heads * head_dim * static_cast<int64_t>(bytes_per_elem);
}

Status ModelConfig::Validate(const std::string& source) const {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings}};
  for (const auto& [key, v] : positive) {
    if (v <= 0) return Status::InvalidArgument(source + ": '" + key + "' must be positive, got " + std::to_string(v));
  }
  // Upper bounds far past every published model (Llama 3.1 405B: 126 layers,
  // 16384 hidden), checked before anything is sized by them: a config.json with
  // num_hidden_layers = 3000000 against a 2-layer checkpoint took 5 GB first.
  struct Bound {
    const char* key;
    int64_t value, max;
  };
  const Bound bounded[] = {{"vocab_size", vocab_size, kMaxVocabSize},
                           {"hidden_size", hidden_size, int64_t{1} << 18},
                           {"intermediate_size", intermediate_size, int64_t{1} << 20},
                           {"num_hidden_layers", num_hidden_layers, 4096},
                           {"num_attention_heads", num_attention_heads, 4096},
                           {"head_dim", head_dim, 4096},
                           {"max_position_embeddings", max_position_embeddings, int64_t{1} << 30}};
  for (const Bound& b : bounded) {
    const Status s = CheckIntIn(std::string("'") + b.key + "'", b.value, 1, b.max);
    if (!s.ok()) return Status::InvalidArgument(source + ": " + s.message());
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return Status::InvalidArgument(source + ": 'num_attention_heads' (" + std::to_string(num_attention_heads) +
                                   ") must be a multiple of 'num_key_value_heads' (" +
                                   std::to_string(num_key_value_heads) + ")");
  }
  if (head_dim % 2 != 0) {  // RoPE rotates pairs of channels
    return Status::InvalidArgument(source + ": 'head_dim' must be even for RoPE, got " + std::to_string(head_dim));
  }
  if (!(rms_norm_eps > 0)) return Status::InvalidArgument(source + ": 'rms_norm_eps' must be positive");
  if (!(rope_theta > 0)) return Status::InvalidArgument(source + ": 'rope_theta' must be positive");
  if (rope_scaling.rope_type == "llama3") {
    const RopeScaling& r = rope_scaling;
    // HF divides by (high - low) and by the factors, so these are what keep it finite.
    if (!(r.factor > 0) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
        r.original_max_position_embeddings <= 0) {
      return Status::InvalidArgument(source + ": 'rope_scaling' needs factor > 0, 0 < low_freq_factor < "
                                     "high_freq_factor and original_max_position_embeddings > 0");
    }
  } else if (rope_scaling.rope_type == "linear") {
    if (!(rope_scaling.factor > 0)) return Status::InvalidArgument(source + ": 'rope_scaling' needs factor > 0");
  } else if (rope_scaling.rope_type == "longrope") {
    const size_t n = static_cast<size_t>(RotaryDim() / 2);
    if (rope_scaling.short_factor.size() != n || rope_scaling.long_factor.size() != n) {
      return Status::InvalidArgument(source + ": 'rope_scaling' short_factor and long_factor need rotary_dim / 2 = " +
                                     std::to_string(n) + " numbers each, got " +
                                     std::to_string(rope_scaling.short_factor.size()) + " and " +
                                     std::to_string(rope_scaling.long_factor.size()));
    }
  } else if (!rope_scaling.rope_type.empty()) {
    return Status::InvalidArgument(source + ": 'rope_scaling' rope_type '" + rope_scaling.rope_type +
                                   "' is unsupported (supported: llama3, linear or none)");
  }
  KVLAB_RETURN_IF_ERROR(ValidateSpec(source));
  const std::pair<const char*, int64_t> ids[] = {{"bos_token_id", bos_token_id}, {"eos_token_id", eos_token_id}};
  for (const auto& [key, v] : ids) {
    if (v < -1 || v >= vocab_size) {
      return Status::InvalidArgument(source + ": '" + key + "' " + std::to_string(v) + " is outside the vocabulary [0, " +
                                     std::to_string(vocab_size) + ")");
    }
  }
  if (sliding_window < 0) return Status::InvalidArgument(source + ": 'sliding_window' must be >= 0 or null");
  return Status::OK();
}

int64_t ModelConfig::RotaryDim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * spec.partial_rotary_factor);
}

Status ModelConfig::ValidateSpec(const std::string& source) const {
  const DecoderSpec& s = spec;
  if (s.hidden_act != "silu" && s.hidden_act != "gelu_pytorch_tanh") {
    return Status::InvalidArgument(source + ": 'hidden_act' must be silu or gelu_pytorch_tanh, got '" + s.hidden_act +
                                   "'");
  }
  if (!(s.partial_rotary_factor > 0 && s.partial_rotary_factor <= 1) || RotaryDim() % 2 != 0 || RotaryDim() == 0) {
    return Status::InvalidArgument(source + ": 'partial_rotary_factor' must be in (0, 1] and give an even number of "
                                   "rotated channels (head_dim " + std::to_string(head_dim) + ")");
  }
  if (s.query_pre_attn_scalar < 0 || s.attn_logit_softcapping < 0 || s.final_logit_softcapping < 0 ||
      s.rope_local_base_freq < 0) {
    return Status::InvalidArgument(source + ": 'query_pre_attn_scalar', the soft-capping values and "
                                   "'rope_local_base_freq' must be >= 0");
  }
  if (!layer_sliding_window.empty() && static_cast<int64_t>(layer_sliding_window.size()) != num_hidden_layers) {
    return Status::InvalidArgument(source + ": the per-layer sliding windows list " +
                                   std::to_string(layer_sliding_window.size()) + " layers, num_hidden_layers is " +
                                   std::to_string(num_hidden_layers));
  }
  for (int64_t w : layer_sliding_window) {
    if (w < 0) return Status::InvalidArgument(source + ": 'sliding_window' of a layer must be >= 0");
  }
  return Status::OK();
}

namespace {

// config.json, bounded in size and depth (core/base/untrusted.h).
Status ReadJsonFile(const std::string& path, json* out) {
  std::string text;
  KVLAB_RETURN_IF_ERROR(ReadFileBounded(path, kMaxConfigBytes, &text));
  KVLAB_RETURN_IF_ERROR(ParseJsonText(text, path, kMaxConfigBytes, out));
  if (!out->is_object()) return Status::InvalidArgument(path + ": expected a JSON object at the top level");
  return Status::OK();
}

// Reads a parsed config.json (of any family) into *out and validates it;
// `path` names the source in messages.
Status ParseConfigJson(const std::string& path, json j, ModelConfig* out) {
  ModelConfig c;
  std::string prefix;
  KVLAB_RETURN_IF_ERROR(ResolveFamily(path, &j, &c.spec.model_type, &prefix));
  AddFamilyDefaults(c.spec.model_type, &j);
  const std::pair<const char*, int64_t*> required[] = {{"vocab_size", &c.vocab_size},
                                                        {"hidden_size", &c.hidden_size},
                                                        {"intermediate_size", &c.intermediate_size},
                                                        {"num_hidden_layers", &c.num_hidden_layers},
                                                        {"num_attention_heads", &c.num_attention_heads}};
  for (const auto& [key, field] : required) KVLAB_RETURN_IF_ERROR(GetInt(path, j, key, true, field));
  KVLAB_RETURN_IF_ERROR(GetDouble(path, j, "rms_norm_eps", true, &c.rms_norm_eps));
  KVLAB_RETURN_IF_ERROR(GetDouble(path, j, "rope_theta", false, &c.rope_theta));
  KVLAB_RETURN_IF_ERROR(GetInt(path, j, "max_position_embeddings", false, &c.max_position_embeddings));
  KVLAB_RETURN_IF_ERROR(GetBool(path, j, "tie_word_embeddings", &c.tie_word_embeddings));
  KVLAB_RETURN_IF_ERROR(GetTokenId(path, j, "bos_token_id", &c.bos_token_id));
  KVLAB_RETURN_IF_ERROR(GetTokenId(path, j, "eos_token_id", &c.eos_token_id));
  KVLAB_RETURN_IF_ERROR(GetTokenId(path, j, "pad_token_id", &c.pad_token_id));
  KVLAB_RETURN_IF_ERROR(ParseRopeScaling(path, j, c.spec.model_type, &c.rope_scaling));

  c.num_key_value_heads = c.num_attention_heads;
  const bool kv_null = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null();
  if (!kv_null) KVLAB_RETURN_IF_ERROR(GetInt(path, j, "num_key_value_heads", false, &c.num_key_value_heads));
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    KVLAB_RETURN_IF_ERROR(GetInt(path, j, "head_dim", false, &c.head_dim));
  } else if (c.num_attention_heads > 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Status::InvalidArgument(path + ": 'hidden_size' (" + std::to_string(c.hidden_size) +
                                     ") is not divisible by 'num_attention_heads' (" +
                                     std::to_string(c.num_attention_heads) + ") and 'head_dim' is absent");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    KVLAB_RETURN_IF_ERROR(GetInt(path, j, "sliding_window", false, &c.sliding_window));
  }
  for (const char* key : {"torch_dtype", "dtype"}) {  // newer transformers write "dtype"
    if (j.contains(key) && j[key].is_string()) c.torch_dtype = j[key].get<std::string>();
  }
  if (j.contains("_name_or_path") && j["_name_or_path"].is_string() && !j["_name_or_path"].get<std::string>().empty()) {
    c.name = j["_name_or_path"].get<std::string>();
  } else {
    c.name = std::filesystem::path(path).parent_path().filename().string();
  }
  KVLAB_RETURN_IF_ERROR(ParseFamily(path, j, &c));
  c.spec.tensor_prefix = prefix;
  KVLAB_RETURN_IF_ERROR(c.Validate(path));
  *out = std::move(c);
  return Status::OK();
}


}  // namespace

Status LoadModelConfig(const std::string& path, ModelConfig* out) {
  json j;
  KVLAB_RETURN_IF_ERROR(ReadJsonFile(path, &j));
  return ParseConfigJson(path, std::move(j), out);
}

Status LoadKvShape(const std::string& path, ModelConfig* out, std::string* unverified) {
  json j;
  KVLAB_RETURN_IF_ERROR(ReadJsonFile(path, &j));
  unverified->clear();
  const auto mt = j.find("model_type");
  if (mt == j.end() || (mt->is_string() && IsKnownFamily(mt->get<std::string>()))) {
    return ParseConfigJson(path, std::move(j), out);
  }
  // Another decoder: only the arithmetic of its cache, from the keys every HF config states.
  ModelConfig c;
  c.spec.model_type = mt->is_string() ? mt->get<std::string>() : QuoteJson(*mt);
  KVLAB_RETURN_IF_ERROR(GetInt(path, j, "num_hidden_layers", true, &c.num_hidden_layers));
  KVLAB_RETURN_IF_ERROR(GetInt(path, j, "num_attention_heads", true, &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
    KVLAB_RETURN_IF_ERROR(GetInt(path, j, "num_key_value_heads", false, &c.num_key_value_heads));
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    KVLAB_RETURN_IF_ERROR(GetInt(path, j, "head_dim", false, &c.head_dim));
  } else {
    KVLAB_RETURN_IF_ERROR(GetInt(path, j, "hidden_size", true, &c.hidden_size));
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
      return Status::InvalidArgument(path + ": 'hidden_size' is not divisible by 'num_attention_heads' and "
                                     "'head_dim' is absent");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  KVLAB_RETURN_IF_ERROR(GetInt(path, j, "hidden_size", false, &c.hidden_size));
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"num_hidden_layers", c.num_hidden_layers},
                               {"num_attention_heads", c.num_attention_heads},
                               {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim}}) {
    if (v <= 0) return Status::InvalidArgument(path + ": '" + key + "' must be positive, got " + std::to_string(v));
  }
  c.name = std::filesystem::path(path).parent_path().filename().string();
  *unverified = c.spec.model_type;
  *out = std::move(c);
  return Status::OK();
}

Status SaveModelConfig(const std::string& path, const ModelConfig& c) {
  KVLAB_RETURN_IF_ERROR(c.Validate(path));
  auto id = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  nlohmann::ordered_json j;
  j["_name_or_path"] = c.name;
  WriteFamily(c, &j);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.rope_type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else if (c.rope_scaling.rope_type == "linear") {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.rope_type == "longrope") {
    j["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", c.rope_scaling.short_factor},
                         {"long_factor", c.rope_scaling.long_factor},
                         {"factor", c.rope_scaling.factor},
                         {"attention_factor", c.rope_scaling.attention_factor}};
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = id(c.bos_token_id);
  j["eos_token_id"] = id(c.eos_token_id);
  j["pad_token_id"] = id(c.pad_token_id);
  j["torch_dtype"] = c.torch_dtype;
  return WriteTextAtomically(path, j.dump(2) + "\n");
}

Status PresetConfig(const std::string& name, ModelConfig* out) {
  for (const ModelConfig& c : Presets()) {
    if (c.name == name) {
      *out = c;
      return Status::OK();
    }
  }
  std::string valid;
  for (const std::string& n : PresetNames()) valid += (valid.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown model preset '" + name + "'; valid presets: " + valid);
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const ModelConfig& c : Presets()) names.push_back(c.name);
  return names;
}

std::string ModelConfigPath(const std::string& model) {
  const bool is_json = model.size() >= 5 && model.compare(model.size() - 5, 5, ".json") == 0;
  return is_json ? model : model + "/config.json";
}

Status ModelNotFound(const std::string& model, const std::string& path) {
  std::string names;
  for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
  return Status::NotFound("model '" + model + "' is neither a preset (" + names + ") nor a readable " + path);
}

Status ResolveModelConfig(const std::string& model, ModelConfig* out) {
  if (PresetConfig(model, out).ok()) return Status::OK();
  const std::string path = ModelConfigPath(model);
  if (!std::ifstream(path)) return ModelNotFound(model, path);
  return LoadModelConfig(path, out);
}

}  // namespace kvlab
