// Real per-head and per-layer memory of the SnapKV family at llama-3.1-8b's
// shape (32 layers x 8 KV heads, head_dim 128, bf16): a 4,096-token prompt
// prefilled in 64-token steps through a memory-only cache as the engine
// drives it (Reserve, scores, ApplySelection with each step's shape), with
// random attention whose scale differs by head. Ada-KV's pools then hold
// exactly the sum over (layer, head) of its kept slots in whole blocks, its
// heads differently long; PyramidKV's layers hold what its schedule gives;
// DuoAttention's retrieval heads hold the whole prompt and its streaming heads
// sinks + recent, as its split file says.
// (model/ sits above cache/, and the preset lives here.)
#include <gtest/gtest.h>

#include <random>

#include "core/base/temp_dir_test_util.h"
#include "core/cache/cache_reservation.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/model/model_config.h"
#include "policies/duo_heads.h"
#include "policies/snapkv_scores.h"

namespace kvlab {
namespace {

constexpr int64_t kPrompt = 4096;
constexpr int64_t kStep = 64;
constexpr int kBlock = 16;

struct PrefillRun {
  PolicyStack stack;
  CacheShape shape;
  PoolReservation res;
  std::unique_ptr<KVCache> cache;
};

int64_t Blocks(int64_t slots) { return (slots + kBlock - 1) / kBlock; }

void Prefill(const PolicySpec& spec, PrefillRun* r) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  ASSERT_TRUE(PolicyStack::Create({spec}, &r->stack).ok());
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), r->stack, kBlock, DType::kBF16, &r->shape).ok());
  ReservationRequest req;
  req.max_context = kPrompt;
  req.step_tokens = kStep;
  ASSERT_TRUE(ReservePools(r->shape, KvShapeOf(mc), DType::kBF16, r->stack, req, &r->res).ok());
  ASSERT_TRUE(KVCache::Create(r->shape, r->res.plain_blocks, /*with_storage=*/false, &r->cache).ok());
  ASSERT_TRUE(r->cache->AddSequence(0).ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const KVPolicy* sel = r->stack.For(kConcernSelection);
  for (int64_t off = 0; off < kPrompt; off += kStep) {
    const std::vector<int32_t> pos = Iota(off, kStep);
    const Status s = r->cache->Reserve(0, kStep, pos.data());
    ASSERT_TRUE(s.ok()) << "at " << off << ": " << s.ToString();
    for (int l = 0; l < r->shape.num_layers; ++l) {
      for (int h = 0; h < r->shape.num_kv_heads; ++h) {
        Stream& st = r->cache->mutable_stream(0, l, h);
        for (float& x : st.score) x = u(rng) * static_cast<float>(1 + h);  // a prefill step's window replaces
      }
    }
    const std::vector<SeqStep> steps = {SeqStep{kStep, off + kStep == kPrompt}};
    ASSERT_TRUE(r->cache->ApplySelection({0}, {off + kStep}, sel, &steps).ok());
  }
}

TEST(SelectionMemoryTest, AdaKVPoolsHoldExactlyEachHeadsKeptSlots) {
  PrefillRun r;
  Prefill(PolicySpec{"adakv", {{"budget", "512"}}, "t"}, &r);
  if (HasFatalFailure()) return;
  const KVCache& c = *r.cache;
  const int64_t B = 512, w = 32, floor_slots = (B - w) / 5;  // alpha 0.2
  int64_t blocks = 0;
  bool lengths_differ = false;
  for (int l = 0; l < r.shape.num_layers; ++l) {
    int64_t layer_slots = 0;
    for (int h = 0; h < r.shape.num_kv_heads; ++h) {
      const Stream& st = c.stream(0, l, h);
      layer_slots += st.num_tokens;
      blocks += Blocks(st.num_tokens);
      EXPECT_EQ(static_cast<int64_t>(st.blocks.size()), Blocks(st.num_tokens)) << "layer " << l << " head " << h;
      EXPECT_GE(st.num_tokens, w + floor_slots) << "below the safeguard: layer " << l << " head " << h;
      EXPECT_EQ(st.positions.back(), kPrompt - 1);
      lengths_differ = lengths_differ || st.num_tokens != c.stream(0, l, 0).num_tokens;
    }
    EXPECT_EQ(layer_slots, 8 * B) << "the layer's total: 8 heads x the budget, layer " << l;
  }
  EXPECT_TRUE(lengths_differ) << "every head kept the same number of slots: no per-head allocation";
  // Head 7's scores are 8x head 0's: the joint allocation gives it more.
  EXPECT_GT(c.stream(0, 0, 7).num_tokens, c.stream(0, 0, 0).num_tokens);
  EXPECT_EQ(c.pool().num_used(), blocks);
  EXPECT_EQ(c.BytesInUse(), blocks * r.shape.BlockBytes()) << "pool bytes = sum over (layer, head) of kept blocks";
  EXPECT_LT(c.BytesInUse(), r.res.full_bytes / 6);
}

