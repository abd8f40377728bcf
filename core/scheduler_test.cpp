// The scheduler over model-free pools: block accounting under random
// operations, preemption order, chunked prefill with decode, admission
// errors, and the seed article's serving figures at llama-3.1-70b shapes.
#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/model_config.h"
#include "core/model_free_executor.h"

namespace kvlab {
namespace {

// 2 layers x 2 KV heads: 4 streams per sequence.
ModelConfig TinyModel() {
  ModelConfig m;
  m.name = "tiny";
  m.vocab_size = 100;
  m.hidden_size = 32;
  m.intermediate_size = 64;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 8;
  m.max_position_embeddings = 1 << 20;
  return m;
}

std::unique_ptr<StepExecutor> MakeExecutor(const ModelConfig& m, int64_t pool_blocks, int block_size,
                                           std::vector<PolicySpec> policies = {{"full", {}, "test"}},
                                           int64_t encoded_blocks = 0) {
  ServePoolSpec spec;
  spec.pool_blocks = pool_blocks;
  spec.encoded_pool_blocks = encoded_blocks;
  std::unique_ptr<StepExecutor> ex;
  Status s = NewModelFreeExecutor(m, policies, block_size, DType::kBF16, spec, &ex);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ex;
}

RequestSpec Req(int64_t id, double arrival, int64_t prompt_len, int64_t max_new) {
  RequestSpec r;
  r.id = id;
  r.arrival = arrival;
  r.prompt.assign(static_cast<size_t>(prompt_len), 7);
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt[static_cast<size_t>(i)] = static_cast<int32_t>((id * 13 + i) % 100);
  r.max_new_tokens = max_new;
  return r;
}

// Every block of a pool is either free or held by exactly one stream of a
// running request (no sharing yet), and the pools' bytes are the streams'.
void CheckPool(const BlockPool& pool, const std::vector<int32_t>& held) {
  std::set<int32_t> unique(held.begin(), held.end());
  ASSERT_EQ(unique.size(), held.size()) << pool.name() << ": a block is held twice";
  ASSERT_EQ(static_cast<int64_t>(held.size()), pool.num_used()) << pool.name() << ": leaked or double-freed blocks";
  int64_t zero = 0;
  for (int32_t id = 0; id < pool.num_blocks(); ++id) {
    const bool is_held = unique.count(id) != 0;
    ASSERT_EQ(pool.RefCount(id), is_held ? 1 : 0) << pool.name() << " block " << id;
    zero += pool.RefCount(id) == 0 ? 1 : 0;
  }
  ASSERT_EQ(zero, pool.num_free()) << pool.name() << ": the free list has duplicates";
  ASSERT_EQ(pool.bytes_in_use(), static_cast<int64_t>(held.size()) * pool.block_bytes());
}

void CheckAccounting(const Scheduler& sched, const StepExecutor& ex, bool exact_tokens) {
  const KVCache& c = ex.cache();
  const CacheShape& shape = c.shape();
  const std::vector<int64_t> running = sched.RunningIds();
  ASSERT_EQ(c.num_sequences(), running.size());
  std::vector<int32_t> plain, enc;
  int64_t stream_bytes = 0;
  for (int64_t id : running) {
    ASSERT_TRUE(c.HasSequence(id));
    const Request* r = sched.Find(id);
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        const Stream& s = c.stream(id, l, h);
        plain.insert(plain.end(), s.blocks.begin(), s.blocks.end());
        enc.insert(enc.end(), s.enc_blocks.begin(), s.enc_blocks.end());
        stream_bytes += static_cast<int64_t>(s.blocks.size()) * c.pool().block_bytes();
        if (c.encoded_pool()) stream_bytes += static_cast<int64_t>(s.enc_blocks.size()) * c.encoded_pool()->block_bytes();
        if (exact_tokens) {
          ASSERT_EQ(s.num_tokens, r->num_computed) << "request " << id;
        }
        ASSERT_LE(s.num_plain(), s.Capacity(shape.block_size));
      }
    }
  }
  for (int64_t id : sched.WaitingIds()) ASSERT_FALSE(c.HasSequence(id)) << "waiting request " << id << " holds blocks";
  CheckPool(c.pool(), plain);
  if (c.encoded_pool()) CheckPool(*c.encoded_pool(), enc);
  ASSERT_EQ(c.BytesInUse(), stream_bytes);
}

struct RandomCase {
  const char* name;
  std::vector<PolicySpec> policies;
  int64_t encoded_blocks;
  bool exact_tokens;  // stream length == computed tokens (no selection)
};

class SchedulerRandomTest : public ::testing::TestWithParam<RandomCase> {};

TEST_P(SchedulerRandomTest, BlockAccountingHoldsUnderRandomOperations) {
  const RandomCase& rc = GetParam();
  const ModelConfig m = TinyModel();
  auto ex = MakeExecutor(m, 4 * 40, 4, rc.policies, rc.encoded_blocks);
  SchedulerOptions so;
  so.max_num_batched_tokens = 48;
  so.max_num_seqs = 12;
  so.max_prefill_chunk = 24;
  Scheduler sched(so, ex.get());
  std::mt19937_64 rng(1234);
  auto pick = [&](const std::vector<int64_t>& ids) { return ids[rng() % ids.size()]; };
  int64_t next_id = 0, steps = 0, finished = 0;
  for (int op = 0; op < 4000; ++op) {
    const int kind = static_cast<int>(rng() % 20);
    if (kind < 4) {  // a request arrives
      const int64_t prompt = 1 + static_cast<int64_t>(rng() % 60);
      ASSERT_TRUE(sched.AddRequest(Req(next_id++, static_cast<double>(op), prompt, 1 + static_cast<int64_t>(rng() % 40))).ok());
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
      if (r.state == RequestState::kFinished) {
        ASSERT_EQ(static_cast<int64_t>(r.output.size()), r.spec.max_new_tokens);
      }
    }
  }
  EXPECT_GT(steps, 1000);
  EXPECT_GT(finished, 100);
  EXPECT_GT(sched.num_preemptions(), 20) << "the pool never ran out: the test does not exercise preemption";
  for (int64_t id : sched.RunningIds()) ASSERT_TRUE(sched.Abort(id, "end").ok());
  for (int64_t id : sched.WaitingIds()) ASSERT_TRUE(sched.Abort(id, "end").ok());
  CheckAccounting(sched, *ex, rc.exact_tokens);
  EXPECT_EQ(ex->cache().BytesInUse(), 0);
}

INSTANTIATE_TEST_SUITE_P(Stacks, SchedulerRandomTest,
                         ::testing::Values(RandomCase{"full", {{"full", {}, "t"}}, 0, true},
                                           RandomCase{"quant", {{"quant", {}, "t"}}, 4 * 40, true},
                                           RandomCase{"window", {{"window", {{"window", "12"}}, "t"}}, 0, false}),
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

// --- The seed article's scenario at llama-3.1-70b shapes ---

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
