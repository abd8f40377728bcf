// Prefix caching in the scheduler over model-free pools: a second request
// with the same prefix holds the first one's blocks (by id) and computes
// only the rest; a chat's next turn reuses prompt and answer; a preempted
// request finds its own blocks again; admission counts the cached blocks it
// takes up; a selection stack copies shared blocks before compacting them;
// which stacks share.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/serve/model_free_executor.h"
#include "core/serve/scheduler.h"
#include "core/serve/scheduler_test_util.h"

namespace kvlab {
namespace {

using namespace scheduler_test;  // NOLINT

// The block ids of units [0, n) of a running request, stream by stream.
std::vector<std::vector<int32_t>> LeadingBlocks(const KVCache& c, int64_t id, size_t n) {
  std::vector<std::vector<int32_t>> out;
  for (int l = 0; l < c.shape().num_layers; ++l) {
    for (int h = 0; h < c.shape().num_kv_heads; ++h) {
      const std::vector<int32_t>& b = c.stream(id, l, h).blocks;
      out.emplace_back(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(std::min(n, b.size())));
    }
  }
  return out;
}

TEST(PrefixCachingTest, SecondRequestWithTheSamePrefixReusesTheBlocks) {
  auto ex = MakeExecutor(TinyModel(), 4 * 64, 4, {{"full", {}, "t"}}, 0, PrefixCachingMode::kOn);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  RequestSpec a = Req(1, 0, 22, 8);  // 5 full blocks of 4 and 2 tokens
  RequestSpec b = a;
  b.id = 2;
  b.arrival = 1;
  b.prompt.resize(20);  // the same 5 blocks ...
  for (int32_t t : {91, 92, 93, 94, 95, 96, 97}) b.prompt.push_back(t);  // ... and a different message
  ASSERT_TRUE(sched.AddRequest(a).ok());
  StepOutcome out;
  ASSERT_TRUE(sched.Step(0, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 0);
  ASSERT_EQ(ex->cache().prefix_cache()->num_units(), 5);  // request 1's full blocks, cached after the step
  const auto blocks_a = LeadingBlocks(ex->cache(), 1, 5);

  ASSERT_TRUE(sched.AddRequest(b).ok());
  ASSERT_TRUE(sched.Step(1, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 20);
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].id, 2);
  EXPECT_EQ(out.chunks[1].num_tokens, 7);  // only the new message is computed
  EXPECT_EQ(sched.Find(2)->prompt_cached_tokens, 20);
  EXPECT_EQ(sched.Find(2)->output.size(), 1u);
  // The same physical blocks, held by both requests and the cache.
  EXPECT_EQ(LeadingBlocks(ex->cache(), 2, 5), blocks_a);
  for (const auto& stream : blocks_a) {
    for (int32_t id : stream) EXPECT_EQ(ex->cache().pool().RefCount(id), 3) << "block " << id;
  }
  // The message after the shared prefix went to blocks of its own.
  EXPECT_NE(ex->cache().stream(2, 0, 0).blocks[5], ex->cache().stream(1, 0, 0).blocks[5]);
  CheckAccounting(sched, *ex, true);

  // After both finish, the blocks stay cached (held by the cache alone).
  for (int t = 2; t < 40 && sched.HasUnfinished(); ++t) ASSERT_TRUE(sched.Step(t, &out).ok());
  ASSERT_FALSE(sched.HasUnfinished());
  CheckAccounting(sched, *ex, true);
  for (const auto& stream : blocks_a) {
    for (int32_t id : stream) EXPECT_EQ(ex->cache().pool().RefCount(id), 1);
  }
  // A prompt that is exactly the cached blocks computes its last token again
  // (its logits give the first answer token): 4 of the 5 blocks are reused.
  RequestSpec c = Req(3, 50, 20, 2);
  c.prompt.assign(a.prompt.begin(), a.prompt.begin() + 20);
  ASSERT_TRUE(sched.AddRequest(c).ok());
  EXPECT_EQ(sched.CachedPrefixTokens(*sched.Find(3)), 0);  // hashes are computed at admission
  ASSERT_TRUE(sched.Step(50, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 16);
  EXPECT_EQ(out.chunks[0].num_tokens, 4);
  const auto blocks_c = LeadingBlocks(ex->cache(), 3, 5);
  for (size_t i = 0; i < blocks_c.size(); ++i) {
    EXPECT_EQ(std::vector<int32_t>(blocks_c[i].begin(), blocks_c[i].begin() + 4),
              std::vector<int32_t>(blocks_a[i].begin(), blocks_a[i].begin() + 4));
  }
}

TEST(PrefixCachingTest, NextTurnOfAChatReusesPromptAndAnswerAndPreemptionRecomputesOnlyTheRest) {
  auto ex = MakeExecutor(TinyModel(), 4 * 64, 4, {{"full", {}, "t"}}, 0, PrefixCachingMode::kOn);
  Scheduler sched(SchedulerOptions(), ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 30, 11)).ok());
  StepOutcome out;
  std::vector<Request> done;
  for (int t = 0; t < 40 && sched.HasUnfinished(); ++t) {
    ASSERT_TRUE(sched.Step(t, &out).ok());
    for (Request& r : sched.TakeFinished()) done.push_back(std::move(r));
  }
  ASSERT_EQ(done.size(), 1u);
  // The next turn resends prompt (30) + answer (11) and adds 9 tokens: the
  // answer's last token was never fed, so 40 tokens are cached, 10 blocks.
  RequestSpec next = done[0].spec;
  next.id = 2;
  next.arrival = 40;
  next.max_new_tokens = 5;
  next.prompt.insert(next.prompt.end(), done[0].output.begin(), done[0].output.end());
  for (int i = 0; i < 9; ++i) next.prompt.push_back(60 + i);
  ASSERT_TRUE(sched.AddRequest(next).ok());
  ASSERT_TRUE(sched.Step(40, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 40);
  EXPECT_EQ(out.chunks[0].num_tokens, 10);
  // Preempted after a few answer tokens, it finds all its full blocks again.
  for (int t = 41; t < 43; ++t) ASSERT_TRUE(sched.Step(t, &out).ok());
  const Request* r = sched.Find(2);
  ASSERT_EQ(r->num_computed, 52);  // 50 prompt tokens + 2 of its 3 answer tokens so far
  ASSERT_TRUE(sched.Preempt(2).ok());
  ASSERT_TRUE(sched.Step(43, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 52);  // 13 full blocks
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_EQ(r->recomputed_tokens, 0) << "cached tokens counted as recomputed";
  EXPECT_EQ(r->cached_tokens, 92);
  EXPECT_EQ(r->prompt_cached_tokens, 40);
  EXPECT_EQ(sched.num_recomputed_tokens(), 0);
  CheckAccounting(sched, *ex, true);
}

TEST(PrefixCachingTest, AdmissionCountsRevivedCachedBlocksAsUsed) {
  // 4 streams x 12 blocks of 4 tokens. Request 1 leaves 8 blocks per stream
  // cached; request 2 shares its first 5 and needs 6 more: it fits only
  // because the 3 cached blocks it does not share can be evicted.
  auto ex = MakeExecutor(TinyModel(), 4 * 12, 4, {{"full", {}, "t"}}, 0, PrefixCachingMode::kOn);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 32, 1)).ok());
  StepOutcome out;
  ASSERT_TRUE(sched.Step(0, &out).ok());
  ASSERT_FALSE(sched.HasUnfinished());
  EXPECT_EQ(ex->cache().pool().num_free(), 4 * 4);
  EXPECT_EQ(ex->cache().AvailableBlocks(), 4 * 12);
  Request r;
  r.spec = Req(1, 1, 20, 1);    // request 1's first 20 tokens: 5 shared blocks ...
  r.spec.id = 2;
  r.spec.prompt.resize(44, 5);  // ... + 24 tokens of its own (6 blocks)
  sched.UpdateBlockHashes(&r);
  EXPECT_EQ(sched.CachedPrefixTokens(r), 20);
  EXPECT_TRUE(sched.CanAllocate(r, 24));  // 6 new blocks per stream of the 7 that are free or evictable
  r.spec.prompt.resize(49, 5);             // 8 blocks more: only 7 are free once the shared 5 are taken
  r.block_hashes.clear();
  sched.UpdateBlockHashes(&r);
  EXPECT_FALSE(sched.CanAllocate(r, 16));
}