TEST(SelectionMemoryTest, PyramidKVLayerBytesFollowItsSchedule) {
  PrefillRun r;
  Prefill(PolicySpec{"pyramidkv", {{"budget", "512"}}, "t"}, &r);
  if (HasFatalFailure()) return;
  PrefillRun uniform;
  Prefill(PolicySpec{"snapkv", {{"budget", "512"}}, "t"}, &uniform);
  if (HasFatalFailure()) return;
  const int64_t B = 512, w = 32;
  const std::vector<int64_t> sched = PyramidPrefixBudgets(B - w, 32, 20.0);
  const KVCache& c = *r.cache;
  int64_t blocks = 0, slots = 0, prev_bytes = INT64_MAX;
  for (int l = 0; l < 32; ++l) {
    int64_t layer_blocks = 0;
    for (int h = 0; h < 8; ++h) {
      const Stream& st = c.stream(0, l, h);
      EXPECT_EQ(st.num_tokens, w + sched[static_cast<size_t>(l)]) << "layer " << l << " head " << h;
      EXPECT_EQ(uniform.cache->stream(0, l, h).num_tokens, B);
      layer_blocks += static_cast<int64_t>(st.blocks.size());
      slots += st.num_tokens;
    }
    const int64_t layer_bytes = layer_blocks * r.shape.BlockBytes();
    EXPECT_EQ(layer_bytes, 8 * Blocks(w + sched[static_cast<size_t>(l)]) * r.shape.BlockBytes()) << "layer " << l;
    EXPECT_LE(layer_bytes, prev_bytes) << "layer " << l << " holds more than the one below it";
    prev_bytes = layer_bytes;
    blocks += layer_blocks;
  }
  EXPECT_EQ(slots, 32 * 8 * B) << "the uniform total";
  EXPECT_EQ(c.BytesInUse(), blocks * r.shape.BlockBytes());
  EXPECT_GT(c.stream(0, 0, 0).num_tokens, 10 * c.stream(0, 31, 0).num_tokens);
}

TEST(SelectionMemoryTest, DuoPoolsHoldFullRetrievalHeadsAndWindowedStreamingHeads) {
  // A split file for llama-3.1-8b's 32 x 8 heads with random scores.
  DuoHeadScores split;
  split.model = "llama-3.1-8b";
  split.num_layers = 32;
  split.num_kv_heads = 8;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 32 * 8; ++i) split.scores.push_back(u(rng));
  const std::string path = ProcessTempDir() + "/duo-llama-3.1-8b.toml";
  ASSERT_TRUE(WriteDuoHeads(path, split).ok());
  const std::vector<char> retrieval = DuoRetrievalMask(split.scores, 0.25);
  PrefillRun r;
  Prefill(PolicySpec{"duo", {{"heads", path}, {"fraction", "0.25"}}, "t"}, &r);  // sinks 64, recent 256
  if (HasFatalFailure()) return;
  const KVCache& c = *r.cache;
  int64_t blocks = 0, full_heads = 0;
  for (int l = 0; l < 32; ++l) {
    for (int h = 0; h < 8; ++h) {
      const Stream& st = c.stream(0, l, h);
      const bool full = retrieval[static_cast<size_t>(l * 8 + h)] != 0;
      full_heads += full;
      EXPECT_EQ(st.num_tokens, full ? kPrompt : 64 + 256) << "layer " << l << " head " << h;
      EXPECT_EQ(static_cast<int64_t>(st.blocks.size()), Blocks(st.num_tokens)) << "layer " << l << " head " << h;
      if (!full) {
        EXPECT_EQ(st.positions[63], 63);
        EXPECT_EQ(st.positions[64], kPrompt - 256);
      }
      blocks += Blocks(st.num_tokens);
    }
  }
  EXPECT_EQ(full_heads, 64) << "a quarter of 256 heads";
  EXPECT_EQ(blocks, 64 * Blocks(kPrompt) + 192 * Blocks(320));
  EXPECT_EQ(c.pool().num_used(), blocks);
  EXPECT_EQ(c.BytesInUse(), blocks * r.shape.BlockBytes()) << "pool bytes = sum over (layer, head) of kept blocks";
  EXPECT_LT(c.BytesInUse(), r.res.full_bytes / 3);
  // The pools reserve per head too: each stream's bound plus one step.
  EXPECT_EQ(r.res.plain_blocks, 64 * Blocks(kPrompt) + 192 * Blocks(320 + kStep));
}

}  // namespace
}  // namespace kvlab
