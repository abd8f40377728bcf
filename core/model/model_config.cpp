#include "core/model/model_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvlab {
namespace {

using json = nlohmann::json;

std::string TypeName(const json& v) { return v.type_name(); }

// Each getter leaves *out alone when the key is absent and not required, so the
// struct's defaults (HF's defaults) apply.
Status GetInt(const std::string& file, const json& j, const std::string& key, bool required, int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(file + ": missing required key '" + key + "'") : Status::OK();
  }
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX)) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be an integer, got " + TypeName(*it) +
                                   " " + it->dump());
  }
  *out = it->get<int64_t>();
  return Status::OK();
}

Status GetDouble(const std::string& file, const json& j, const std::string& key, bool required, double* out) {
  const auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(file + ": missing required key '" + key + "'") : Status::OK();
  }
  if (!it->is_number()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be a number, got " + TypeName(*it) + " " +
                                   it->dump());
  }
  *out = it->get<double>();
  return Status::OK();
}

Status GetBool(const std::string& file, const json& j, const std::string& key, bool* out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::OK();
  if (!it->is_boolean()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be true or false, got " + it->dump());
  }
  *out = it->get<bool>();
  return Status::OK();
}

// A token id: integer, null (none), or, for eos_token_id, a list whose first entry counts.
Status GetTokenId(const std::string& file, const json& j, const std::string& key, int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::OK();
  const json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return Status::OK();
    v = &(*v)[0];
  }
  if (!v->is_number_integer()) {
    return Status::InvalidArgument(file + ": key '" + key + "' must be an integer, a list of integers or null, got " +
                                   it->dump());
  }
  *out = v->get<int64_t>();
  return Status::OK();
}

Status ParseRopeScaling(const std::string& file, const json& j, RopeScaling* out) {
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return Status::OK();
  if (!it->is_object()) {
    return Status::InvalidArgument(file + ": key 'rope_scaling' must be an object or null, got " + it->dump());
  }
  // transformers renamed "type" to "rope_type"; configs in the wild carry either.
  auto t = it->find("rope_type");
  if (t == it->end()) t = it->find("type");
  if (t == it->end() || !t->is_string()) {
    return Status::InvalidArgument(file + ": key 'rope_scaling' needs a string 'rope_type'");
  }
  const std::string type = t->get<std::string>();
  if (type == "default") return Status::OK();
  if (type != "llama3") {
    return Status::InvalidArgument(file + ": key 'rope_scaling' has unsupported rope_type '" + type +
                                   "' (supported: llama3, default, or null)");
  }
  const std::string f = file + " (rope_scaling)";
  out->rope_type = type;
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "factor", true, &out->factor));
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "low_freq_factor", true, &out->low_freq_factor));
  KVLAB_RETURN_IF_ERROR(GetDouble(f, *it, "high_freq_factor", true, &out->high_freq_factor));
  return GetInt(f, *it, "original_max_position_embeddings", true, &out->original_max_position_embeddings);
}

// Features of other Llama variants that this engine does not implement: refusing
// them beats computing something else silently.
Status CheckUnsupported(const std::string& file, const json& j) {
  if (j.contains("model_type")) {
    const json& mt = j["model_type"];
    if (!mt.is_string() || (mt != "llama" && mt != "mistral")) {
      return Status::InvalidArgument(file + ": key 'model_type' is " + mt.dump() +
                                     "; kvlab supports \"llama\" and \"mistral\"");
    }
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return Status::InvalidArgument(file + ": key 'hidden_act' is " + j["hidden_act"].dump() +
                                   "; kvlab supports \"silu\" (SwiGLU)");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool b = false;
    KVLAB_RETURN_IF_ERROR(GetBool(file, j, key, &b));
    if (b) return Status::InvalidArgument(file + ": key '" + key + "' is true; kvlab supports bias-free Llama layers");
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
  } else if (!rope_scaling.rope_type.empty()) {
    return Status::InvalidArgument(source + ": 'rope_scaling' rope_type '" + rope_scaling.rope_type +
                                   "' is unsupported (supported: llama3 or none)");
  }
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

Status LoadModelConfig(const std::string& path, ModelConfig* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected a JSON object at the top level");
  KVLAB_RETURN_IF_ERROR(CheckUnsupported(path, j));

  ModelConfig c;
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
  KVLAB_RETURN_IF_ERROR(ParseRopeScaling(path, j, &c.rope_scaling));

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
  KVLAB_RETURN_IF_ERROR(c.Validate(path));
  *out = std::move(c);
  return Status::OK();
}

Status SaveModelConfig(const std::string& path, const ModelConfig& c) {
  KVLAB_RETURN_IF_ERROR(c.Validate(path));
  auto id = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  nlohmann::ordered_json j;
  j["_name_or_path"] = c.name;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.rope_type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = id(c.bos_token_id);
  j["eos_token_id"] = id(c.eos_token_id);
  j["pad_token_id"] = id(c.pad_token_id);
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
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

}  // namespace kvlab
