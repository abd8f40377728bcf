// Sliding-window layers through the engine: logits of paged prefill, chunked
// prefill and decode agree with the dense forward (which masks the window),
// the pools hold only each local layer's window, and policies compose with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/engine.h"

namespace kvlab {
namespace {

// The "small" preset (4 layers, 8 query heads on 2 KV heads of 32) with a
// window of 8 on layers 0, 2 and 3; layer 1 global.
const std::vector<int64_t> kWindows = {8, 0, 8, 8};
constexpr int64_t kWindow = 8;

EngineOptions WindowOptions(const std::string& attention, int block_size) {
  EngineOptions o;
  o.model = "small";
  o.weight_seed = 3;
  o.kv_dtype = DType::kF32;
  o.max_context = 128;
  o.block_size = block_size;
  o.attention = attention;
  o.layer_sliding_window = kWindows;
  return o;
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t{256};
  for (int i = 1; i < n; ++i) t.push_back((i * 53 + 7) % 256);
  return t;
}

// Every position's logits, the prompt fed `chunk` tokens a step (chunk 1: decode).
std::vector<float> PagedLogits(Engine* e, const std::vector<int32_t>& tokens, size_t chunk) {
  EXPECT_TRUE(e->AddSequence(0).ok());
  std::vector<float> all;
  std::vector<std::vector<float>> logits;
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const std::vector<int32_t> c(tokens.begin() + off, tokens.begin() + std::min(tokens.size(), off + chunk));
    Status s = e->Forward({SeqChunk{0, c}}, /*all_logits=*/true, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) break;
    all.insert(all.end(), logits[0].begin(), logits[0].end());
  }
  return all;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::abs(double(x)));
  return m;
}

class SlidingWindowEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SlidingWindowEngineTest, PrefillChunksAndDecodeMatchTheDenseForward) {
  const std::vector<int32_t> tokens = Tokens(45);  // crosses the window five times
  std::vector<float> dense, dense_global;
  ASSERT_TRUE(DenseLogits(WindowOptions("reference", 16), tokens, /*nocache=*/true, &dense).ok());
  EngineOptions no_window = WindowOptions("reference", 16);
  no_window.layer_sliding_window.clear();
  ASSERT_TRUE(DenseLogits(no_window, tokens, true, &dense_global).ok());
  const double scale = MaxAbs(dense);
  // The window matters at this length (else this test could not fail).
  ASSERT_GT(MaxAbsDiff(dense, dense_global), 1e-2 * scale);
  for (int block_size : {1, 4, 16}) {
    for (size_t chunk : {tokens.size(), size_t{5}, size_t{1}}) {
      SCOPED_TRACE("block_size " + std::to_string(block_size) + ", chunk " + std::to_string(chunk));
      std::unique_ptr<Engine> e;
      ASSERT_TRUE(Engine::Create(WindowOptions(GetParam(), block_size), {PolicySpec{"full", {}, "t"}}, &e).ok());
      const std::vector<float> paged = PagedLogits(e.get(), tokens, chunk);
      EXPECT_LE(MaxAbsDiff(paged, dense), 1e-5 * scale + 1e-6);
      // The pools: the global layer holds every token, each local one only the
      // blocks holding positions S - window + 1 .. S - 1 (what the next query sees).
      const int64_t S = static_cast<int64_t>(tokens.size());
      const int64_t blocks_all = (S + block_size - 1) / block_size;
      const int64_t first_kept = (S - kWindow + 1) / block_size * block_size;
      const int64_t blocks_local = blocks_all - first_kept / block_size;
      const int64_t heads = e->cache().shape().num_kv_heads;
      EXPECT_EQ(e->Memory().bytes_in_use, heads * e->Memory().block_bytes * (blocks_all + 3 * blocks_local));
      for (int l : {0, 2, 3}) EXPECT_EQ(e->cache().stream(0, l, 1).blocks.size(), static_cast<size_t>(blocks_local));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SlidingWindowEngineTest, ::testing::Values("reference", "cpu"),
                         [](const auto& info) { return info.param; });

// Policies on top of the window (budgets above it): each runs, the local
// layers keep only their window (selection acts within it, and then the
// out-of-window slots go exactly; KIVI alone encodes what remains, dropped by
// whole blocks), and the pools hold less than the same stack without windows.
TEST(SlidingWindowEngineTest, PoliciesComposeWithTheWindow) {
  const std::vector<std::vector<PolicySpec>> stacks = {
      {PolicySpec{"h2o", {{"budget", "24"}}, "t"}},
      {PolicySpec{"sink", {{"n_sink", "2"}, {"window", "20"}}, "t"}},
      {PolicySpec{"kivi", {{"residual", "16"}, {"group", "32"}}, "t"}},
      {PolicySpec{"h2o", {{"budget", "60"}}, "t"}, PolicySpec{"kivi", {{"residual", "16"}, {"group", "32"}}, "t"}},
  };
  const std::vector<int32_t> tokens = Tokens(100);
  for (const auto& stack : stacks) {
    SCOPED_TRACE(stack[0].name + (stack.size() > 1 ? "+" + stack[1].name : ""));
    EngineOptions with = WindowOptions("cpu", 4), without = with;
    without.layer_sliding_window.clear();
    std::unique_ptr<Engine> a, b;
    ASSERT_TRUE(Engine::Create(with, stack, &a).ok());
    ASSERT_TRUE(Engine::Create(without, stack, &b).ok());
    const std::vector<float> la = PagedLogits(a.get(), tokens, 1), lb = PagedLogits(b.get(), tokens, 1);
    ASSERT_EQ(la.size(), lb.size());
    for (float x : la) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LT(a->Memory().bytes_in_use, b->Memory().bytes_in_use);
    const int64_t S = static_cast<int64_t>(tokens.size());
    for (int l : {0, 2, 3}) {
      for (int h = 0; h < 2; ++h) {
        const Stream& s = a->cache().stream(0, l, h);
        const bool selects = stack[0].name != "kivi";
        // Out-of-window slots: none after a selection policy's compaction, else fewer than a block.
        EXPECT_LT(KVCache::FirstInWindow(s, S, kWindow), selects ? 1 : 4) << "layer " << l;
        EXPECT_LE(s.num_tokens, kWindow - 1 + (selects ? 0 : 3)) << "layer " << l;
        EXPECT_EQ(s.positions.back(), S - 1);
      }
    }
  }
}

TEST(SlidingWindowEngineTest, WindowsOfTheWrongCountAreAnError) {
  EngineOptions o = WindowOptions("cpu", 16);
  o.layer_sliding_window = {8, 0};
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer_sliding_window"), std::string::npos) << s.ToString();
  o.num_layers = 2;  // a preset cut to 2 layers takes 2 windows
  EXPECT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e).ok());
}

}  // namespace
}  // namespace kvlab