TEST(PrefixCachingTest, ModesFollowTheStack) {
  std::unique_ptr<StepExecutor> ex;
  ServePoolSpec spec;
  spec.pool_blocks = 4 * 10;
  spec.encoded_pool_blocks = 4 * 10;
  ASSERT_TRUE(NewModelFreeExecutor(TinyModel(), {{"full", {}, "t"}}, 4, DType::kBF16, spec, &ex).ok());
  EXPECT_TRUE(ex->cache().prefix_caching()) << "on by default for full";
  ASSERT_TRUE(NewModelFreeExecutor(TinyModel(), {{"quant", {}, "t"}}, 4, DType::kBF16, spec, &ex).ok());
  EXPECT_FALSE(ex->cache().prefix_caching()) << "off by default with an encoding";
  spec.prefix_caching = PrefixCachingMode::kOn;
  ASSERT_TRUE(NewModelFreeExecutor(TinyModel(), {{"quant", {}, "t"}}, 4, DType::kBF16, spec, &ex).ok());
  EXPECT_TRUE(ex->cache().prefix_caching());
  EXPECT_EQ(ex->cache().prefix_unit_tokens(), 4);
  EXPECT_TRUE(ex->cache().prefix_cache()->encoded());
  // Selection stacks share by copy on write, when asked to.
  ASSERT_TRUE(NewModelFreeExecutor(TinyModel(), {{"h2o", {}, "t"}}, 4, DType::kBF16, spec, &ex).ok());
  EXPECT_TRUE(ex->cache().prefix_caching());
  Status s = NewModelFreeExecutor(TinyModel(), {{"h2o", {}, "t"}, {"offload", {}, "t"}}, 4, DType::kBF16, spec, &ex);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("placement policy 'offload' moves blocks off the device"), std::string::npos) << s.message();
  spec.prefix_caching = PrefixCachingMode::kDefault;
  ASSERT_TRUE(NewModelFreeExecutor(TinyModel(), {{"h2o", {}, "t"}}, 4, DType::kBF16, spec, &ex).ok());
  EXPECT_FALSE(ex->cache().prefix_caching());
}

