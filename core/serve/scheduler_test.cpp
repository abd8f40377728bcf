// The scheduler over model-free pools: block accounting under random
// operations (with and without prefix caching, selection stacks sharing
// cached blocks by copy on write included), preemption order, chunked
// prefill with decode, admission errors, and the serving scenario's
// figures at llama-3.1-70b shapes (a 30,000-token conversation in a 15 GB pool). Prefix caching's own cases are in
// scheduler_prefix_test.cpp.
#include "core/serve/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/model/model_config.h"
#include "core/serve/model_free_executor.h"
#include "core/serve/scheduler_test_util.h"

namespace kvlab {
namespace {

using namespace scheduler_test;  // NOLINT

struct RandomCase {
  const char* name;
  std::vector<PolicySpec> policies;
  int64_t encoded_blocks;
  bool exact_tokens;  // stream length == computed tokens (no selection)
  PrefixCachingMode prefix;
};

class SchedulerRandomTest : public ::testing::TestWithParam<RandomCase> {};

// Thousands of random arrivals, steps, outside preemptions and aborts; with
// prefix caching, prompts share system prompts and continue earlier
// conversations (prompt + answer + a new message), so admissions hit the
// cache, and preempted requests find their own blocks again.
TEST_P(SchedulerRandomTest, BlockAccountingHoldsUnderRandomOperations) {
  const RandomCase& rc = GetParam();
  const ModelConfig m = TinyModel();
  auto ex = MakeExecutor(m, 4 * 40, 4, rc.policies, rc.encoded_blocks, rc.prefix);
  const bool prefix = rc.prefix == PrefixCachingMode::kOn;
  ASSERT_EQ(ex->cache().prefix_caching(), prefix);
  SchedulerOptions so;
  so.max_num_batched_tokens = 48;
  so.max_num_seqs = 12;
  so.max_prefill_chunk = 24;
  Scheduler sched(so, ex.get());
  std::mt19937_64 rng(1234);
  auto pick = [&](const std::vector<int64_t>& ids) { return ids[rng() % ids.size()]; };
  auto random_tokens = [&](int64_t n, std::vector<int32_t>* out) {
    for (int64_t i = 0; i < n; ++i) out->push_back(static_cast<int32_t>(rng() % 100));
  };
  std::vector<std::vector<int32_t>> systems(3), histories;
  for (auto& sys : systems) random_tokens(8 + static_cast<int64_t>(rng() % 24), &sys);
  int64_t next_id = 0, steps = 0, finished = 0, first_hits = 0, cached_prompt_tokens = 0;
  for (int op = 0; op < 4000; ++op) {
    const int kind = static_cast<int>(rng() % 20);
    if (kind < 4) {  // a request arrives
      const int64_t max_new = 1 + static_cast<int64_t>(rng() % 40);
      RequestSpec spec;
      if (!prefix) {
        spec = Req(next_id, static_cast<double>(op), 1 + static_cast<int64_t>(rng() % 60), max_new);
      } else {
        spec.id = next_id;
        spec.arrival = static_cast<double>(op);
        spec.max_new_tokens = max_new;
        const int how = static_cast<int>(rng() % 3);
        if (how == 0 || (how == 1 && histories.empty())) {  // a shared system prompt and a message
          spec.prompt = systems[rng() % systems.size()];
        } else if (how == 1) {  // the next turn of an earlier conversation
          spec.prompt = histories[rng() % histories.size()];
        }
        random_tokens(1 + static_cast<int64_t>(rng() % 30), &spec.prompt);
        if (spec.prompt.size() > 100) spec.prompt.resize(100);
      }
      next_id++;
      ASSERT_TRUE(sched.AddRequest(std::move(spec)).ok());
    } else if (kind == 4 && !sched.RunningIds().empty()) {  // an outside preemption
      ASSERT_TRUE(sched.Preempt(pick(sched.RunningIds())).ok());
    } else if (kind == 5 && (!sched.RunningIds().empty() || !sched.WaitingIds().empty())) {  // a client goes away
      const std::vector<int64_t> ids = sched.RunningIds().empty() ? sched.WaitingIds() : sched.RunningIds();
      ASSERT_TRUE(sched.Abort(pick(ids), "client left").ok());
    } else {
      StepOutcome out;
      ASSERT_TRUE(sched.Step(static_cast<double>(op), &out).ok());
      steps += out.ran() ? 1 : 0;
      ASSERT_LE(out.num_batched_tokens, so.max_num_batched_tokens);
      finished += static_cast<int64_t>(out.finished.size());
      ASSERT_TRUE(out.aborted.empty());
    }
    CheckAccounting(sched, *ex, rc.exact_tokens);
    for (const Request& r : sched.TakeFinished()) {
      if (r.state != RequestState::kFinished) continue;
      ASSERT_EQ(static_cast<int64_t>(r.output.size()), r.spec.max_new_tokens);
      ASSERT_LT(r.prompt_cached_tokens, static_cast<int64_t>(r.spec.prompt.size()));
      first_hits += r.prompt_cached_tokens > 0 ? 1 : 0;
      cached_prompt_tokens += r.prompt_cached_tokens;
      std::vector<int32_t> h = r.spec.prompt;
      h.insert(h.end(), r.output.begin(), r.output.end());
      if (h.size() < 90) histories.push_back(std::move(h));
    }
  }
  EXPECT_GT(steps, 1000);
  EXPECT_GT(finished, 100);
  EXPECT_GT(sched.num_preemptions(), 20) << "the pool never ran out: the test does not exercise preemption";
  if (prefix) {
    EXPECT_GT(first_hits, 50) << "few admissions hit the prefix cache";
    EXPECT_GT(sched.num_prefix_hit_tokens(), cached_prompt_tokens) << "no readmission found its own blocks";
    EXPECT_GT(ex->cache().prefix_cache()->num_units(), 0);
    if (!rc.exact_tokens && rc.encoded_blocks == 0) {
      EXPECT_GT(ex->cache().num_copied_blocks(), 100) << "selection never copied a shared block before compacting";
    }
  } else {
    EXPECT_EQ(sched.num_prefix_hit_tokens(), 0);
  }
  for (int64_t id : sched.RunningIds()) ASSERT_TRUE(sched.Abort(id, "end").ok());
  for (int64_t id : sched.WaitingIds()) ASSERT_TRUE(sched.Abort(id, "end").ok());
  CheckAccounting(sched, *ex, rc.exact_tokens);
  // Only the cache holds blocks now, each exactly once, all of them evictable.
  EXPECT_EQ(ex->cache().BytesInUse(), ex->cache().CachedOnlyBytes());
  if (prefix) {
    EXPECT_EQ(ex->cache().prefix_cache()->num_evictable(), ex->cache().prefix_cache()->num_units());
  }
}

const PrefixCachingMode kOff = PrefixCachingMode::kOff, kOn = PrefixCachingMode::kOn;
INSTANTIATE_TEST_SUITE_P(
    Stacks, SchedulerRandomTest,
    ::testing::Values(RandomCase{"full", {{"full", {}, "t"}}, 0, true, kOff},
                      RandomCase{"quant", {{"quant", {}, "t"}}, 4 * 40, true, kOff},
                      RandomCase{"window", {{"window", {{"window", "12"}}, "t"}}, 0, false, kOff},
                      RandomCase{"full_prefix", {{"full", {}, "t"}}, 0, true, kOn},
                      RandomCase{"quant_prefix", {{"quant", {}, "t"}}, 4 * 40, true, kOn},
                      RandomCase{"sink_prefix", {{"sink", {{"n_sink", "4"}, {"window", "44"}}, "t"}}, 0, false, kOn},
                      RandomCase{"h2o_prefix", {{"h2o", {{"budget", "40"}}, "t"}}, 0, false, kOn},
                      RandomCase{"window_prefix", {{"window", {{"window", "36"}}, "t"}}, 0, false, kOn},
                      RandomCase{"sink_kivi_prefix",
                                 {{"sink", {{"n_sink", "4"}, {"window", "44"}}, "t"},
                                  {"kivi", {{"group", "8"}, {"residual", "8"}, {"bits", "4"}}, "t"}},
                                 4 * 20, false, kOn},
                      RandomCase{"kivi_residual_prefix",
                                 {{"kivi", {{"group", "8"}, {"residual", "8"}, {"bits", "4"}}, "t"}}, 4 * 20, true, kOn}),
    [](const ::testing::TestParamInfo<RandomCase>& i) { return std::string(i.param.name); });

TEST(SchedulerTest, PreemptsLatestArrivalFirstAndRequeuesAtTheFront) {
  // 4 streams x 8 blocks of 4 tokens: 32 tokens per stream in all. Three
  // requests of 8-token prompts fit; decoding 24 tokens each cannot.
  auto ex = MakeExecutor(TinyModel(), 4 * 8, 4);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(10, 0.0, 8, 24)).ok());
  ASSERT_TRUE(sched.AddRequest(Req(11, 1.0, 8, 24)).ok());
  ASSERT_TRUE(sched.AddRequest(Req(12, 2.0, 8, 24)).ok());
  std::vector<int64_t> preempted;
  bool checked_queue = false;
  for (int t = 0; t < 400 && sched.HasUnfinished(); ++t) {
    StepOutcome out;
    ASSERT_TRUE(sched.Step(t, &out).ok());
    preempted.insert(preempted.end(), out.preempted.begin(), out.preempted.end());
    if (preempted.size() == 2 && !checked_queue) {
      // Both later arrivals went out, the latest first; the waiting queue
      // is in arrival order again (11 was pushed to the front after 12).
      EXPECT_EQ(preempted, (std::vector<int64_t>{12, 11}));
      EXPECT_EQ(sched.WaitingIds(), (std::vector<int64_t>{11, 12}));
      EXPECT_EQ(sched.RunningIds(), (std::vector<int64_t>{10}));
      checked_queue = true;
    }
    sched.TakeFinished();
  }
  EXPECT_TRUE(checked_queue);
  EXPECT_FALSE(sched.HasUnfinished());
  EXPECT_EQ(preempted[0], 12);
  EXPECT_EQ(std::count(preempted.begin(), preempted.end(), 10), 0) << "the earliest arrival was preempted";
}

