#include "core/model/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string FreshDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(ProcessTempDir()) / ("kvlab_cfg_" + std::string(info->name()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// Meta-Llama-3.1-8B's config.json as published (eos_token_id is a list there).
json Llama31Config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

Status LoadText(const std::string& text, std::string* path, ModelConfig* out) {
  *path = FreshDir() + "/config.json";
  std::ofstream(*path, std::ios::trunc) << text;
  return LoadModelConfig(*path, out);
}

// Loading `j` must fail with a message naming the file and each needle.
void ExpectLoadFails(const json& j, const std::vector<std::string>& needles) {
  std::string path;
  ModelConfig c;
  const Status st = LoadText(j.dump(), &path, &c);
  ASSERT_FALSE(st.ok()) << j.dump();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  for (const std::string& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

TEST(ModelConfigTest, PresetKVBytes) {
  ModelConfig c;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &c).ok());
  EXPECT_EQ(c.KVBytesPerToken(2), 131072);
  ASSERT_TRUE(PresetConfig("llama-3.1-70b", &c).ok());
  EXPECT_EQ(c.KVBytesPerToken(2), 327680);
  ASSERT_TRUE(PresetConfig("llama-2-7b", &c).ok());
  EXPECT_EQ(c.KVBytesPerToken(2), 524288);
  ASSERT_TRUE(PresetConfig("small", &c).ok());
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 259);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfigTest, EveryPresetValidatesAndRoundTrips) {
  const std::string dir = FreshDir();
  ASSERT_EQ(PresetNames().size(), 10u);  // a preset whose literal failed to parse would be missing
  for (const std::string& name : PresetNames()) {
    ModelConfig c, back;
    ASSERT_TRUE(PresetConfig(name, &c).ok()) << name;
    EXPECT_EQ(c.name, name);
    ASSERT_TRUE(c.Validate("preset " + name).ok()) << name;
    const std::string path = dir + "/" + name + ".json";
    ASSERT_TRUE(SaveModelConfig(path, c).ok()) << name;
    const Status st = LoadModelConfig(path, &back);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(back.name, name);
    EXPECT_EQ(back.KVBytesPerToken(2), c.KVBytesPerToken(2));
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.intermediate_size, c.intermediate_size);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.rope_scaling.rope_type, c.rope_scaling.rope_type);
    EXPECT_EQ(back.rope_scaling.factor, c.rope_scaling.factor);
    EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(back.bos_token_id, c.bos_token_id);
    EXPECT_EQ(back.eos_token_id, c.eos_token_id);
    EXPECT_EQ(back.pad_token_id, c.pad_token_id);
    EXPECT_EQ(back.torch_dtype, c.torch_dtype);
    EXPECT_EQ(back.spec.model_type, c.spec.model_type);
    EXPECT_EQ(back.layer_sliding_window.empty() ? std::vector<int64_t>(c.num_hidden_layers, 0) : back.layer_sliding_window,
              c.layer_sliding_window.empty() ? std::vector<int64_t>(c.num_hidden_layers, 0) : c.layer_sliding_window)
        << name;
  }
}

TEST(ModelConfigTest, UnknownPresetListsValidNames) {
  ModelConfig c;
  const Status st = PresetConfig("llama-9", &c);
  ASSERT_FALSE(st.ok());
  for (const char* n : {"'llama-9'", "llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "small"}) {
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  }
}

TEST(ModelConfigTest, LoadsPublishedLlama31Config) {
  std::string path;
  ModelConfig c, preset;
  const Status st = LoadText(Llama31Config().dump(), &path, &c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &preset).ok());
  EXPECT_EQ(c.eos_token_id, 128001);  // first of the list
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.KVBytesPerToken(2), preset.KVBytesPerToken(2));
  EXPECT_EQ(c.name, fs::path(path).parent_path().filename().string());
}

