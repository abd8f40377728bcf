// Sliding-window layers in the cache (CacheShape::layer_window): the first
// visible slot by position, the leading-block drop, and the bytes the pools
// hold at Gemma 3 12B's shape (5 local : 1 global, window 1024), alone and
// composed with selection (sink, h2o) and representation (kivi) policies.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/kv_cache.h"
#include "kernels/append_kv.h"
#include "policies/kv_policy.h"

namespace kvlab {
namespace {

std::vector<int32_t> Positions(int64_t start, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), static_cast<int32_t>(start));
  return v;
}

TEST(KVCacheWindowTest, FirstInWindowIsTheFirstSlotAfterQueryMinusWindow) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    Stream s;
    int32_t p = static_cast<int32_t>(rng() % 4);
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      s.positions.push_back(p);
      p += 1 + static_cast<int32_t>(rng() % 3 == 0 ? rng() % 5 : 0);  // gaps: evicted slots
    }
    s.num_tokens = n;
    const int64_t q_pos = p + static_cast<int64_t>(rng() % 3);
    const int64_t window = 1 + static_cast<int64_t>(rng() % 40);
    int64_t want = 0;
    while (want < n && s.positions[static_cast<size_t>(want)] <= q_pos - window) ++want;
    EXPECT_EQ(KVCache::FirstInWindow(s, q_pos, window), want) << "trial " << trial;
  }
}

CacheShape WindowShape(std::vector<int64_t> windows, int block_size) {
  CacheShape s;
  s.num_layers = static_cast<int>(windows.size());
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.block_size = block_size;
  s.dtype = DType::kF32;
  s.layer_window = std::move(windows);
  return s;
}

TEST(KVCacheWindowTest, ShapeRejectsWindowsOfTheWrongCountOrSign) {
  CacheShape s = WindowShape({4, 0}, 16);
  EXPECT_TRUE(s.Validate().ok());
  s.layer_window = {4};
  EXPECT_NE(s.Validate().message().find("layer_window"), std::string::npos);
  s.layer_window = {4, -1};
  EXPECT_NE(s.Validate().message().find("layer 1"), std::string::npos);
}

// BuildWindows gives each query of a window layer its first visible slot and
// global layers none; the drop frees whole leading blocks and keeps the K/V of
// every kept slot where the page table says it is.
TEST(KVCacheWindowTest, WindowsAndLeadingBlockDropKeepTheRightSlots) {
  const CacheShape shape = WindowShape({5, 0}, 4);
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(shape, 64, true, &c).ok());
  ASSERT_TRUE(c->AddSequence(7).ok());
  const int64_t n = 11;
  auto pos = Positions(0, n);
  ASSERT_TRUE(c->Reserve(7, n, pos.data()).ok());
  PageTable pt;
  c->BuildPageTable({7}, &pt);
  const int d = shape.head_dim, H = shape.num_kv_heads;
  std::vector<float> k(static_cast<size_t>(n * H * d)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  const int32_t qo[2] = {0, static_cast<int32_t>(n)};
  for (int l = 0; l < 2; ++l) AppendKV(pt.Layer(l), qo, 1, H, k.data(), v.data());
  // A prefill chunk of 3 queries (positions 8, 9, 10) over the 11 slots.
  const std::vector<int32_t> qo3 = {0, 3};
  {
    PageTable pt3;
    c->BuildPageTable({7}, &pt3);
    c->BuildWindows({7}, qo3, &pt3);
    EXPECT_EQ(pt3.FirstVisible(1), nullptr);
    const int32_t* f = pt3.FirstVisible(0);
    ASSERT_NE(f, nullptr);
    for (int j = 0; j < 3; ++j) {
      for (int h = 0; h < H; ++h) EXPECT_EQ(f[j * H + h], 8 + j - 5 + 1) << "query " << j;  // pos > q - 5
    }
  }
  // Next query at position 11 sees positions 7..10: slots 0..6 are dead, and
  // blocks 0 (slots 0-3) is wholly dead, block 1 (4-7) is not.
  std::vector<int64_t> keep;
  ASSERT_TRUE(c->SlotsToKeep(7, 0, 0, n, nullptr, &keep));
  ASSERT_EQ(keep.size(), 7u);
  EXPECT_EQ(keep.front(), 4);
  EXPECT_TRUE(c->DropsLeadingUnits(c->stream(7, 0, 0), keep));
  EXPECT_FALSE(c->SlotsToKeep(7, 1, 0, n, nullptr, &keep));  // the global layer keeps all
  const int64_t used = c->pool().num_used();
  const int32_t second_block = c->stream(7, 0, 1).blocks[1];
  for (int h = 0; h < H; ++h) {
    ASSERT_TRUE(c->SlotsToKeep(7, 0, h, n, nullptr, &keep));
    ASSERT_TRUE(c->Compact(7, 0, h, keep).ok());
  }
  EXPECT_EQ(c->pool().num_used(), used - H);
  const Stream& s = c->stream(7, 0, 1);
  EXPECT_EQ(s.num_tokens, 7);
  EXPECT_EQ(s.blocks.front(), second_block);  // nothing moved: the old second block is now the first
  EXPECT_EQ(s.positions.front(), 4);
  std::vector<float> kr(static_cast<size_t>(d)), vr(kr.size());
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    c->ReadSlot(7, 0, 1, t, kr.data(), vr.data());
    const size_t src = static_cast<size_t>(((t + 4) * H + 1) * d);
    EXPECT_EQ(kr[0], k[src]) << "slot " << t;
    EXPECT_EQ(vr[d - 1], v[src + d - 1]) << "slot " << t;
  }
  // A selection policy sees only the slots the window shows.
  class KeepFirstTwo : public KVPolicy {
   public:
    KeepFirstTwo() : KVPolicy(PolicyParams()) {}
    const char* Name() const override { return "first-two"; }
    uint32_t Concerns() const override { return kConcernSelection; }
    bool SelectSlots(const StreamState& st, std::vector<int64_t>* keep) const override {
      EXPECT_GT(st.positions[0], 11 - 5);  // in the window of the query at 11
      keep->assign({0, 1});
      return true;
    }
  } sel;
  ASSERT_TRUE(c->SlotsToKeep(7, 0, 0, n, &sel, &keep));
  EXPECT_EQ(keep, (std::vector<int64_t>{3, 4}));  // slots 0-2 hold positions 4-6, out of the window
}

