// think's real memory at llama-3.1-8b's shape (32 layers x 8 KV heads,
// head_dim 128, bf16): a 1,024-token prompt of random K/V written in 64-token
// steps and sealed after each, as the engine drives the cache. The pools then
// hold full's bytes less the pruned key channels of every sealed block (plus
// each block's channel mask), block for block; `kvlab memory`'s calculator
// gives the same figure, and the reservation is below full's.
// (model/ sits above cache/, and the preset lives here.)
#include <gtest/gtest.h>

#include <random>

#include "core/cache/cache_reservation.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/model/memory_calc.h"
#include "core/model/model_config.h"
#include "kernels/append_kv.h"

namespace kvlab {
namespace {

TEST(ThinkMemoryTest, PoolBytesFallByThePrunedKeyChannelsOfEverySealedBlock) {
  constexpr int64_t kPrompt = 1024, kStep = 64;
  constexpr int kBlock = 16, kLayers = 32, kHeads = 8, kDim = 128;
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({{"think", {}, "t"}}, &stack).ok());  // ratio 0.4, recent 32
  CacheShape shape;
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), stack, kBlock, DType::kBF16, &shape).ok());
  ReservationRequest req;
  req.max_context = kPrompt;
  req.step_tokens = kStep;
  PoolReservation res;
  ASSERT_TRUE(ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &res).ok());
  std::unique_ptr<KVCache> cache;
  ASSERT_TRUE(KVCache::Create(shape, res.plain_blocks, /*with_storage=*/true, &cache, res.encoded_blocks).ok());
  ASSERT_TRUE(cache->AddSequence(0).ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> k(static_cast<size_t>(kStep) * kHeads * kDim), v(k.size());
  const int32_t qo[2] = {0, static_cast<int32_t>(kStep)};
  for (int64_t off = 0; off < kPrompt; off += kStep) {
    const std::vector<int32_t> pos = Iota(off, kStep);
    const Status s = cache->Reserve(0, kStep, pos.data());
    ASSERT_TRUE(s.ok()) << "at " << off << ": " << s.ToString();
    PageTable pt;
    cache->BuildPageTable({0}, &pt);
    for (int l = 0; l < kLayers; ++l) {
      for (float& x : k) x = u(rng);
      for (float& x : v) x = u(rng);
      AppendKV(pt.Layer(l), qo, 1, kHeads, k.data(), v.data());
    }
    cache->Seal(0);
  }
  // Every stream: (1024 - 32) / 16 = 62 sealed blocks, the 32 recent tokens plain.
  const int64_t sealed_blocks = (kPrompt - 32) / kBlock, plain_blocks = 2, streams = kLayers * kHeads;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      const Stream& st = cache->stream(0, l, h);
      ASSERT_EQ(static_cast<int64_t>(st.enc_blocks.size()), sealed_blocks) << "layer " << l << " head " << h;
      ASSERT_EQ(static_cast<int64_t>(st.blocks.size()), plain_blocks);
    }
  }
  const int64_t pruned = 51;                                   // floor(0.4 * 128)
  const int64_t think_block = kBlock * (kDim - pruned) * 2 + kBlock * kDim * 2 + kDim / 8;  // K kept, V, mask
  const int64_t plain_block = 2LL * kBlock * kDim * 2;
  ASSERT_EQ(shape.enc.BlockBytes(), think_block);
  const int64_t full_bytes = streams * (sealed_blocks + plain_blocks) * plain_block;  // 512 MiB / 4
  const int64_t want = streams * (sealed_blocks * think_block + plain_blocks * plain_block);
  EXPECT_EQ(cache->BytesInUse(), want);
  // The saving is the pruned key channels of the sealed tokens, less the masks.
  EXPECT_EQ(full_bytes - cache->BytesInUse(), streams * sealed_blocks * (kBlock * pruned * 2 - kDim / 8));
  EXPECT_LT(cache->BytesInUse(), full_bytes * 81 / 100);  // keys are half the bytes: 1 - 0.4 / 2 = 0.8, + the recent
  // The calculator's block-rounded figure is what the pools hold.
  MemoryEstimate e;
  ASSERT_TRUE(EstimateKVMemory(mc, kPrompt, 16, stack, &e).ok());
  EXPECT_EQ(e.bytes_in_blocks, cache->BytesInUse());
  EXPECT_EQ(e.encoding, "think-k77of128-bf16");
  EXPECT_FALSE(EstimateKVMemory(mc, kPrompt, 4, stack, &e).ok()) << "think stores at the cache dtype: --bits 4 refused";
  EXPECT_LT(res.plain_bytes + res.encoded_bytes, res.full_bytes);
}

}  // namespace
}  // namespace kvlab
