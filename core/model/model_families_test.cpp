// Config parsing per family, on the config.json files the checkpoints publish
// (values copied from them): the decoder description each one gives, the
// per-layer windows, the KV bytes `kvlab memory` reports, and the errors for
// what kvlab does not model.
#include "core/model/memory_calc.h"
#include "core/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string WriteConfig(const json& j) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(ProcessTempDir()) / ("kvlab_fam_" + std::string(info->name()));
  fs::create_directories(d);
  const std::string path = (d / "config.json").string();
  std::ofstream(path, std::ios::trunc) << j.dump();
  return path;
}

ModelConfig Load(const json& j) {
  ModelConfig c;
  const Status s = LoadModelConfig(WriteConfig(j), &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

void ExpectFails(const json& j, const std::vector<std::string>& needles) {
  const std::string path = WriteConfig(j);
  ModelConfig c;
  const Status s = LoadModelConfig(path, &c);
  ASSERT_FALSE(s.ok()) << j.dump();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  for (const std::string& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
}

int64_t Bytes16(const ModelConfig& c, int64_t tokens, std::vector<LayerGroup>* groups = nullptr) {
  PolicyStack stack;
  EXPECT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "t"}}, &stack).ok());
  MemoryEstimate e;
  EXPECT_TRUE(EstimateKVMemory(c, tokens, 16, stack, &e).ok());
  if (groups != nullptr) *groups = e.groups;
  return e.bytes_per_sequence;
}

json Qwen2_7B() {
  return json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.37.2", "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})");
}

json Qwen3_8B() {
  return json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

json Phi3Mini4k() {
  return json::parse(R"({"_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
    "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true, "attention_bias": false,
    "vocab_size": 32064})");
}

json Gemma2_9B() {
  return json::parse(R"({"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096,
    "torch_dtype": "float32", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 256000})");
}

json Gemma3_1B() {
  return json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
    "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
}

// google/gemma-3-4b-it: the multimodal wrapper; its text_config leaves most keys at Gemma3TextConfig's defaults.
json Gemma3_4B() {
  return json::parse(R"({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02,
    "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
}

json Mistral7Bv01() {
  return json::parse(R"({"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": true, "vocab_size": 32000})");
}

TEST(ModelFamiliesTest, Qwen2) {
  const ModelConfig c = Load(Qwen2_7B());
  EXPECT_EQ(c.spec.model_type, "qwen2");
  EXPECT_TRUE(c.spec.qkv_bias);
  EXPECT_FALSE(c.spec.o_bias);
  EXPECT_FALSE(c.spec.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.KVBytesPerToken(2), 57344);
  EXPECT_EQ(c.sliding_window, 131072);
  for (int64_t l = 0; l < 28; ++l) EXPECT_EQ(c.LayerWindow(l), 0);  // use_sliding_window false

  json j = Qwen2_7B();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 8;
  j["max_window_layers"] = 20;
  const ModelConfig w = Load(j);
  EXPECT_EQ(w.LayerWindow(19), 0);
  EXPECT_EQ(w.LayerWindow(20), 8);
  EXPECT_EQ(w.LayerWindow(27), 8);
}

TEST(ModelFamiliesTest, Qwen3) {
  const ModelConfig c = Load(Qwen3_8B());
  EXPECT_TRUE(c.spec.qk_norm);
  EXPECT_FALSE(c.spec.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.KVBytesPerToken(2), 2 * 36 * 8 * 128 * 2);
  json j = Qwen3_8B();
  j["attention_bias"] = true;
  j["head_dim"] = 96;  // explicit head_dim != hidden / heads
  const ModelConfig b = Load(j);
  EXPECT_TRUE(b.spec.qkv_bias && b.spec.o_bias);
  EXPECT_EQ(b.head_dim, 96);
}

TEST(ModelFamiliesTest, Phi3) {
  const ModelConfig c = Load(Phi3Mini4k());
  EXPECT_TRUE(c.spec.fused_qkv && c.spec.fused_gate_up);
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.RotaryDim(), 96);
  EXPECT_EQ(c.KVBytesPerToken(2), 393216);
  for (int64_t l = 0; l < 32; ++l) EXPECT_EQ(c.LayerWindow(l), 2047);
  json j = Phi3Mini4k();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(Load(j).RotaryDim(), 48);

  // Phi-3-mini-128k's LongRoPE: factor = 131072 / 4096, attention factor
  // sqrt(1 + ln 32 / ln 4096) as _compute_longrope_parameters derives them.
  j = Phi3Mini4k();
  j["max_position_embeddings"] = 131072;
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", std::vector<double>(48, 1.0)},
                       {"long_factor", std::vector<double>(48, 2.0)}};
  const ModelConfig l = Load(j);
  EXPECT_EQ(l.rope_scaling.rope_type, "longrope");
  EXPECT_DOUBLE_EQ(l.rope_scaling.factor, 32.0);
  EXPECT_NEAR(l.rope_scaling.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-12);
  EXPECT_EQ(l.rope_scaling.original_max_position_embeddings, 4096);
  j["rope_scaling"]["long_factor"] = json::array({1.0});
  ExpectFails(j, {"'rope_scaling'", "long_factor", "48"});
  j["rope_scaling"].erase("long_factor");
  ExpectFails(j, {"'rope_scaling.long_factor'"});
  j = Qwen2_7B();  // LongRoPE is phi3's: elsewhere refused by name
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", json::array({1.0})}, {"long_factor", json::array({1.0})}};
  ExpectFails(j, {"'rope_scaling'", "longrope"});
}

