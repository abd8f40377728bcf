// The SnapKV family, TOVA and key-norm in the engine, on a tiny random model:
// SnapKV's observation window survives bounded steps (a prompt run as 64-token
// steps keeps exactly what one step over it keeps), TOVA evicts one slot a
// decode step, key-norm keeps the lowest-norm keys the full cache holds,
// Ada-KV's heads hold different lengths in exactly their blocks, and a
// window larger than a step is refused naming the policy and parameter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"

namespace kvlab {
namespace {

std::string TinyDir() {
  static const std::string dir = [] {
    ModelConfig c;
    c.name = "tiny-snapkv-test";
    c.vocab_size = 300;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 32;
    c.max_position_embeddings = 4096;
    const std::string d = ProcessTempDir() + "/tiny_snapkv";
    std::filesystem::remove_all(d);
    EXPECT_TRUE(WriteRandomCheckpoint(c, 33, 0.08, d).ok());
    return d;
  }();
  return dir;
}

std::unique_ptr<Engine> Make(const std::vector<PolicySpec>& policies, int64_t max_step_tokens = 64,
                             const std::string& attention = "cpu", Status* status = nullptr) {
  EngineOptions o;
  o.model = TinyDir();
  o.kv_dtype = DType::kF32;
  o.max_context = 512;
  o.max_step_tokens = max_step_tokens;
  o.attention = attention;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(o, policies, &e);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return e;
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 53 + 7) % 300);
  return t;
}

void Prefill(Engine* e, int n) {
  ASSERT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  const Status s = e->Forward({SeqChunk{0, Tokens(n)}}, false, &logits);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// 70 prompt tokens in steps of 64 run as 54 + 16 (the last step made as long
// as the window), so the window's attention is that of one step's last 16
// queries: the kept set is the one-step run's, where the kernels count only
// the chunk's last 16 queries.
TEST(SnapKVEngineTest, TheObservationWindowSurvivesBoundedSteps) {
  for (const char* attention : {"cpu", "reference"}) {
    SCOPED_TRACE(attention);
    for (const char* name : {"snapkv", "pyramidkv", "adakv"}) {
      SCOPED_TRACE(name);
      const PolicySpec spec{name, {{"budget", "48"}, {"window", "16"}, {"every", "64"}}, "t"};
      auto stepped = Make({spec}, 64, attention);
      auto whole = Make({spec}, 0, attention);
      ASSERT_TRUE(stepped && whole);
      EXPECT_EQ(stepped->step_tokens(), 64);
      Prefill(stepped.get(), 70);
      Prefill(whole.get(), 70);
      int64_t total = 0;
      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < 2; ++h) {
          const Stream& a = stepped->cache().stream(0, l, h);
          EXPECT_EQ(a.positions, whole->cache().stream(0, l, h).positions) << "layer " << l << " head " << h;
          total += a.num_tokens;
          for (int t = 54; t < 70; ++t) {
            EXPECT_NE(std::find(a.positions.begin(), a.positions.end(), t), a.positions.end()) << "window slot " << t;
          }
        }
      }
      // pyramidkv's bottom layer (16 + 63 slots) holds all 70 here.
      if (std::string(name) != "pyramidkv") {
        EXPECT_EQ(total, 4 * 48) << "the total budget";
      }
    }
  }
}

TEST(SnapKVEngineTest, AWindowLargerThanAStepIsRefused) {
  Status s;
  auto e = Make({PolicySpec{"snapkv", {{"window", "100"}}, "t"}}, 64, "cpu", &s);
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(s.message(), "policy 'snapkv' parameter 'window' is 100, more than the engine's max_step_tokens 64: the "
                         "observation window must fit in one step");
}

// Ada-KV in the engine: per-head lengths differ, every head keeps its window
// and at least its safeguard, and the pool holds exactly each stream's blocks.
TEST(SnapKVEngineTest, AdaKVHeadsHoldDifferentLengthsInExactlyTheirBlocks) {
  auto e = Make({PolicySpec{"adakv", {{"budget", "48"}, {"window", "16"}, {"every", "64"}, {"alpha", "0.2"}}, "t"}});
  Prefill(e.get(), 200);
  const KVCache& c = e->cache();
  int64_t blocks = 0;
  bool differ = false;
  for (int l = 0; l < 2; ++l) {
    int64_t layer = 0;
    for (int h = 0; h < 2; ++h) {
      const Stream& st = c.stream(0, l, h);
      layer += st.num_tokens;
      blocks += (st.num_tokens + 15) / 16;
      EXPECT_GE(st.num_tokens, 16 + 6);  // window + floor(0.2 x 32)
      differ = differ || st.num_tokens != c.stream(0, l, 0).num_tokens;
    }
    EXPECT_EQ(layer, 2 * 48);
  }
  EXPECT_TRUE(differ) << "no head got more than another";
  EXPECT_EQ(c.pool().num_used(), blocks);
}

// TOVA once full: each decode step adds one slot and evicts exactly one; in
// "mean" the layer's heads keep the same positions.
TEST(SnapKVEngineTest, TovaEvictsOneSlotADecodeStep) {
  auto e = Make({PolicySpec{"tova", {{"budget", "32"}}, "t"}});
  Prefill(e.get(), 40);
  std::vector<std::vector<float>> logits;
  for (int t = 0; t < 20; ++t) {
    std::vector<int32_t> before = e->cache().stream(0, 1, 0).positions;
    ASSERT_TRUE(e->Forward({SeqChunk{0, {static_cast<int32_t>((t * 11) % 300)}}}, false, &logits).ok());
    const std::vector<int32_t>& after = e->cache().stream(0, 1, 0).positions;
    ASSERT_EQ(after.size(), 32u);
    EXPECT_EQ(after.back(), 40 + t);
    int gone = 0;
    for (int32_t p : before) gone += std::find(after.begin(), after.end(), p) == after.end() ? 1 : 0;
    EXPECT_EQ(gone, 1) << "step " << t;
    for (int l = 0; l < 2; ++l) EXPECT_EQ(e->cache().stream(0, l, 1).positions, e->cache().stream(0, l, 0).positions);
  }
}

// Key-norm keeps, of the prompt's 40 keys, the 31 older ones with the lowest
// L2 norm (as the full cache stores them) and the newest.
TEST(SnapKVEngineTest, KeyNormKeepsTheLowestNormKeys) {
  auto full = Make({PolicySpec{"full", {}, "t"}});
  auto kn = Make({PolicySpec{"key-norm", {{"budget", "32"}}, "t"}});
  Prefill(full.get(), 40);
  Prefill(kn.get(), 40);
  std::vector<float> k(32), v(32);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      std::vector<std::pair<float, int32_t>> norms;
      for (int t = 0; t < 39; ++t) {
        full->cache().ReadSlot(0, l, h, t, k.data(), v.data());
        double s = 0;
        for (float x : k) s += static_cast<double>(x) * x;
        norms.push_back({static_cast<float>(std::sqrt(s)), t});
      }
      std::sort(norms.begin(), norms.end());
      std::vector<int32_t> want;
      for (int i = 0; i < 31; ++i) want.push_back(norms[static_cast<size_t>(i)].second);
      std::sort(want.begin(), want.end());
      want.push_back(39);
      EXPECT_EQ(kn->cache().stream(0, l, h).positions, want) << "layer " << l << " head " << h;
    }
  }
}

}  // namespace
}  // namespace kvlab