TEST(SchedulerTest, ReadmittedRequestKeepsItsArrivalOrderAmongRunning) {
  auto ex = MakeExecutor(TinyModel(), 4 * 64, 4);
  Scheduler sched(SchedulerOptions(), ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0.0, 4, 50)).ok());
  ASSERT_TRUE(sched.AddRequest(Req(2, 1.0, 4, 50)).ok());
  StepOutcome out;
  ASSERT_TRUE(sched.Step(0, &out).ok());
  ASSERT_TRUE(sched.Preempt(1).ok());
  ASSERT_TRUE(sched.AddRequest(Req(3, 2.0, 4, 50)).ok());
  ASSERT_TRUE(sched.Step(1, &out).ok());
  EXPECT_EQ(sched.RunningIds(), (std::vector<int64_t>{1, 2, 3}));
  const Request* r1 = sched.Find(1);
  EXPECT_EQ(r1->num_preemptions, 1);
  EXPECT_EQ(r1->recomputed_tokens, 4);
  // Its recompute chunk covered the prompt and the token it had generated.
  EXPECT_EQ(out.chunks[1].id, 1);
  EXPECT_EQ(out.chunks[1].num_tokens, 5);
  EXPECT_TRUE(out.chunks[1].recompute);
}

TEST(SchedulerTest, ChunkedPrefillSharesTheBudgetWithDecodes) {
  auto ex = MakeExecutor(TinyModel(), 4 * 256, 4);
  SchedulerOptions so;
  so.max_num_batched_tokens = 16;
  so.max_num_seqs = 4;
  Scheduler sched(so, ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 3, 20)).ok());
  StepOutcome out;
  ASSERT_TRUE(sched.Step(0, &out).ok());
  ASSERT_EQ(sched.Find(1)->output.size(), 1u);
  ASSERT_TRUE(sched.AddRequest(Req(2, 1, 40, 5)).ok());
  ASSERT_TRUE(sched.Step(1, &out).ok());
  // Request 1 decodes one token; request 2's prompt takes the other 15.
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 1);
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_FALSE(out.chunks[0].prefill);
  EXPECT_EQ(out.chunks[1].id, 2);
  EXPECT_EQ(out.chunks[1].num_tokens, 15);
  EXPECT_TRUE(out.chunks[1].prefill);
  ASSERT_TRUE(sched.Step(2, &out).ok());
  EXPECT_EQ(out.num_batched_tokens, 16);
  ASSERT_TRUE(sched.Step(3, &out).ok());  // 15 + 15 + 10 = 40: the prompt is done, its first token out
  EXPECT_EQ(out.chunks[1].num_tokens, 10);
  EXPECT_EQ(sched.Find(2)->output.size(), 1u);
  EXPECT_EQ(sched.Find(2)->first_token_time, 4.0);
}

