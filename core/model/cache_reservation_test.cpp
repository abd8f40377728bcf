// Pool reservations that follow the policy (core/cache/cache_reservation.h)
// at llama-3.1-8b's shape, driven through a 4,096-token prefill in bounded
// steps with random attention and no K/V bytes (a memory-only cache): every
// step fits the reservation, a selection policy's peak stays within what it
// keeps plus one step, every compressing stack reserves less than full, and
// offload's device pool is its budget plus staging. (model/ sits above
// cache/, and the preset lives here.)
#include <gtest/gtest.h>

#include <random>

#include "core/cache/cache_reservation.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/model/model_config.h"
#include "policies/kv_policy.h"

namespace kvlab {
namespace {

constexpr int64_t kPrompt = 4096;
constexpr int64_t kStep = 64;
constexpr int kBlock = 16;

struct Case {
  const char* name;
  std::vector<PolicySpec> specs;
};

std::vector<Case> Cases() {
  auto p = [](const char* n, std::map<std::string, std::string> params = {}) {
    return PolicySpec{n, std::move(params), "test"};
  };
  return {
      {"full", {p("full")}},
      {"sink", {p("sink", {{"n_sink", "4"}, {"window", "1020"}})}},
      {"h2o", {p("h2o", {{"ratio", "0.25"}})}},
      {"h2o_budget", {p("h2o", {{"budget", "512"}})}},
      {"kivi", {p("kivi")}},
      {"quant", {p("quant")}},
      {"gqa_reuse", {p("gqa-reuse", {{"group", "2"}})}},
      {"offload", {p("offload", {{"device_budget", "67108864"}, {"host_budget", "1073741824"}})}},
      {"sink_kivi", {p("sink", {{"n_sink", "4"}, {"window", "1020"}}), p("kivi")}},
      {"h2o_offload", {p("h2o", {{"budget", "1024"}}), p("offload", {{"device_budget", "16777216"}})}},
  };
}

struct PrefillRun {
  PolicyStack stack;
  CacheShape shape;
  PoolReservation res;
  std::unique_ptr<KVCache> cache;
  int64_t max_slots = 0;        // most slots any stream held after a step's Reserve
  int64_t peak_device = 0;
};

// Prefills one sequence of kPrompt tokens kStep at a time through the cache
// as the engine does (Reserve, fold random attention, selection, seal,
// placement), asserting every step's Reserve succeeds.
void Prefill(const Case& c, PrefillRun* r) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  ASSERT_TRUE(PolicyStack::Create(c.specs, &r->stack).ok()) << c.name;
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), r->stack, kBlock, DType::kBF16, &r->shape).ok()) << c.name;
  ReservationRequest req;
  req.max_seqs = 1;
  req.max_context = kPrompt;
  req.step_tokens = kStep;
  Status s = ReservePools(r->shape, KvShapeOf(mc), DType::kBF16, r->stack, req, &r->res);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(KVCache::Create(r->shape, r->res.plain_blocks, /*with_storage=*/false, &r->cache, r->res.encoded_blocks).ok());
  PlacementOptions po;
  if (r->stack.Placement(&po)) {
    ASSERT_TRUE(r->cache->EnableOffload(po).ok());
  }
  ASSERT_TRUE(r->cache->AddSequence(0).ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const KVPolicy* sel = r->stack.For(kConcernSelection);
  const KVPolicy* place = r->stack.For(kConcernPlacement);
  for (int64_t off = 0; off < kPrompt; off += kStep) {
    const std::vector<int32_t> pos = Iota(off, kStep);
    s = r->cache->Reserve(0, kStep, pos.data());
    ASSERT_TRUE(s.ok()) << c.name << " at " << off << ": " << s.ToString();
    for (int l = 0; l < r->shape.num_layers; ++l) {
      for (int h = 0; h < r->shape.num_kv_heads; ++h) {
        Stream& st = r->cache->mutable_stream(0, l, h);
        r->max_slots = std::max(r->max_slots, st.LiveTokens());  // what the policy keeps (dead slots of sealed groups aside)
        if (r->stack.NeedsAttentionScores()) {
          for (float& x : st.score) x += u(rng);
        }
      }
    }
    ASSERT_TRUE(r->cache->ApplySelection({0}, {off + kStep}, sel).ok()) << c.name;
    ASSERT_TRUE(r->cache->Seal(std::vector<KVCache::SeqId>{0}).ok()) << c.name;
    ASSERT_TRUE(r->cache->ApplyPlacement(place, {{0, off + kStep}}).ok()) << c.name;
  }
  r->peak_device = r->cache->PeakDeviceBytesInUse();
}

