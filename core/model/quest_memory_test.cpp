// Quest at llama-3.1-8b's shape (32 layers x 8 KV heads of 128, 32 query
// heads, bf16) with random K/V: the pools quest reserves and holds are
// exactly full's (the cache stays whole), and the K/V bytes one decode step
// reads fall with k, to what the rule gives: the dense layers every slot,
// the others k - 1 full pages and the recent page. Over KIVI the same with
// sealed groups read whole.
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

// One sequence's decode query for every query head of llama-3.1-8b (32), random.
struct DecodeQuery {
  static constexpr int kHeads = 32;
  std::vector<float> q, o;
  std::vector<int32_t> qo = {0, 1};
  AttentionParams p;
  DecodeQuery(const CacheShape& sh, std::mt19937& rng, std::normal_distribution<float>& g)
      : q(static_cast<size_t>(kHeads * sh.head_dim)), o(q.size()) {
    for (float& x : q) x = g(rng);
    p.num_seqs = 1;
    p.num_qo_heads = kHeads;
    p.num_kv_heads = sh.num_kv_heads;
    p.head_dim = sh.head_dim;
    p.qo_indptr = qo.data();
    p.q = q.data();
    p.o = o.data();
  }
  DecodeQuery(const DecodeQuery&) = delete;
  DecodeQuery& operator=(const DecodeQuery&) = delete;
};

constexpr int64_t kContext = 2048;
constexpr int kBlock = 16;

struct Built {
  PolicyStack stack;
  CacheShape shape;
  PoolReservation res;
  std::unique_ptr<KVCache> cache;
};

void Build(const std::vector<PolicySpec>& specs, bool with_storage, Built* b) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  ASSERT_TRUE(PolicyStack::Create(specs, &b->stack).ok());
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), b->stack, kBlock, DType::kBF16, &b->shape).ok());
  ReservationRequest req;
  req.max_context = kContext + 1;
  req.step_tokens = kContext;
  ASSERT_TRUE(ReservePools(b->shape, KvShapeOf(mc), DType::kBF16, b->stack, req, &b->res).ok());
  ASSERT_TRUE(KVCache::Create(b->shape, b->res.plain_blocks, with_storage, &b->cache, b->res.encoded_blocks).ok());
  ASSERT_TRUE(b->cache->AddSequence(0).ok());
}

TEST(QuestMemoryTest, PoolsAreFullsAndBytesReadFallWithK) {
  Built full, quest;
  Build({PolicySpec{"full", {}, "t"}}, false, &full);
  Build({PolicySpec{"quest", {}, "t"}}, true, &quest);
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
  DecodeQuery dq(sh, rng, g);
  AttentionParams& p = dq.p;
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

// Quest over KIVI (2 bits, groups of 32, a 128-token residual): the pools and
// bytes in use are kivi-alone's; a decode step's bytes read are the encoded
// blocks of the groups read (whole) plus the plain rows read, at most
// token_budget tokens of pages per (layer, KV head), and fall with k.
TEST(QuestMemoryTest, OverKiviPoolsAreKivisAndBytesReadCountEncodedBlocks) {
  Built kivi, both;
  Build({PolicySpec{"kivi", {}, "t"}}, false, &kivi);
  Build({PolicySpec{"kivi", {}, "t"}, PolicySpec{"quest", {}, "t"}}, true, &both);
  EXPECT_EQ(both.res.bytes(), kivi.res.bytes());
  EXPECT_EQ(both.res.plain_blocks, kivi.res.plain_blocks);
  EXPECT_EQ(both.res.encoded_blocks, kivi.res.encoded_blocks);
  const CacheShape& sh = both.shape;
  ASSERT_TRUE(sh.encoded);
  KVCache& c = *both.cache;
  c.EnableKeyBounds();
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const std::vector<int32_t> pos = Iota(0, kContext);
  ASSERT_TRUE(c.Reserve(0, kContext, pos.data()).ok());
  ASSERT_TRUE(kivi.cache->Reserve(0, kContext, pos.data()).ok());
  PageTable pt;
  c.BuildPageTable({0}, &pt);
  const std::vector<int32_t> qo = {0, static_cast<int32_t>(kContext)};
  std::vector<float> k(static_cast<size_t>(kContext * sh.num_kv_heads * sh.head_dim)), v(k.size());
  for (int l = 0; l < sh.num_layers; ++l) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = g(rng) + static_cast<float>((i / (sh.num_kv_heads * sh.head_dim) / 32) % 7) * 0.3f;
      v[i] = g(rng);
    }
    AppendKV(pt.Layer(l), qo.data(), 1, sh.num_kv_heads, k.data(), v.data());
  }
  c.UpdateKeyBounds({0});
  c.Seal(0);
  kivi.cache->Seal(0);
  const int32_t next = static_cast<int32_t>(kContext);
  ASSERT_TRUE(c.Reserve(0, 1, &next).ok());
  ASSERT_TRUE(kivi.cache->Reserve(0, 1, &next).ok());
  EXPECT_EQ(c.BytesInUse(), kivi.cache->BytesInUse());
  // 1,920 tokens in 60 groups, 129 plain slots in 9 blocks (the last holding 1).
  ASSERT_EQ(c.stream(0, 0, 0).num_encoded, 1920);
  c.BuildPageTable({0}, &pt);
  c.AttachKeyBounds({0}, &pt);
  DecodeQuery dq(sh, rng, g);
  AttentionParams& p = dq.p;
  const int64_t row2 = 2 * sh.head_dim * 2, enc_block = pt.Encoded(0)->block_bytes;
  EXPECT_EQ(enc_block, 2 * 32 * 128 * 2 / 8 + 128 * 4 + 32 * 4 * 4);  // codes; fp16 (scale, zero) per key channel, per value token and 32 channels
  const int64_t dense = static_cast<int64_t>(sh.num_layers) * sh.num_kv_heads * (60 * enc_block + 129 * row2);
  int64_t last = dense + 1;
  for (int budget : {2048, 1024, 512, 256, 64}) {
    SCOPED_TRACE(budget);
    std::unique_ptr<KVPolicy> policy;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"quest", {{"token_budget", std::to_string(budget)}}, "t"}, &policy).ok());
    ReadStats step;
    int64_t counted = 0, groups_read = 0;
    for (int l = 0; l < sh.num_layers; ++l) {
      ReadSelection sel;
      SelectLayerReads(pt, l, policy.get(), p, &sel);
      step.Add(sel.stats);
      for (int s = 0; s < sh.num_kv_heads; ++s) {
        const int64_t groups = sel.enc_indptr[s + 1] - sel.enc_indptr[s], plain = sel.indptr[s + 1] - sel.indptr[s];
        counted += groups * enc_block + ((plain - 1) * kBlock + 1) * row2;
        if (l >= 2) {
          EXPECT_LE(groups * 32 + plain * kBlock, budget) << "layer " << l << " stream " << s;
        }
        groups_read += groups;
      }
    }
    EXPECT_EQ(step.kv_dense_bytes, dense);
    EXPECT_EQ(step.kv_read_bytes, counted);
    EXPECT_GT(groups_read, 2 * sh.num_kv_heads * 60) << "the selecting layers read some groups";
    EXPECT_LT(step.kv_read_bytes, last);
    last = step.kv_read_bytes;
  }
}

}  // namespace
}  // namespace kvlab