// --- bytes at Gemma 3 12B's shape ---
// 48 layers, 8 KV heads of 256, bf16, sliding window 1024 on all layers but
// every sixth (layer_types in its config.json), blocks of 16 tokens.
constexpr int kLayers = 48, kHeads = 8, kDim = 256, kBlock = 16;
constexpr int64_t kWindow = 1024;

bool GlobalLayer(int l) { return (l + 1) % 6 == 0; }

CacheShape Gemma3Shape() {
  CacheShape s;
  s.num_layers = kLayers;
  s.num_kv_heads = kHeads;
  s.head_dim = kDim;
  s.block_size = kBlock;
  s.dtype = DType::kBF16;
  for (int l = 0; l < kLayers; ++l) s.layer_window.push_back(GlobalLayer(l) ? 0 : kWindow);
  return s;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// After a step that brought the sequence to S tokens: a local stream keeps
// the blocks holding positions S - window + 1 .. S - 1 (what the query at S
// sees), block-rounded; a global one keeps all.
int64_t PlainBlocks(int64_t S, bool global) {
  const int64_t first_kept = global ? 0 : std::max<int64_t>(0, S - kWindow + 1) / kBlock * kBlock;
  return CeilDiv(S, kBlock) - first_kept / kBlock;
}

// One engine step as the engine applies it: append n tokens, then keep in
// every stream what SlotsToKeep says (with `sel`), then seal.
void Step(KVCache* c, int64_t* S, int64_t n, const KVPolicy* sel) {
  auto pos = Positions(*S, n);
  ASSERT_TRUE(c->Reserve(0, n, pos.data()).ok());
  *S += n;
  std::vector<int64_t> keep;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      if (c->SlotsToKeep(0, l, h, *S, sel, &keep)) {
        ASSERT_TRUE(c->Compact(0, l, h, keep).ok());
      }
    }
  }
  c->Seal(0);
}

TEST(KVCacheWindowTest, Gemma3PoolsHoldTheWindowOnLocalLayersAndAllOnGlobalOnes) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Gemma3Shape(), 80000, /*with_storage=*/false, &c).ok());  // accounting only
  ASSERT_TRUE(c->AddSequence(0).ok());
  const int64_t block_bytes = 2LL * kBlock * kDim * 2;
  int64_t S = 0;
  auto expected = [&] {
    return kHeads * block_bytes * (8 * PlainBlocks(S, true) + 40 * PlainBlocks(S, false));
  };
  for (int chunk = 0; chunk < 16; ++chunk) {  // a long prefill: 8192 tokens in chunks of 512
    Step(c.get(), &S, 512, nullptr);
    ASSERT_EQ(c->pool().bytes_in_use(), expected()) << "after prefill chunk " << chunk;
  }
  // 8192 tokens: global layers 512 blocks a stream, local ones 64 (1024 tokens).
  EXPECT_EQ(c->pool().bytes_in_use(), kHeads * block_bytes * (8 * 512 + 40 * 64));
  EXPECT_EQ(c->pool().bytes_in_use(), 872415232);  // against 3,221,225,472 for all layers global
  for (int t = 0; t < 40; ++t) {  // decode
    Step(c.get(), &S, 1, nullptr);
    ASSERT_EQ(c->pool().bytes_in_use(), expected()) << "after decode step " << t;
  }
  for (int l = 0; l < kLayers; ++l) {
    const Stream& s = c->stream(0, l, 3);
    EXPECT_EQ(s.positions.back(), S - 1);
    if (!GlobalLayer(l)) {
      EXPECT_LE(s.positions.front(), S - kWindow + 1) << "layer " << l;  // all the window kept
    }
  }
  EXPECT_EQ(c->SlotsInUse(0), kHeads * (8 * S + 40 * (S - (S - kWindow + 1) / kBlock * kBlock)));
}