TEST(ModelFamiliesTest, Gemma2) {
  const ModelConfig c = Load(Gemma2_9B());
  const DecoderSpec& s = c.spec;
  EXPECT_TRUE(s.norm_one_plus && s.sandwich_norms && s.scale_embeddings);
  EXPECT_EQ(s.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(s.query_pre_attn_scalar, 256);
  EXPECT_EQ(s.attn_logit_softcapping, 50.0);
  EXPECT_EQ(s.final_logit_softcapping, 30.0);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma2Config's default
  EXPECT_EQ(c.KVBytesPerToken(2), 344064);
  EXPECT_EQ(c.LayerWindow(0), 4096);  // even layers local
  EXPECT_EQ(c.LayerWindow(1), 0);
  EXPECT_EQ(c.LayerWindow(41), 0);
  std::vector<LayerGroup> g;
  const int64_t bytes = Bytes16(c, 32768, &g);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].window, 0);
  EXPECT_EQ(g[0].layers, 21);
  EXPECT_EQ(g[0].tokens_held, 32768);
  EXPECT_EQ(g[1].window, 4096);
  EXPECT_EQ(g[1].layers, 21);
  EXPECT_EQ(g[1].tokens_held, 4096);
  EXPECT_EQ(bytes, 21LL * 2 * 8 * 256 * 2 * (32768 + 4096));
}

TEST(ModelFamiliesTest, Gemma3TextAndMultimodal) {
  const ModelConfig c = Load(Gemma3_1B());
  EXPECT_TRUE(c.spec.qk_norm && c.spec.norm_one_plus && c.spec.sandwich_norms);
  EXPECT_EQ(c.spec.attn_logit_softcapping, 0);
  EXPECT_EQ(c.spec.final_logit_softcapping, 0);
  EXPECT_EQ(c.spec.rope_local_base_freq, 10000);
  EXPECT_EQ(c.eos_token_id, 1);
  for (int64_t l = 0; l < 26; ++l) EXPECT_EQ(c.LayerWindow(l), (l + 1) % 6 == 0 ? 0 : 512) << l;

  const ModelConfig m = Load(Gemma3_4B());
  EXPECT_EQ(m.spec.model_type, "gemma3_text");
  EXPECT_EQ(m.spec.tensor_prefix, "language_model.");
  EXPECT_EQ(m.num_attention_heads, 8);  // Gemma3TextConfig defaults
  EXPECT_EQ(m.num_key_value_heads, 4);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_EQ(m.vocab_size, 262208);
  EXPECT_EQ(m.rope_scaling.rope_type, "linear");
  EXPECT_EQ(m.rope_scaling.factor, 8.0);
  EXPECT_EQ(m.LayerWindow(0), 1024);
  EXPECT_EQ(m.LayerWindow(5), 0);

  json j = Gemma3_1B();
  j["layer_types"] = json::array();
  for (int l = 0; l < 26; ++l) j["layer_types"].push_back(l % 2 ? "full_attention" : "sliding_attention");
  const ModelConfig t = Load(j);
  EXPECT_EQ(t.LayerWindow(0), 512);
  EXPECT_EQ(t.LayerWindow(1), 0);
  j["layer_types"][3] = "chunked_attention";
  ExpectFails(j, {"'layer_types'", "chunked_attention"});
}

TEST(ModelFamiliesTest, MistralWindowEveryLayer) {
  const ModelConfig c = Load(Mistral7Bv01());
  for (int64_t l = 0; l < 32; ++l) EXPECT_EQ(c.LayerWindow(l), 4096);
  EXPECT_EQ(Bytes16(c, 32768), 32LL * 2 * 8 * 128 * 2 * 4096);
  json j = Mistral7Bv01();
  j["sliding_window"] = nullptr;  // v0.2 on
  EXPECT_EQ(Load(j).LayerWindow(0), 0);
}