TEST(SchedulerTest, CheckThenActPairsBookBlocksForTheStep) {
  auto ex = MakeExecutor(TinyModel(), 4 * 10, 4);
  SchedulerOptions so;
  so.watermark = 0;
  Scheduler sched(so, ex.get());
  Request big, small, r;
  big.spec = Req(1, 0, 40, 1);
  small.spec = Req(2, 0, 16, 1);
  EXPECT_TRUE(sched.CanAllocate(big, 8));  // the whole 40-token prompt fits 10 blocks per stream
  big.spec.prompt.push_back(1);
  EXPECT_FALSE(sched.CanAllocate(big, 8));  // 41 tokens do not, though the first chunk would
  r.spec = Req(5, 0, 24, 2);
  ASSERT_TRUE(sched.Allocate(&r, 24).ok());  // books 6 blocks per stream
  EXPECT_TRUE(sched.CanAllocate(small, 16));
  small.spec.prompt.push_back(1);
  EXPECT_FALSE(sched.CanAllocate(small, 16));
  EXPECT_TRUE(sched.CanAppend(r, 16));  // appends are checked against the same booking
  sched.Append(r, 16);
  EXPECT_FALSE(sched.CanAppend(r, 1));
  EXPECT_EQ(ex->cache().pool().num_used(), 0);  // only booked: the executor allocates in Step
}