// Selection within the window: sink (4 sinks + 2000 recent) bounds the global
// layers and leaves the local ones their window (1023 slots once a selection
// policy compacts them: the out-of-window slots go exactly); h2o (budget 256)
// keeps 256 slots on global layers and at most 256 that the window still
// shows on local ones.
TEST(KVCacheWindowTest, Gemma3WindowComposesWithSelectionPolicies) {
  PolicyStack sink, h2o;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"sink", {{"n_sink", "4"}, {"window", "2000"}}, "t"}}, &sink).ok());
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"h2o", {{"budget", "256"}}, "t"}}, &h2o).ok());
  const int64_t block_bytes = 2LL * kBlock * kDim * 2;
  for (const PolicyStack* stack : {&sink, &h2o}) {
    const bool is_sink = stack == &sink;
    SCOPED_TRACE(is_sink ? "sink" : "h2o");
    std::unique_ptr<KVCache> c;
    ASSERT_TRUE(KVCache::Create(Gemma3Shape(), 80000, false, &c).ok());
    ASSERT_TRUE(c->AddSequence(0).ok());
    int64_t S = 0;
    for (int chunk = 0; chunk < 8; ++chunk) Step(c.get(), &S, 512, stack->For(kConcernSelection));
    for (int t = 0; t < 20; ++t) Step(c.get(), &S, 1, stack->For(kConcernSelection));
    const int64_t global_blocks = is_sink ? CeilDiv(2004, kBlock) : 256 / kBlock;
    int64_t local_blocks = 0;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        const Stream& s = c->stream(0, l, h);
        if (GlobalLayer(l)) {
          EXPECT_EQ(s.blocks.size(), static_cast<size_t>(global_blocks)) << "layer " << l;
          EXPECT_EQ(s.positions.front(), 0) << "layer " << l;  // sinks; h2o's ties go to old slots
          continue;
        }
        local_blocks += static_cast<int64_t>(s.blocks.size());
        EXPECT_EQ(KVCache::FirstInWindow(s, S, kWindow), 0) << "layer " << l;  // only what the window shows
        EXPECT_EQ(s.blocks.size(), static_cast<size_t>(CeilDiv(s.num_tokens, kBlock)));
        if (is_sink) {
          EXPECT_EQ(s.num_tokens, kWindow - 1) << "layer " << l;
          continue;
        }
        EXPECT_LE(s.num_tokens, 256) << "layer " << l;
        EXPECT_GE(s.num_tokens, 200) << "layer " << l;
      }
    }
    EXPECT_EQ(c->pool().bytes_in_use(), block_bytes * (8 * kHeads * global_blocks + local_blocks));
  }
}

// Representation of what remains: KIVI-2 (groups of 32, 128-token residual)
// encodes a local stream's window, dropped by whole encoded blocks.
TEST(KVCacheWindowTest, Gemma3WindowComposesWithKivi) {
  CacheShape shape = Gemma3Shape();
  shape.encoded = true;
  shape.enc.kind = EncodingKind::kKivi;
  shape.enc.bits = 2;
  shape.enc.group = 32;
  shape.enc.tokens_per_block = 32;
  shape.enc.head_dim = kDim;
  shape.residual = 128;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(shape, 40000, false, &c, 40000).ok());
  ASSERT_TRUE(c->AddSequence(0).ok());
  const int64_t plain_bytes = c->pool().block_bytes(), enc_bytes = c->encoded_pool()->block_bytes();
  // A stream holding positions [a, S), a on a group boundary: whole groups
  // sealed while the plain tail holds at least the residual plus a group.
  auto stream_bytes = [&](int64_t S, bool global) {
    const int64_t a = global ? 0 : std::max<int64_t>(0, S - kWindow + 1) / 32 * 32;
    const int64_t n = S - a;
    const int64_t enc = n >= 128 + 32 ? (n - 128) / 32 * 32 : 0;
    return enc / 32 * enc_bytes + CeilDiv(n - enc, kBlock) * plain_bytes;
  };
  int64_t S = 0;
  for (int step = 0; step < 12 + 30; ++step) {
    Step(c.get(), &S, step < 12 ? 512 : 1, nullptr);
    const int64_t want = kHeads * (8 * stream_bytes(S, true) + 40 * stream_bytes(S, false));
    ASSERT_EQ(c->BytesInUse(), want) << "step " << step << ", S = " << S;
  }
  // Under half of KIVI-2 with every layer global, at 6174 tokens.
  EXPECT_EQ(S, 6174);
  EXPECT_LT(c->BytesInUse(), kHeads * kLayers * stream_bytes(S, true) / 2);
}

}  // namespace
}  // namespace kvlab
