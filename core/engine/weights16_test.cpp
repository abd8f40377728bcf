// Weights kept in 16 bits: `kvlab init --dtype`'s writer against Random's
// weights, a bf16 checkpoint loaded as bf16 whose fp32 arithmetic gives the
// logits of the same weights widened to fp32 (paged decode and prefill), the
// opt-in 16-bit arithmetic, and MatMul16's paths against at::linear.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"
#include "core/model/matmul16.h"
#include "core/model/model.h"
#include "core/model/safetensors.h"

namespace kvlab {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.name = "weights16-test";
  c.vocab_size = 300;
  c.hidden_size = 96;
  c.intermediate_size = 200;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.rope_theta = 10000;
  c.max_position_embeddings = 4096;
  return c;
}

std::string TempDir(const std::string& name) {
  std::string dir = ProcessTempDir() + "/weights16_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A copy of a checkpoint with every tensor widened to fp32 (exact).
void WidenCheckpoint(const std::string& from, const std::string& to) {
  std::unique_ptr<SafetensorsFile> f;
  ASSERT_TRUE(SafetensorsFile::Open(from + "/model.safetensors", &f).ok());
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> out;
  for (const auto& [name, view] : f->tensors()) {
    data.emplace_back(static_cast<size_t>(view.numel()));
    ConvertToF32(view.dtype, view.data, data.back().data(), view.numel());
  }
  size_t i = 0;
  for (const auto& [name, view] : f->tensors()) {
    out.push_back({name, DType::kF32, view.shape, data[i++].data()});
  }
  ASSERT_TRUE(WriteSafetensors(to + "/model.safetensors", out).ok());
  std::filesystem::copy_file(from + "/config.json", to + "/config.json");
}

TEST(Weights16Test, WriteRandomF32IsRandomSaved) {
  const ModelConfig c = SmallConfig();
  const std::string a = TempDir("streamed"), b = TempDir("saved");
  ASSERT_TRUE(WriteRandomCheckpoint(c, 7, 0.05, a).ok());
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LlamaModel::Random(c, 7, &m, 0.05).ok());
  ASSERT_TRUE(m->Save(b).ok());
  EXPECT_EQ(ReadAll(a + "/model.safetensors"), ReadAll(b + "/model.safetensors"));
  EXPECT_EQ(ReadAll(a + "/config.json"), ReadAll(b + "/config.json"));
}

TEST(Weights16Test, WriteRandomBf16IsRandomRounded) {
  ModelConfig c = SmallConfig();
  c.tie_word_embeddings = false;
  const std::string a = TempDir("bf16"), f = TempDir("f32");
  ASSERT_TRUE(WriteRandomCheckpoint(c, 3, 0.05, a, DType::kBF16).ok());
  ASSERT_TRUE(WriteRandomCheckpoint(c, 3, 0.05, f, DType::kF32).ok());
  std::unique_ptr<SafetensorsFile> fa, ff;
  ASSERT_TRUE(SafetensorsFile::Open(a + "/model.safetensors", &fa).ok());
  ASSERT_TRUE(SafetensorsFile::Open(f + "/model.safetensors", &ff).ok());
  ASSERT_EQ(fa->tensors().size(), ff->tensors().size());
  for (const auto& [name, v] : ff->tensors()) {
    const TensorView* w = fa->Find(name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->dtype, DType::kBF16) << name;
    at::Tensor want = at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::kFloat).to(at::kBFloat16);
    at::Tensor got = at::from_blob(const_cast<uint8_t*>(w->data), w->shape, at::kBFloat16);
    EXPECT_TRUE(at::equal(want, got)) << name;
  }
  ModelConfig back;
  ASSERT_TRUE(LoadModelConfig(a + "/config.json", &back).ok());
  EXPECT_EQ(back.torch_dtype, "bfloat16");
}

// A bf16 checkpoint keeps bf16 matrices, and its fp32 arithmetic gives the
// logits of the same weights stored as fp32, in chunked prefill (BLAS over
// widened chunks) and decode (LinearBf16), through the engine.
TEST(Weights16Test, Bf16CheckpointMatchesItsWidenedCopy) {
  const ModelConfig c = SmallConfig();
  const std::string d16 = TempDir("ck16"), d32 = TempDir("ck32");
  ASSERT_TRUE(WriteRandomCheckpoint(c, 5, 0.08, d16, DType::kBF16).ok());
  WidenCheckpoint(d16, d32);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 300);
  std::vector<std::vector<float>> logits[2];
  for (int k = 0; k < 2; ++k) {
    EngineOptions o;
    o.model = k == 0 ? d16 : d32;
    o.kv_dtype = DType::kF32;
    o.max_context = 64;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e).ok());
    EXPECT_EQ(e->weight_dtype(), k == 0 ? DType::kBF16 : DType::kF32);
    ASSERT_TRUE(e->AddSequence(0).ok());
    std::vector<std::vector<float>> l;
    ASSERT_TRUE(e->Forward({SeqChunk{0, std::vector<int32_t>(tokens.begin(), tokens.begin() + 30)}}, true, &l).ok());
    logits[k].push_back(l[0]);
    for (size_t i = 30; i < tokens.size(); ++i) {
      ASSERT_TRUE(e->Forward({SeqChunk{0, {tokens[i]}}}, false, &l).ok());
      logits[k].push_back(l[0]);
    }
  }
  double worst = 0, scale = 0;
  for (size_t s = 0; s < logits[0].size(); ++s) {
    ASSERT_EQ(logits[0][s].size(), logits[1][s].size());
    for (size_t j = 0; j < logits[0][s].size(); ++j) {
      worst = std::max(worst, std::abs(double(logits[0][s][j]) - logits[1][s][j]));
      scale = std::max(scale, std::abs(double(logits[1][s][j])));
    }
  }
  ASSERT_GT(scale, 0.1);
  EXPECT_LE(worst, 1e-5 * scale) << "bf16 weights with fp32 arithmetic vs the same weights in fp32";
}