TEST(ModelConfigTest, HuggingFaceDefaults) {
  json j = Llama31Config();
  for (const char* k : {"num_key_value_heads", "rope_theta", "rope_scaling", "eos_token_id", "max_position_embeddings"}) {
    j.erase(k);
  }
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  std::string path;
  ModelConfig c;
  const Status st = LoadText(j.dump(), &path, &c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c.num_key_value_heads, 8);  // MistralConfig's default
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "");
  EXPECT_EQ(c.eos_token_id, -1);
  EXPECT_EQ(c.max_position_embeddings, 131072);  // MistralConfig's default, 4096 * 32
  EXPECT_EQ(c.sliding_window, 4096);

  j["rope_scaling"] = {{"type", "default"}};  // older spelling of rope_type
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = 64;  // explicit head_dim need not be hidden / heads
  ASSERT_TRUE(LoadText(j.dump(), &path, &c).ok());
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_scaling.rope_type, "");
}

TEST(ModelConfigTest, MissingEachRequiredKey) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "rms_norm_eps"}) {
    json j = Llama31Config();
    j.erase(key);
    ExpectLoadFails(j, {std::string(": missing required key '") + key + "'"});
  }
  json j = Llama31Config();
  j["rope_scaling"].erase("low_freq_factor");
  ExpectLoadFails(j, {"rope_scaling", "'low_freq_factor'"});
}

TEST(ModelConfigTest, WrongTypesNameKeyAndExpectedType) {
  json j = Llama31Config();
  j["hidden_size"] = "4096";
  ExpectLoadFails(j, {"'hidden_size'", "integer", "string"});
  j = Llama31Config();
  j["num_hidden_layers"] = 32.5;
  ExpectLoadFails(j, {"'num_hidden_layers'", "integer"});
  j = Llama31Config();
  j["rms_norm_eps"] = nullptr;
  ExpectLoadFails(j, {"'rms_norm_eps'", "number"});
  j = Llama31Config();
  j["tie_word_embeddings"] = "no";
  ExpectLoadFails(j, {"'tie_word_embeddings'", "true or false"});
  j = Llama31Config();
  j["eos_token_id"] = "</s>";
  ExpectLoadFails(j, {"'eos_token_id'"});
}

TEST(ModelConfigTest, MalformedJsonGivesParserPosition) {
  std::string path;
  ModelConfig c;
  const Status st = LoadText("{\n  \"vocab_size\": 32000,\n  \"hidden_size\": ,\n}", &path, &c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 3"), std::string::npos) << st.message();

  const Status missing = LoadModelConfig(FreshDir() + "/absent/config.json", &c);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("absent/config.json"), std::string::npos);
}

TEST(ModelConfigTest, UnsupportedModelsAndInvalidShapes) {
  json j = Llama31Config();
  j["model_type"] = "gpt2";
  ExpectLoadFails(j, {"'model_type'", "gpt2"});
  j = Llama31Config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectLoadFails(j, {"'rope_scaling'", "yarn"});
  j = Llama31Config();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  ExpectLoadFails(j, {"'rope_scaling'", "dynamic"});
  j = Llama31Config();
  j["attention_bias"] = "yes";
  ExpectLoadFails(j, {"'attention_bias'"});
  j = Llama31Config();
  j["hidden_act"] = "gelu";
  ExpectLoadFails(j, {"'hidden_act'"});
  j = Llama31Config();
  j["num_key_value_heads"] = 6;
  ExpectLoadFails(j, {"'num_attention_heads'", "'num_key_value_heads'"});
  j = Llama31Config();
  j["num_attention_heads"] = 0;
  ExpectLoadFails(j, {"'num_attention_heads'", "positive"});
  j = Llama31Config();
  j["vocab_size"] = -5;
  ExpectLoadFails(j, {"'vocab_size'", "positive"});
  j = Llama31Config();
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 3;
  ExpectLoadFails(j, {"'hidden_size'", "not divisible"});
  j = Llama31Config();
  j["bos_token_id"] = 200000;
  ExpectLoadFails(j, {"'bos_token_id'", "vocabulary"});
  j = Llama31Config();
  j["rope_scaling"]["high_freq_factor"] = 1.0;
  ExpectLoadFails(j, {"'rope_scaling'"});
}

}  // namespace
}  // namespace kvlab
