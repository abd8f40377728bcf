// The model over the paged cache against recomputation without a cache, the
// dense reference path, and the loader's error paths.
#include "core/model/model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"
#include "core/model/safetensors.h"

namespace kvlab {
namespace {

ModelConfig TinyGqaConfig() {
  ModelConfig c;
  c.name = "tiny-gqa-test";
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rope_theta = 10000;
  c.rope_scaling.rope_type = "llama3";
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.max_position_embeddings = 4096;
  return c;
}

std::string TempDir(const std::string& name) {
  std::string dir = ProcessTempDir() + "/model_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> t;
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab)));
  }
  return t;
}

// Saves a random model of `config` to a fresh directory, returns it.
std::string SavedModel(const ModelConfig& config, const std::string& name) {
  std::unique_ptr<LlamaModel> m;
  EXPECT_TRUE(LlamaModel::Random(config, 11, &m, 0.08).ok());
  const std::string dir = TempDir(name);
  EXPECT_TRUE(m->Save(dir).ok());
  return dir;
}

struct CacheCase {
  std::string attention;
  int block_size;
};

class PagedDecodeTest : public ::testing::TestWithParam<CacheCase> {};

// Teacher-forced decode through the paged cache (fp32 storage) gives the
// logits of recomputing the whole sequence without a cache, every step.
TEST_P(PagedDecodeTest, MatchesRecomputationFor80Steps) {
  const ModelConfig config = TinyGqaConfig();
  const std::string dir = SavedModel(config, "decode_" + GetParam().attention + std::to_string(GetParam().block_size));
  EngineOptions o;
  o.model = dir;
  o.kv_dtype = DType::kF32;
  o.block_size = GetParam().block_size;
  o.attention = GetParam().attention;
  o.max_context = 128;
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &engine).ok());
  std::unique_ptr<LlamaModel> model;
  ASSERT_TRUE(LlamaModel::Load(dir, &model).ok());

  const int n = 80;
  const auto tokens = RandomTokens(n, 300, 5);
  at::Tensor expect = model->ForwardNoCache(tokens);  // [n, V], causal: row i sees tokens[0..i]
  ASSERT_GT(expect.std().item<float>(), 0.05f) << "logits too flat for the comparison to mean anything";
  ASSERT_TRUE(engine->AddSequence(0).ok());
  // A 9-token prefill chunk, then one token per step.
  std::vector<std::vector<float>> logits;
  ASSERT_TRUE(engine->Forward({SeqChunk{0, std::vector<int32_t>(tokens.begin(), tokens.begin() + 9)}}, true, &logits).ok());
  double worst = 0;
  for (int i = 0; i < 9; ++i) {
    for (int64_t v = 0; v < 300; ++v) worst = std::max(worst, std::abs(double(logits[0][i * 300 + v]) - expect[i][v].item<double>()));
  }
  for (int i = 9; i < n; ++i) {
    ASSERT_TRUE(engine->Forward({SeqChunk{0, {tokens[static_cast<size_t>(i)]}}}, false, &logits).ok());
    at::Tensor got = at::from_blob(logits[0].data(), {300}, at::kFloat);
    worst = std::max(worst, (got - expect[i]).abs().max().item<double>());
  }
  EXPECT_LE(worst, 1e-4) << "max |paged - recompute| over " << n << " positions";
  EXPECT_EQ(engine->SequenceLength(0), n);
}

INSTANTIATE_TEST_SUITE_P(Backends, PagedDecodeTest,
                         ::testing::Values(CacheCase{"cpu", 16}, CacheCase{"cpu", 1}, CacheCase{"reference", 16},
                                           CacheCase{"reference", 3}),
                         [](const auto& info) {
                           return info.param.attention + "_block" + std::to_string(info.param.block_size);
                         });

// The dense reference path (contiguous cache, plain libtorch attention) agrees too.
TEST(ModelTest, DenseReferenceMatchesRecomputation) {
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::Random(TinyGqaConfig(), 3, &m, 0.08).ok());
  const auto tokens = RandomTokens(40, 300, 9);
  at::Tensor expect = m->ForwardNoCache(tokens);
  DenseKVCache cache;
  at::Tensor a = m->ForwardDense(std::vector<int32_t>(tokens.begin(), tokens.begin() + 25), 0, &cache, DType::kF32);
  at::Tensor b = m->ForwardDense(std::vector<int32_t>(tokens.begin() + 25, tokens.end()), 25, &cache, DType::kF32);
  EXPECT_LE((at::cat({a, b}, 0) - expect).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(cache.length(), 40);
  EXPECT_EQ(cache.bytes(), 2LL * 2 * 2 * 16 * 40 * 4);
}