// matmul16 = kMatmul16PrefillRows (`--matmul prefill`): products of a
// 30-token prefill chunk multiply in bf16 (the same logits as bf16
// everywhere, which differ from fp32's), one-row products (decode steps) in
// fp32 (the same logits as fp32 everywhere, bit for bit).
TEST(Weights16Test, PrefillArithmeticRoundsOnlyManyRowProducts) {
  const ModelConfig c = SmallConfig();
  const std::string d16 = TempDir("ckprefill");
  ASSERT_TRUE(WriteRandomCheckpoint(c, 6, 0.08, d16, DType::kBF16).ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back((i * 41 + 7) % 300);
  // [mode][0]: the 30 tokens as one chunk, every position's logits;
  // [mode][1..30]: one token a step.
  const int64_t modes[3] = {0, 1, kMatmul16PrefillRows};
  std::vector<std::vector<float>> out[3];
  for (int m = 0; m < 3; ++m) {
    for (int run = 0; run < 2; ++run) {
      EngineOptions o;
      o.model = d16;
      o.kv_dtype = DType::kF32;
      o.max_context = 64;
      o.matmul16 = modes[m];
      std::unique_ptr<Engine> e;
      ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e).ok());
      ASSERT_TRUE(e->AddSequence(0).ok());
      std::vector<std::vector<float>> l;
      if (run == 0) {
        ASSERT_TRUE(e->Forward({SeqChunk{0, tokens}}, true, &l).ok());
        out[m].push_back(l[0]);
      } else {
        for (int32_t t : tokens) {
          ASSERT_TRUE(e->Forward({SeqChunk{0, {t}}}, false, &l).ok());
          out[m].push_back(l[0]);
        }
      }
    }
  }
  ASSERT_EQ(out[2].size(), 31u);
  EXPECT_EQ(out[2][0], out[1][0]) << "a 30-row chunk: bf16 arithmetic, as --matmul weights";
  for (size_t s = 1; s < out[2].size(); ++s) {
    EXPECT_EQ(out[2][s], out[0][s]) << "one-row step " << s << ": fp32 arithmetic, as --matmul f32";
  }
  double diff = 0, scale = 0;
  for (size_t j = 0; j < out[0][0].size(); ++j) {
    diff = std::max(diff, std::abs(double(out[2][0][j]) - out[0][0][j]));
    scale = std::max(scale, std::abs(double(out[0][0][j])));
  }
  ASSERT_GT(scale, 0.1);
  EXPECT_GT(diff, 1e-4 * scale) << "the chunk's products were not rounded";
  EXPECT_LE(diff, 3e-2 * scale);
}

// The opt-in 16-bit arithmetic really rounds (differs beyond fp32 noise) and
// stays within bf16's precision.
TEST(Weights16Test, Matmul16RoundsActivations) {
  at::manual_seed(1);
  at::Tensor x = at::randn({3, 256}), w = at::randn({40, 256}).to(at::kBFloat16), b = at::randn({40});
  at::Tensor exact = at::linear(x, w.to(at::kFloat), b);
  at::Tensor f32 = MatMul16(x, w, b, /*math16=*/false);
  at::Tensor m16 = MatMul16(x, w, b, /*math16=*/true);
  const double range = exact.abs().max().item<double>();
  EXPECT_LE((f32 - exact).abs().max().item<double>(), 1e-5 * range);
  const double err16 = (m16 - exact).abs().max().item<double>();
  EXPECT_GT(err16, 1e-4 * range);
  EXPECT_LE(err16, 3e-2 * range);
}

// Every CPU path of MatMul16's fp32 arithmetic against at::linear on the
// widened weights: one and few rows (LinearBf16), many rows in one chunk and
// across chunks (bias added once), f16 weights, leading dimensions kept.
TEST(Weights16Test, MatMul16PathsMatchLinear) {
  at::manual_seed(2);
  for (at::ScalarType st : {at::kBFloat16, at::kHalf}) {
    at::Tensor w = at::randn({70, 48}).to(st), b = at::randn({70});
    for (int64_t rows : {1, 5, 8, 9, 33}) {
      at::Tensor x = at::randn({rows, 48});
      at::Tensor want = at::linear(x, w.to(at::kFloat), b);
      for (int64_t chunk : {kWidenChunkBytes, int64_t{48 * 4 * 16}}) {
        at::Tensor got = MatMul16(x, w, b, false, chunk);
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_LE((got - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>())
            << "rows " << rows << " chunk " << chunk << " dtype " << st;
      }
    }
    at::Tensor x3 = at::randn({2, 3, 48});
    at::Tensor got3 = MatMul16(x3, w, at::Tensor(), false, 48 * 4 * 16);
    EXPECT_EQ(got3.sizes(), (std::vector<int64_t>{2, 3, 70}));
    EXPECT_LE((got3 - at::linear(x3, w.to(at::kFloat))).abs().max().item<double>(), 1e-4);
  }
}

}  // namespace
}  // namespace kvlab