TEST(SchedulerTest, AdmissionCountsWhatAnEncodingWillSeal) {
  // quant seals each full 4-token block into the encoded pool: a 100-token
  // prompt needs 25 encoded blocks per stream and only its chunk plain.
  auto ex = MakeExecutor(TinyModel(), 4 * 10, 4, {{"quant", {}, "t"}}, 4 * 30);
  SchedulerOptions so;
  so.watermark = 0;
  so.max_num_batched_tokens = 16;
  so.max_num_seqs = 4;
  Scheduler sched(so, ex.get());
  Request r;
  r.spec = Req(1, 0, 100, 4);
  EXPECT_TRUE(sched.CanAllocate(r, 16));
  r.spec = Req(1, 0, 124, 4);
  EXPECT_FALSE(sched.CanAllocate(r, 16));  // 31 encoded blocks per stream: one too many
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 100, 4)).ok());
  for (int t = 0; t < 20 && sched.HasUnfinished(); ++t) {
    StepOutcome out;
    ASSERT_TRUE(sched.Step(t, &out).ok());
    ASSERT_LE(ex->cache().pool().num_used(), 4 * 5);  // a chunk of 16 tokens and the tail, never the prompt
  }
  EXPECT_FALSE(sched.HasUnfinished());
  EXPECT_EQ(sched.num_preemptions(), 0);
}