// The cached units' block ids, stream by stream, unit by unit.
std::vector<std::vector<int32_t>> CachedBlocks(const KVCache& c, const std::vector<BlockHash>& hashes) {
  std::vector<std::vector<int32_t>> out;
  for (BlockHash h : hashes) {
    const PrefixCache::Unit* u = c.prefix_cache()->Find(h);
    out.push_back(u == nullptr ? std::vector<int32_t>() : u->blocks);
  }
  return out;
}

// sink keeps 2 + 22 slots: request 1 (20 prompt tokens) caches 6 units by
// its 24th token and evicts at its 25th, moving every slot after the sinks
// down, so it writes all 6 of their blocks. It copies them first; request 2,
// admitted in that step with the 5 units of the prompt, holds (and reads)
// the cached originals.
TEST(PrefixCachingTest, SelectionCopiesSharedBlocksBeforeCompacting) {
  auto ex = MakeExecutor(TinyModel(), 4 * 64, 4, {{"sink", {{"n_sink", "2"}, {"window", "22"}}, "t"}}, 0,
                         PrefixCachingMode::kOn);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  RequestSpec a = Req(1, 0, 20, 12);
  RequestSpec b = a;
  b.id = 2;
  b.arrival = 5;
  b.prompt.push_back(91);
  ASSERT_TRUE(sched.AddRequest(a).ok());
  StepOutcome out;
  const KVCache& c = ex->cache();
  for (int t = 0; t < 5; ++t) {
    ASSERT_TRUE(sched.Step(t, &out).ok());
    CheckAccounting(sched, *ex, true);
  }
  ASSERT_EQ(c.stream(1, 0, 0).num_tokens, 24);
  ASSERT_EQ(c.prefix_cache()->num_units(), 6);
  std::vector<BlockHash> hashes;
  ExtendBlockHashes(a.prompt.data(), 20, nullptr, 0, 4, &hashes);
  const auto cached = CachedBlocks(c, hashes);
  for (size_t st = 0; st < 4; ++st) {
    for (size_t u = 0; u < 5; ++u) EXPECT_EQ(LeadingBlocks(c, 1, 5)[st][u], cached[u][st]);
  }
  EXPECT_EQ(c.CopyOnWriteBlocks(1), 4 * 6);
  EXPECT_EQ(c.num_copied_blocks(), 0);

  ASSERT_TRUE(sched.AddRequest(b).ok());
  ASSERT_TRUE(sched.Step(5, &out).ok());
  EXPECT_EQ(out.prefix_hit_tokens, 20);
  CheckAccounting(sched, *ex, false);
  ASSERT_EQ(sched.Find(1)->num_computed, 25);
  EXPECT_EQ(c.stream(1, 0, 0).num_tokens, 24);  // one eviction
  EXPECT_EQ(c.num_copied_blocks(), 4 * 6);
  EXPECT_EQ(c.CopyOnWriteBlocks(1), 0);
  EXPECT_EQ(c.CopyOnWriteBlocks(2), 4 * 5);
  EXPECT_EQ(CachedBlocks(c, hashes), cached) << "the cache's units changed";
  for (size_t st = 0; st < 4; ++st) {
    for (size_t u = 0; u < 5; ++u) {
      EXPECT_NE(LeadingBlocks(c, 1, 5)[st][u], cached[u][st]) << "request 1 still holds a shared block";
      EXPECT_EQ(LeadingBlocks(c, 2, 5)[st][u], cached[u][st]) << "request 2 does not hold the cached block";
      EXPECT_EQ(c.pool().RefCount(cached[u][st]), 2);  // the cache and request 2
    }
  }
  // Request 1 left its sixth unit to the cache alone; units after an
  // eviction would hold K/V computed without the evicted tokens, so it
  // caches nothing more.
  EXPECT_EQ(c.prefix_cache()->num_units(), 6);
  EXPECT_EQ(c.prefix_cache()->num_evictable(), 1);
  for (int t = 6; t < 60 && sched.HasUnfinished(); ++t) {
    ASSERT_TRUE(sched.Step(t, &out).ok());
    CheckAccounting(sched, *ex, false);
  }
  ASSERT_FALSE(sched.HasUnfinished());
  EXPECT_EQ(CachedBlocks(c, hashes), cached);
  EXPECT_EQ(c.BytesInUse(), c.CachedOnlyBytes());
  EXPECT_EQ(c.prefix_cache()->num_evictable(), c.prefix_cache()->num_units());
}

// Admission books a copy of every shared block the request takes up, since
// its first step may compact.
TEST(PrefixCachingTest, SelectionAdmissionBooksTheCopies) {
  auto ex = MakeExecutor(TinyModel(), 4 * 12, 4, {{"sink", {{"n_sink", "2"}, {"window", "22"}}, "t"}}, 0,
                         PrefixCachingMode::kOn);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 20, 1)).ok());
  StepOutcome out;
  ASSERT_TRUE(sched.Step(0, &out).ok());
  ASSERT_FALSE(sched.HasUnfinished());
  Request r;
  r.spec = Req(1, 1, 20, 1);
  r.spec.id = 2;
  r.spec.prompt.resize(32, 5);  // 5 cached blocks + 12 tokens (3 blocks) of its own
  sched.UpdateBlockHashes(&r);
  EXPECT_EQ(sched.CachedPrefixTokens(r), 20);
  // 12 blocks per stream: 5 shared + 3 new + 5 copies = 13 do not fit; 2 new do.
  EXPECT_FALSE(sched.CanAllocate(r, 12));
  EXPECT_TRUE(sched.CanAllocate(r, 8));
}

}  // namespace
}  // namespace kvlab