TEST(CacheReservationTest, EveryStackPrefills4096TokensWithinItsReservationAtLlama31_8BShape) {
  std::map<std::string, PrefillRun> runs;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    PrefillRun& r = runs[c.name];
    Prefill(c, &r);
    if (HasFatalFailure()) return;
    const int64_t streams = static_cast<int64_t>(r.shape.num_layers) * r.shape.num_kv_heads;
    // Full's reservation for this request: 32 layers x 8 heads x 256 blocks of 8 KiB.
    EXPECT_EQ(r.res.full_bytes, 32LL * 8 * (kPrompt / kBlock) * 2 * kBlock * 128 * 2);
    EXPECT_LE(r.res.bytes(), r.res.full_bytes);
    EXPECT_LE(r.peak_device, r.res.bytes());
    if (std::string(c.name) == "full") {
      EXPECT_EQ(r.res.bytes(), r.res.full_bytes);
    } else {
      EXPECT_LT(r.res.bytes(), r.res.full_bytes) << r.res.why;
    }
    if (r.stack.For(kConcernSelection) != nullptr) {
      // The peak is what the policy keeps plus one step, in whole blocks.
      const int64_t kept = r.stack.KeptSlotsBound(kPrompt);
      EXPECT_LE(r.max_slots, kept + kStep);
      const int64_t bound_blocks = (std::min(kPrompt, kept + kStep) + kBlock - 1) / kBlock;
      if (!r.shape.encoded) {  // all tiers together
        EXPECT_LE(r.cache->PeakBytesInUse(), streams * bound_blocks * r.shape.BlockBytes());
      }
    }
  }
  const int64_t streams = 32 * 8;
  const int64_t full = runs["full"].res.full_bytes;
  // sink 4 + 1020 and a 64-token step: 1,088 slots = 68 blocks a stream.
  EXPECT_EQ(runs["sink"].res.plain_blocks, streams * 68);
  // h2o at ratio 0.25 of 4,096: 1,024 + 64 slots, 68 blocks; budget 512: 36.
  EXPECT_EQ(runs["h2o"].res.plain_blocks, streams * 68);
  EXPECT_EQ(runs["h2o_budget"].res.plain_blocks, streams * 36);
  // gqa-reuse group 2: half the heads, every token.
  EXPECT_EQ(runs["gqa_reuse"].res.bytes(), full / 2);
  // kivi: a plain residual (its default 128) + a group being filled + a step;
  // the encoded pool for the context less the residual, which stays plain.
  const PrefillRun& kivi = runs["kivi"];
  ASSERT_TRUE(kivi.shape.encoded);
  const int64_t tpb = kivi.shape.enc.tokens_per_block;
  EXPECT_EQ(kivi.res.plain_blocks, streams * ((kivi.shape.residual + tpb - 1 + kStep + kBlock - 1) / kBlock));
  EXPECT_EQ(kivi.res.encoded_blocks, streams * ((kPrompt - kivi.shape.residual + tpb - 1) / tpb));
  EXPECT_LT(kivi.res.bytes(), full / 4);
  // quant: about half of full's bytes.
  EXPECT_LT(runs["quant"].res.bytes(), full * 6 / 10);
  // offload: the device pool is the budget's blocks + every stream's open tail
  // and step + two staging sets of one layer's blocks (8 heads x 256).
  const PrefillRun& off = runs["offload"];
  const int64_t bb = off.shape.BlockBytes();
  EXPECT_EQ(off.res.budget_blocks, 67108864 / bb);
  EXPECT_EQ(off.res.staging_blocks, 2 * 8 * (kPrompt / kBlock));
  EXPECT_EQ(off.res.plain_blocks, off.res.budget_blocks + streams * ((kBlock - 1 + kStep + kBlock - 1) / kBlock) +
                                      off.res.staging_blocks);
  EXPECT_LE(off.peak_device, off.res.plain_bytes);
  // h2o + offload: compaction brings every stream back to the device before
  // placement moves blocks down again, so the device keeps h2o's bound.
  const PrefillRun& ho = runs["h2o_offload"];
  EXPECT_EQ(ho.res.plain_blocks, streams * ((1024 + kStep + kBlock - 1) / kBlock));
  // sink + kivi: compaction never decodes sealed groups, so the plain pool is
  // kivi's (residual + a group being filled + a step); sealed groups stay
  // whole while they keep a slot, so sink's 1,088 slots in 2 runs touch at
  // most ceil(1088 / 32) + 2 groups.
  const PrefillRun& sk = runs["sink_kivi"];
  EXPECT_EQ(sk.res.plain_blocks, kivi.res.plain_blocks);
  EXPECT_EQ(sk.res.encoded_blocks, streams * ((1088 + tpb - 1) / tpb + 2));
}