TEST(SchedulerTest, RejectsRequestsThatCanNeverFit) {
  auto ex = MakeExecutor(TinyModel(), 4 * 10, 4);  // 40 tokens per sequence at most
  SchedulerOptions so;
  so.max_model_len = 100;
  Scheduler sched(so, ex.get());
  EXPECT_TRUE(sched.AddRequest(Req(1, 0, 30, 10)).ok());
  Status s = sched.AddRequest(Req(2, 0, 30, 11));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("request 2 needs 41 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("at most 40 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("could never run"), std::string::npos) << s.message();
  s = sched.AddRequest(Req(3, 0, 95, 10));
  EXPECT_NE(s.message().find("max_model_len 100"), std::string::npos) << s.message();
  EXPECT_FALSE(sched.AddRequest(Req(1, 0, 3, 1)).ok());  // id in use
  EXPECT_FALSE(sched.AddRequest(Req(4, 0, 0, 1)).ok());  // empty prompt
  EXPECT_EQ(sched.WaitingIds(), (std::vector<int64_t>{1}));
}

TEST(SchedulerTest, AbortsARequestThatOutgrowsThePoolAlone) {
  // A window of 64 bounds memory in principle (so admission lets it in),
  // but 4 blocks of 4 tokens per stream cannot hold 64 slots.
  auto ex = MakeExecutor(TinyModel(), 4 * 4, 4, {{"window", {{"window", "64"}}, "t"}});
  Scheduler sched(SchedulerOptions(), ex.get());
  ASSERT_TRUE(sched.AddRequest(Req(1, 0, 100, 5)).ok());
  std::vector<int64_t> aborted;
  for (int t = 0; t < 50 && sched.HasUnfinished(); ++t) {
    StepOutcome out;
    ASSERT_TRUE(sched.Step(t, &out).ok());
    aborted.insert(aborted.end(), out.aborted.begin(), out.aborted.end());
  }
  ASSERT_EQ(aborted, (std::vector<int64_t>{1}));
  std::vector<Request> done = sched.TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].state, RequestState::kAborted);
  EXPECT_NE(done[0].abort_reason.find("ran out of KV blocks at 16 tokens while alone"), std::string::npos)
      << done[0].abort_reason;
  EXPECT_EQ(ex->cache().BytesInUse(), 0);
}

// --- The 70B serving scenario: llama-3.1-70b shapes, a 15 GB pool, 30,000 tokens ---

ModelConfig Llama70B() {
  ModelConfig m;
  EXPECT_TRUE(PresetConfig("llama-3.1-70b", &m).ok());
  return m;
}

// Bytes the pools hold for one request, read from its streams' block lists.
int64_t RequestBytes(const KVCache& c, int64_t id) {
  int64_t b = 0;
  for (int l = 0; l < c.shape().num_layers; ++l) {
    for (int h = 0; h < c.shape().num_kv_heads; ++h) {
      const Stream& s = c.stream(id, l, h);
      b += static_cast<int64_t>(s.blocks.size()) * c.pool().block_bytes();
      if (c.encoded_pool()) b += static_cast<int64_t>(s.enc_blocks.size()) * c.encoded_pool()->block_bytes();
    }
  }
  return b;
}

struct SeedRun {
  int64_t pool_bytes = 0;
  int64_t long_chat_peak_bytes = 0;
  int64_t long_chat_preemptions = 0;
  std::set<int64_t> preempted;
  int64_t finished = 0;
};