// Many sequences of different lengths in one decode step give each the
// logits it gets alone.
TEST(ModelTest, BatchedDecodeOverDifferentLengthsMatchesSingle) {
  const std::string dir = SavedModel(TinyGqaConfig(), "batched");
  EngineOptions o;
  o.model = dir;
  o.max_seqs = 4;
  o.max_context = 64;
  std::unique_ptr<Engine> batched, single;
  ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &batched).ok());
  ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &single).ok());
  const std::vector<int> lengths = {3, 17, 1, 33};
  std::vector<std::vector<float>> lb, ls;
  for (size_t i = 0; i < lengths.size(); ++i) {
    ASSERT_TRUE(batched->AddSequence(static_cast<int64_t>(i)).ok());
    ASSERT_TRUE(batched->Forward({SeqChunk{static_cast<int64_t>(i), RandomTokens(lengths[i], 300, 100 + i)}}, false, &lb).ok());
  }
  std::vector<SeqChunk> step;
  for (size_t i = 0; i < lengths.size(); ++i) step.push_back({static_cast<int64_t>(i), {static_cast<int32_t>(7 * i + 1)}});
  ASSERT_TRUE(batched->Forward(step, false, &lb).ok());
  for (size_t i = 0; i < lengths.size(); ++i) {
    ASSERT_TRUE(single->AddSequence(static_cast<int64_t>(i)).ok());
    ASSERT_TRUE(single->Forward({SeqChunk{static_cast<int64_t>(i), RandomTokens(lengths[i], 300, 100 + i)}}, false, &ls).ok());
    ASSERT_TRUE(single->Forward({step[i]}, false, &ls).ok());
    double worst = 0;
    for (size_t v = 0; v < ls[0].size(); ++v) worst = std::max(worst, std::abs(double(ls[0][v]) - lb[i][v]));
    EXPECT_LE(worst, 1e-5) << "sequence " << i;
  }
}

TEST(ModelTest, SaveLoadRoundTripKeepsLogits) {
  ModelConfig c = TinyGqaConfig();
  c.tie_word_embeddings = true;
  std::unique_ptr<LlamaModel> m, back;
  ASSERT_TRUE(LlamaModel::Random(c, 4, &m, 0.08).ok());
  const std::string dir = TempDir("roundtrip");
  ASSERT_TRUE(m->Save(dir).ok());
  ASSERT_TRUE(LlamaModel::Load(dir, &back).ok());
  EXPECT_TRUE(back->config().tie_word_embeddings);
  const auto t = RandomTokens(12, 300, 1);
  EXPECT_EQ((m->ForwardNoCache(t) - back->ForwardNoCache(t)).abs().max().item<double>(), 0.0);
}

// --- bad checkpoints: one clear error naming the file and the tensor or key ---

TEST(ModelLoadErrorTest, ShapeMismatchNamesTensorAndFile) {
  const std::string dir = SavedModel(TinyGqaConfig(), "shape");
  ModelConfig wrong = TinyGqaConfig();
  wrong.intermediate_size = 128;  // config.json now disagrees with the MLP tensors
  ASSERT_TRUE(SaveModelConfig(dir + "/config.json", wrong).ok());
  std::unique_ptr<LlamaModel> m;
  Status s = LlamaModel::Load(dir, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
}

TEST(ModelLoadErrorTest, MissingTensorIsNamed) {
  const std::string dir = SavedModel(TinyGqaConfig(), "missing");
  ModelConfig more = TinyGqaConfig();
  more.num_hidden_layers = 3;
  ASSERT_TRUE(SaveModelConfig(dir + "/config.json", more).ok());
  std::unique_ptr<LlamaModel> m;
  Status s = LlamaModel::Load(dir, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.2."), std::string::npos) << s.message();
}

TEST(ModelLoadErrorTest, UntiedModelWithoutLmHeadIsNamed) {
  ModelConfig tied = TinyGqaConfig();
  tied.tie_word_embeddings = true;
  const std::string dir = SavedModel(tied, "lmhead");
  ASSERT_TRUE(SaveModelConfig(dir + "/config.json", TinyGqaConfig()).ok());
  std::unique_ptr<LlamaModel> m;
  Status s = LlamaModel::Load(dir, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lm_head.weight"), std::string::npos) << s.message();
}

TEST(ModelLoadErrorTest, ConfigMissingKeyIsNamed) {
  const std::string dir = SavedModel(TinyGqaConfig(), "cfgkey");
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 8, "rms_norm_eps": 1e-5})";
  std::unique_ptr<LlamaModel> m;
  Status s = LlamaModel::Load(dir, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("config.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("intermediate_size"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