TEST(ModelFamiliesTest, UnmodelledValuesNameTheKey) {
  json j = Qwen2_7B();
  j["model_type"] = "gpt_neox";
  ExpectFails(j, {"'model_type'", "gpt_neox"});
  j = Qwen2_7B();
  j["hidden_act"] = "gelu";
  ExpectFails(j, {"'hidden_act'", "gelu"});
  j = Gemma2_9B();
  j["hidden_activation"] = "silu";
  ExpectFails(j, {"'hidden_activation'"});
  j = Qwen3_8B();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectFails(j, {"'rope_scaling'", "yarn"});
  j = Mistral7Bv01();
  j["model_type"] = "llama";
  j["partial_rotary_factor"] = 0.5;
  ExpectFails(j, {"'partial_rotary_factor'"});
  j = Gemma3_4B();
  j.erase("text_config");
  ExpectFails(j, {"'text_config'"});
}

TEST(ModelFamiliesTest, SaveWritesTheFamily) {
  for (const char* preset : {"qwen2.5-7b", "qwen3-8b", "phi-3-mini", "gemma-2-9b", "gemma-3-12b", "mistral-7b"}) {
    ModelConfig c;
    ASSERT_TRUE(PresetConfig(preset, &c).ok()) << preset;
    c.num_hidden_layers = 12;
    c.layer_sliding_window.resize(12);
    if (c.spec.model_type == "qwen2") {
      for (int l = 8; l < 12; ++l) c.layer_sliding_window[static_cast<size_t>(l)] = 64;
      c.sliding_window = 64;
    }
    const std::string path = WriteConfig(json::object());
    ASSERT_TRUE(SaveModelConfig(path, c).ok()) << preset;
    ModelConfig back;
    const Status s = LoadModelConfig(path, &back);
    ASSERT_TRUE(s.ok()) << preset << ": " << s.ToString();
    EXPECT_EQ(back.spec.model_type, c.spec.model_type) << preset;
    EXPECT_EQ(back.spec.architecture, c.spec.architecture) << preset;
    EXPECT_EQ(back.spec.qkv_bias, c.spec.qkv_bias) << preset;
    EXPECT_EQ(back.spec.qk_norm, c.spec.qk_norm) << preset;
    EXPECT_EQ(back.spec.fused_qkv, c.spec.fused_qkv) << preset;
    EXPECT_EQ(back.spec.attn_logit_softcapping, c.spec.attn_logit_softcapping) << preset;
    EXPECT_EQ(back.spec.rope_local_base_freq, c.spec.rope_local_base_freq) << preset;
    EXPECT_EQ(back.rope_scaling.rope_type, c.rope_scaling.rope_type) << preset;
    EXPECT_EQ(back.head_dim, c.head_dim) << preset;
    for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(back.LayerWindow(l), c.LayerWindow(l)) << preset << " layer " << l;
  }
}

TEST(ModelFamiliesTest, OtherDecodersGetTheirShapeUnverified) {
  // An OLMo-2-style config.json: not a family kvlab models, but its cache is arithmetic.
  const json j = json::parse(R"({"model_type": "olmo2", "hidden_size": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 100352})");
  const std::string path = WriteConfig(j);
  ModelConfig c;
  std::string unverified;
  ASSERT_TRUE(LoadKvShape(path, &c, &unverified).ok());
  EXPECT_EQ(unverified, "olmo2");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.KVBytesPerToken(2), 2 * 32 * 32 * 128 * 2);
  ModelConfig full;
  EXPECT_FALSE(LoadModelConfig(path, &full).ok());  // the model itself is refused

  // head_dim stated, no hidden_size; num_key_value_heads absent: MHA.
  const json k = json::parse(R"({"model_type": "somedecoder", "head_dim": 64, "num_attention_heads": 16,
    "num_hidden_layers": 10})");
  ASSERT_TRUE(LoadKvShape(WriteConfig(k), &c, &unverified).ok());
  EXPECT_EQ(c.KVBytesPerToken(2), 2 * 10 * 16 * 64 * 2);
  const json bad = json::parse(R"({"model_type": "somedecoder", "num_attention_heads": 16})");
  const Status s = LoadKvShape(WriteConfig(bad), &c, &unverified);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'num_hidden_layers'"), std::string::npos) << s.message();

  // A known family goes through the full parser.
  ASSERT_TRUE(LoadKvShape(WriteConfig(Gemma2_9B()), &c, &unverified).ok());
  EXPECT_EQ(unverified, "");
  EXPECT_EQ(c.LayerWindow(0), 4096);
}

}  // namespace
}  // namespace kvlab