// One conversation at 29,500 prompt tokens answering 500 (30,000 tokens),
// among ten later users of 1,500 + 1,000 tokens, in a 15 GB pool.
SeedRun RunSeedScenario(const std::vector<PolicySpec>& policies) {
  SeedRun run;
  ServePoolSpec spec;
  spec.pool_bytes = 15'000'000'000;
  spec.max_num_seqs = 16;
  std::unique_ptr<StepExecutor> ex;
  Status s = NewModelFreeExecutor(Llama70B(), policies, 16, DType::kBF16, spec, &ex);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return run;
  run.pool_bytes = ex->cache().BytesReserved();
  SchedulerOptions so;
  so.max_num_seqs = 16;
  Scheduler sched(so, ex.get());
  EXPECT_TRUE(sched.AddRequest(Req(0, 0.0, 29'500, 500)).ok());
  for (int64_t i = 1; i <= 10; ++i) EXPECT_TRUE(sched.AddRequest(Req(i, 0.5 + 0.01 * i, 1'500, 1'000)).ok());
  for (int t = 0; t < 20000 && sched.HasUnfinished(); ++t) {
    StepOutcome out;
    EXPECT_TRUE(sched.Step(t, &out).ok());
    run.preempted.insert(out.preempted.begin(), out.preempted.end());
    if (ex->cache().HasSequence(0)) {
      run.long_chat_peak_bytes = std::max(run.long_chat_peak_bytes, RequestBytes(ex->cache(), 0));
    }
    for (const Request& r : sched.TakeFinished()) {
      run.finished += r.state == RequestState::kFinished ? 1 : 0;
      if (r.spec.id == 0) run.long_chat_preemptions = r.num_preemptions;
    }
  }
  EXPECT_FALSE(sched.HasUnfinished());
  return run;
}

TEST(SeedScenarioTest, Llama70BHoldsTwoThirdsOfA15GBPoolAtThirtyThousandTokens) {
  std::unique_ptr<StepExecutor> ex = MakeExecutor(Llama70B(), 640, 16);
  const CacheShape& shape = ex->cache().shape();
  EXPECT_EQ(shape.StreamsPerSequence() * shape.BlockBytes() / shape.block_size, 327'680);  // bytes per token

  const SeedRun bf16 = RunSeedScenario({{"full", {}, "t"}});
  EXPECT_EQ(bf16.pool_bytes, 15'000'000'000 / 8192 * 8192);
  EXPECT_EQ(bf16.finished, 11);
  // At its last step the conversation caches 29,998 tokens (the answer's
  // last token is never fed back): 1,875 blocks in each of its 640 streams,
  // room for 30,000 tokens: 9.83 GB.
  EXPECT_EQ(bf16.long_chat_peak_bytes, 1'875LL * 640 * 8192);
  EXPECT_NEAR(static_cast<double>(bf16.long_chat_peak_bytes) / 1e9, 9.8, 0.05);
  EXPECT_NEAR(static_cast<double>(bf16.long_chat_peak_bytes) / static_cast<double>(bf16.pool_bytes), 2.0 / 3.0, 0.02);
  // The others are preempted (latest first); the conversation, the earliest arrival, never is.
  EXPECT_EQ(bf16.long_chat_preemptions, 0);
  EXPECT_GE(bf16.preempted.size(), 3u);
  EXPECT_EQ(bf16.preempted.count(0), 0u);

  // 8-bit storage: the quant policy seals every full block as fp8 with one
  // fp16 scale per token row (4,096 + 64 bytes per 16-token block of one
  // stream, against 8,192 in bf16).
  const SeedRun fp8 = RunSeedScenario({{"quant", {}, "t"}});
  EXPECT_EQ(fp8.finished, 11);
  // 1,874 sealed blocks (29,984 tokens) and the open bf16 tail of 14 tokens, per stream.
  EXPECT_EQ(fp8.long_chat_peak_bytes, (1'874LL * 4160 + 8192) * 640);
  const double ratio = static_cast<double>(fp8.long_chat_peak_bytes) / static_cast<double>(bf16.long_chat_peak_bytes);
  EXPECT_NEAR(ratio, 0.5, 0.01);
  EXPECT_LT(fp8.preempted.size(), bf16.preempted.size());
}

TEST(SeedScenarioTest, PoolSizingRejectsAConversationThatCannotFit) {
  ServePoolSpec spec;
  spec.pool_bytes = 15'000'000'000;
  std::unique_ptr<StepExecutor> ex;
  ASSERT_TRUE(NewModelFreeExecutor(Llama70B(), {{"full", {}, "t"}}, 16, DType::kBF16, spec, &ex).ok());
  EXPECT_EQ(ex->MaxSequenceTokens(), 45'776);  // 2,861 blocks per stream x 16
  Scheduler sched(SchedulerOptions(), ex.get());
  Status s = sched.AddRequest(Req(1, 0, 45'000, 1'000));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 45776 tokens of one sequence"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