TEST(CacheReservationTest, BadRequestsAreErrors) {
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "test"}}, &stack).ok());
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  CacheShape shape;
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), stack, kBlock, DType::kBF16, &shape).ok());
  PoolReservation res;
  ReservationRequest req;
  req.max_context = 0;
  EXPECT_FALSE(ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &res).ok());
  req.max_context = int64_t{1} << 40;
  req.max_seqs = int64_t{1} << 30;
  Status s = ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &res);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("overflow"), std::string::npos) << s.message();
}

// Short contexts: kivi's two pools (plain residual + group + step, encoded
// groups for what is sealed) reserve no more than full's one pool, down to a
// context no longer than the residual, where nothing is ever sealed. Just
// above the residual (here below twice the residual, 256 tokens) the plain
// pool must still hold about the whole context (its peak, residual + a group
// + a step, comes before the first seal) while the encoded pool holds what
// is sealed later: two pools, each at its own peak, exceed full there by at
// most the groups of the sealed part.
TEST(CacheReservationTest, KiviReservesNoMoreThanFullAtShortContexts) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"kivi", {}, "test"}}, &stack).ok());
  CacheShape shape;
  ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), stack, kBlock, DType::kBF16, &shape).ok());
  const int64_t tpb = shape.enc.tokens_per_block, band_end = 2 * shape.residual;
  for (int64_t ctx : {16, 64, 128, 160, 192, 224, 256, 512, 1024}) {
    ReservationRequest req;
    req.max_context = ctx;
    req.step_tokens = kStep;
    PoolReservation res;
    ASSERT_TRUE(ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &res).ok());
    if (ctx <= shape.residual) {
      EXPECT_EQ(res.encoded_blocks, 0) << ctx;
    }
    if (ctx <= shape.residual || ctx >= band_end) {
      EXPECT_LE(res.bytes(), res.full_bytes) << ctx << " tokens:\n" << res.why;
    } else {
      EXPECT_LE(res.encoded_blocks, 32 * 8 * ((ctx - shape.residual + tpb - 1) / tpb)) << ctx;
      EXPECT_LE(res.bytes(), res.full_bytes + res.encoded_bytes) << ctx;
    }
  }
}

// With lower_step_to_fit_full (the engine's request under a bounded step) the
// step shrinks, in whole blocks, until kivi's two pools reserve no more than
// full. Just past the residual (up to residual + a group + a block) the plain
// pool holds the whole context before the first seal at any step, so nothing
// is lowered there; a little further (up to two blocks more) a one-block step
// lowers the excess without removing it; beyond, reserved <= full.
TEST(CacheReservationTest, LoweredStepKeepsKiviWithinFull) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  for (const char* bits : {"2", "4"}) {
    PolicyStack stack;
    ASSERT_TRUE(PolicyStack::Create({PolicySpec{"kivi", {{"bits", bits}}, "test"}}, &stack).ok());
    CacheShape shape;
    ASSERT_TRUE(DeriveCacheShape(KvShapeOf(mc), stack, kBlock, DType::kBF16, &shape).ok());
    const int64_t tpb = shape.enc.tokens_per_block, no_help_end = shape.residual + tpb + kBlock;
    int lowered = 0;
    for (int64_t ctx = kBlock; ctx <= 1024; ctx += kBlock) {
      ReservationRequest req;
      req.max_context = ctx;
      req.step_tokens = kStep;
      PoolReservation asked, res;
      ASSERT_TRUE(ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &asked).ok());
      req.lower_step_to_fit_full = true;
      ASSERT_TRUE(ReservePools(shape, KvShapeOf(mc), DType::kBF16, stack, req, &res).ok());
      SCOPED_TRACE("kivi bits " + std::string(bits) + ", " + std::to_string(ctx) + " tokens:\n" + res.why);
      if (asked.bytes() <= asked.full_bytes || ctx <= no_help_end) {  // nothing to lower, or nothing lowers it
        EXPECT_EQ(res.bytes(), asked.bytes());
        EXPECT_EQ(res.step_tokens, std::min(kStep, ctx));
        EXPECT_EQ(res.why.find("step: lowered"), std::string::npos);
        continue;
      }
      ++lowered;
      EXPECT_LT(res.bytes(), asked.bytes());
      EXPECT_LT(res.step_tokens, kStep);
      EXPECT_EQ(res.step_tokens % kBlock, 0);
      EXPECT_NE(res.why.find("step: lowered from " + std::to_string(kStep)), std::string::npos);
      if (ctx > no_help_end + kBlock) {
        EXPECT_LE(res.bytes(), res.full_bytes);
      }
    }
    EXPECT_GT(lowered, 0);  // the band exists at this shape, so the rule was exercised
  }
}

}  // namespace
}  // namespace kvlab
