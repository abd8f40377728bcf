// Quest at llama-3.1-8b's shape (32 layers x 8 KV heads of 128, 32 query
// heads, bf16) with random K/V: the pools quest reserves and holds are
// exactly full's (the cache stays whole), and the K/V bytes one decode step
// reads fall with k, to what the rule gives: the dense layers every slot,
// the others k - 1 full pages and the recent page.
// (model/ sits above cache/, and the preset lives here.)
#include <gtest/gtest.h>

#include <random>

#include "core/cache/cache_reservation.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "core/model/model_config.h"
#include "kernels/append_kv.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

constexpr int64_t kContext = 2048;
constexpr int kBlock = 16;

struct Built {
  PolicyStack stack;
  CacheShape shape;
  PoolReservation res;
  std::unique_ptr<KVCache> cache;
};

void Build(const PolicySpec& spec, bool with_storage, Built* b) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  ASSERT_TRUE(PolicyStack::Create({spec}, &b->stack).ok());
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), b->stack, kBlock, DType::kBF16, &b->shape).ok());
  ReservationRequest req;
  req.max_context = kContext + 1;
  req.step_tokens = kContext;
  ASSERT_TRUE(ReservePools(b->shape, KvShapeOf(mc), DType::kBF16, b->stack, req, &b->res).ok());
  ASSERT_TRUE(KVCache::Create(b->shape, b->res.plain_blocks, with_storage, &b->cache).ok());
  ASSERT_TRUE(b->cache->AddSequence(0).ok());
}

TEST(QuestMemoryTest, PoolsAreFullsAndBytesReadFallWithK) {
  Built full, quest;
  Build(PolicySpec{"full", {}, "t"}, false, &full);
  Build(PolicySpec{"quest", {}, "t"}, true, &quest);
  EXPECT_EQ(quest.res.bytes(), full.res.bytes());
  EXPECT_EQ(quest.res.plain_blocks, full.res.plain_blocks);
  const CacheShape& sh = quest.shape;
  KVCache& c = *quest.cache;
  c.EnableKeyBounds();
  // The prompt, random K/V written layer by layer, then the bounds.
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const std::vector<int32_t> pos = Iota(0, kContext);
  ASSERT_TRUE(c.Reserve(0, kContext, pos.data()).ok());
  ASSERT_TRUE(full.cache->Reserve(0, kContext, pos.data()).ok());
  PageTable pt;
  c.BuildPageTable({0}, &pt);
  const std::vector<int32_t> qo = {0, static_cast<int32_t>(kContext)};
  std::vector<float> k(static_cast<size_t>(kContext * sh.num_kv_heads * sh.head_dim)), v(k.size());
  for (int l = 0; l < sh.num_layers; ++l) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = g(rng) + static_cast<float>((i / (sh.num_kv_heads * sh.head_dim) / kBlock) % 7) * 0.3f;
      v[i] = g(rng);
    }
    AppendKV(pt.Layer(l), qo.data(), 1, sh.num_kv_heads, k.data(), v.data());
  }
  c.UpdateKeyBounds({0});
  // One decode step.
  const int32_t next = static_cast<int32_t>(kContext);
  ASSERT_TRUE(c.Reserve(0, 1, &next).ok());
  ASSERT_TRUE(full.cache->Reserve(0, 1, &next).ok());
  EXPECT_EQ(c.BytesInUse(), full.cache->BytesInUse());
  c.BuildPageTable({0}, &pt);
  c.AttachKeyBounds({0}, &pt);
  const int hq = 32;
  std::vector<float> q(static_cast<size_t>(hq * sh.head_dim)), o(q.size());
  for (float& x : q) x = g(rng);
  const std::vector<int32_t> qo1 = {0, 1};
  AttentionParams p;
  p.num_seqs = 1;
  p.num_qo_heads = hq;
  p.num_kv_heads = sh.num_kv_heads;
  p.head_dim = sh.head_dim;
  p.qo_indptr = qo1.data();
  p.q = q.data();
  p.o = o.data();
  const int64_t len = kContext + 1, row2 = 2 * sh.head_dim * 2;
  const int64_t dense = static_cast<int64_t>(sh.num_layers) * sh.num_kv_heads * len * row2;
  int64_t last = dense + 1;
  for (int budget : {2048, 1024, 512, 256, 64}) {
    SCOPED_TRACE(budget);
    std::unique_ptr<KVPolicy> policy;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"quest", {{"token_budget", std::to_string(budget)}}, "t"}, &policy).ok());
    ReadStats step;
    for (int l = 0; l < sh.num_layers; ++l) {
      ReadSelection sel;
      SelectLayerReads(pt, l, policy.get(), p, &sel);
      step.Add(sel.stats);
    }
    EXPECT_EQ(step.kv_dense_bytes, dense);
    // 2,049 slots: 128 full pages and the recent one holding 1 slot.
    const int64_t sparse_slots = (budget / kBlock - 1) * kBlock + 1;
    const int64_t want = sh.num_kv_heads * (2 * len + (sh.num_layers - 2) * sparse_slots) * row2;
    EXPECT_EQ(step.kv_read_bytes, want);
    EXPECT_LT(step.kv_read_bytes, last);
    last = step.kv_read_bytes;
  }
}

}  // namespace
}  // namespace kvlab
