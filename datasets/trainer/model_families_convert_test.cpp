// The decoder families through the model's own entry points: Save writes a
// checkpoint of the family that loads back to the same logits; `kvlab
// convert --pool-kv-heads` pools k/v weights and biases so that the pooled
// checkpoint computes what the engine's mean head merge computes, refuses
// fused qkv_proj, and carries the tokenizer files; `kvlab train` refuses
// families other than Llama. (Logits against the float64 reference are
// evals/reference/hf_families_test.py's.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/temp_dir_test_util.h"
#include "core/model/model.h"
#include "datasets/trainer/trainer.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::path(ProcessTempDir()) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A small shape of a family preset: 3 layers, head_dim 16 (explicit), GQA 2.
ModelConfig Small(const std::string& preset) {
  ModelConfig c;
  EXPECT_TRUE(PresetConfig(preset, &c).ok()) << preset;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.pad_token_id = -1;
  if (!c.layer_sliding_window.empty()) {
    c.layer_sliding_window.resize(3);
    for (int64_t& w : c.layer_sliding_window) w = w > 0 ? 5 : 0;
    c.sliding_window = 5;
  }
  if (c.spec.query_pre_attn_scalar > 0) c.spec.query_pre_attn_scalar = 16;
  return c;
}

std::vector<int32_t> Tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 19; ++i) t.push_back((i * 37 + 11) % 97);
  return t;
}

at::Tensor NoCache(const std::string& dir) {
  std::unique_ptr<LlamaModel> m;
  const Status s = LlamaModel::Load(dir, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m ? m->ForwardNoCache(Tokens()) : at::Tensor();
}

TEST(ModelFamiliesModelTest, SaveLoadsBackToTheSameLogits) {
  for (const char* preset : {"qwen2.5-7b", "qwen3-8b", "phi-3-mini", "gemma-2-9b", "gemma-3-12b", "mistral-7b"}) {
    const std::string dir = TempDir(std::string("save_") + preset);
    std::unique_ptr<LlamaModel> m;
    ASSERT_TRUE(LlamaModel::Random(Small(preset), 3, &m, 0.2).ok()) << preset;
    ASSERT_TRUE(m->Save(dir).ok()) << preset;
    const at::Tensor want = m->ForwardNoCache(Tokens());
    const at::Tensor got = NoCache(dir);
    ASSERT_TRUE(got.defined()) << preset;
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << preset << ": max diff "
                                                       << (got - want).abs().max().item<float>();
    // The written config is the family's own.
    ModelConfig back;
    ASSERT_TRUE(LoadModelConfig(dir + "/config.json", &back).ok());
    EXPECT_EQ(back.spec.model_type, m->config().spec.model_type);
  }
}

TEST(ModelFamiliesModelTest, PoolKvHeadsWithBiasesMatchesTheEngineMerge) {
  const std::string dir = TempDir("pool");
  ModelConfig c = Small("qwen2.5-7b");  // q/k/v biases
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::Random(c, 5, &m, 0.2).ok());
  fs::create_directories(dir + "/in");
  ASSERT_TRUE(m->Save(dir + "/in").ok());
  std::ofstream(dir + "/in/tokenizer.json") << "{\"model\": {}}";
  std::ofstream(dir + "/in/tokenizer_config.json") << "{}";
  const Status s = ConvertPoolKvHeads(dir + "/in", dir + "/out", 2, /*mean=*/true);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::exists(dir + "/out/tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir + "/out/tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(dir + "/out/tokenizer.model"));  // only what the input has

  std::unique_ptr<LlamaModel> merged;
  ASSERT_TRUE(LlamaModel::Load(dir + "/in", &merged).ok());
  ASSERT_TRUE(merged->SetStoredKvHeads(1, HeadMerge::kMean).ok());
  const at::Tensor want = merged->ForwardNoCache(Tokens());
  const at::Tensor got = NoCache(dir + "/out");
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << (got - want).abs().max().item<float>();
  ModelConfig out;
  ASSERT_TRUE(LoadModelConfig(dir + "/out/config.json", &out).ok());
  EXPECT_EQ(out.num_key_value_heads, 1);
  EXPECT_TRUE(out.spec.qkv_bias);
}

TEST(ModelFamiliesModelTest, FusedQkvIsRefusedAndTrainIsLlamaOnly) {
  const std::string dir = TempDir("fused");
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::Random(Small("phi-3-mini"), 5, &m).ok());
  fs::create_directories(dir + "/phi3");
  ASSERT_TRUE(m->Save(dir + "/phi3").ok());
  const Status s = ConvertPoolKvHeads(dir + "/phi3", dir + "/out", 2, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("qkv_proj"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(dir + "/phi3/config.json"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir + "/out/model.safetensors"));

  std::vector<float> logits;
  const Status t = TrainerLogits(dir + "/phi3", Tokens(), &logits);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("llama"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("phi3"), std::string::npos) << t.message();
}

TEST(ModelFamiliesModelTest, PartialRopeRefusesKeysBeforeRope) {
  std::unique_ptr<LlamaModel> m;
  ModelConfig c = Small("phi-3-mini");
  c.spec.partial_rotary_factor = 0.5;
  ASSERT_TRUE(LlamaModel::Random(c, 5, &m).ok());
  const Status s = m->SetKeysBeforeRope(true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("partial_rotary_factor"), std::string::npos) << s.message();
  EXPECT_TRUE(m->SetKeysBeforeRope(false).ok());
}

}  // namespace
}  // namespace kvlab
