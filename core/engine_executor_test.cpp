// The scheduler on the real engine (small preset's shape, tiny pools): a
// request that is preempted and recomputes its cache generates exactly the
// greedy tokens it generates without preemption, and those of
// Engine::Generate; and serve-bench's entry point in engine mode.
#include "core/engine_executor.h"

#include "core/serve_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace kvlab {
namespace {

struct ServeRun {
  std::map<int64_t, std::vector<int32_t>> outputs;
  int64_t preemptions = 0;
  int64_t recomputed = 0;
  int64_t recomputed_outputs = 0;  // generated tokens fed again after preemptions (most of one request)
  int64_t prefix_hit_tokens = 0;
};

std::vector<int32_t> Prompt(int64_t id, int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((id * 37 + i * 11) % 256));
  return p;
}

// The small preset's shape with random weights of std 0.15 (the preset's own
// init gives near-uniform logits and greedy decoding repeats one token).
const std::string& ModelDir() {
  static const std::string dir = [] {
    ModelConfig c;
    EXPECT_TRUE(PresetConfig("small", &c).ok());
    const std::string d = ::testing::TempDir() + "kvlab_serve_engine_model";
    std::filesystem::remove_all(d);
    EXPECT_TRUE(WriteRandomCheckpoint(c, 5, 0.15, d).ok());
    return d;
  }();
  return dir;
}

EngineOptions SmallOptions() {
  EngineOptions eo;
  eo.model = ModelDir();
  eo.block_size = 4;
  eo.num_threads = 1;
  return eo;
}

// Three requests of 18, 21 and 24 prompt tokens; with shared_prefix their
// first 12 tokens (3 blocks of 4) are the same.
ServeRun Serve(int64_t blocks_per_stream, PrefixCachingMode prefix = PrefixCachingMode::kOff,
               bool shared_prefix = false) {
  ServeRun run;
  ModelConfig mc;
  EXPECT_TRUE(PresetConfig("small", &mc).ok());
  ServePoolSpec pool;
  pool.pool_blocks = blocks_per_stream * mc.num_hidden_layers * mc.num_key_value_heads;
  pool.prefix_caching = prefix;
  std::unique_ptr<StepExecutor> ex;
  Status s = NewEngineExecutor(SmallOptions(), mc, {{"full", {}, "test"}}, pool, &ex);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return run;
  SchedulerOptions so;
  so.watermark = 0;
  so.max_num_batched_tokens = 16;  // chunked prefill: prompts take several steps
  so.max_num_seqs = 4;
  Scheduler sched(so, ex.get());
  for (int64_t id = 0; id < 3; ++id) {
    RequestSpec r;
    r.id = id;
    r.arrival = static_cast<double>(id);
    r.prompt = Prompt(id, 18 + 3 * id);
    if (shared_prefix) std::copy_n(Prompt(7, 12).begin(), 12, r.prompt.begin());
    r.max_new_tokens = 24;
    EXPECT_TRUE(sched.AddRequest(std::move(r)).ok());
  }
  for (int t = 0; t < 2000 && sched.HasUnfinished(); ++t) {
    StepOutcome out;
    s = sched.Step(t, &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) break;
    for (Request& r : sched.TakeFinished()) {
      EXPECT_EQ(r.state, RequestState::kFinished);
      run.outputs[r.spec.id] = r.output;
      run.recomputed_outputs =
          std::max<int64_t>(run.recomputed_outputs, r.recompute_until - static_cast<int64_t>(r.spec.prompt.size()));
    }
  }
  EXPECT_FALSE(sched.HasUnfinished());
  run.preemptions = sched.num_preemptions();
  run.recomputed = sched.num_recomputed_tokens();
  run.prefix_hit_tokens = sched.num_prefix_hit_tokens();
  EXPECT_EQ(ex->cache().prefix_caching(), prefix == PrefixCachingMode::kOn);
  EXPECT_EQ(ex->cache().BytesInUse(), ex->cache().CachedOnlyBytes());  // only the prefix cache holds blocks
  return run;
}

TEST(EngineExecutorTest, PreemptedRequestsGenerateTheSameGreedyTokens) {
  const ServeRun roomy = Serve(64);  // 256 tokens per stream: no preemption
  const ServeRun tight = Serve(13);  // 52 tokens per stream: three requests of 42-48 tokens take turns
  ASSERT_EQ(roomy.preemptions, 0);
  ASSERT_GT(tight.preemptions, 0);
  ASSERT_GT(tight.recomputed, 0);
  ASSERT_GT(tight.recomputed_outputs, 0) << "no request was preempted after generating tokens";
  ASSERT_EQ(roomy.outputs.size(), 3u);
  ASSERT_EQ(tight.outputs.size(), 3u);
  for (const auto& kv : roomy.outputs) {
    ASSERT_EQ(kv.second.size(), 24u);
    EXPECT_EQ(tight.outputs.at(kv.first), kv.second) << "request " << kv.first;
    // Greedy text from weights of the preset's tiny init repeats one token;
    // this checkpoint's larger weights make the comparison mean something.
    EXPECT_GE(std::set<int32_t>(kv.second.begin(), kv.second.end()).size(), 6u) << "request " << kv.first;
  }
  // And the scheduler feeds tokens as Engine::Generate does.
  std::unique_ptr<Engine> engine;
  EngineOptions eo = SmallOptions();
  eo.max_context = 64;
  ASSERT_TRUE(Engine::Create(eo, {{"full", {}, "test"}}, &engine).ok());
  GenerateOptions go;
  go.max_new_tokens = 24;
  go.stop_at_eos = false;
  std::vector<GenerateResult> results;
  GenerateStats stats;
  ASSERT_TRUE(engine->Generate({Prompt(1, 21)}, go, &results, &stats).ok());
  EXPECT_EQ(results[0].tokens, roomy.outputs.at(1));
}

// Prefix caching on the engine: requests that share a prefix (and
// preempted requests that find their own blocks again) generate the greedy
// tokens they generate without it.
TEST(EngineExecutorTest, PrefixCachingKeepsTheGreedyTokens) {
  const ServeRun off = Serve(64, PrefixCachingMode::kOff, true);
  const ServeRun on = Serve(64, PrefixCachingMode::kOn, true);
  const ServeRun tight = Serve(13, PrefixCachingMode::kOn, true);
  EXPECT_EQ(off.prefix_hit_tokens, 0);
  EXPECT_GE(on.prefix_hit_tokens, 2 * 12) << "the later requests did not reuse the shared 12 tokens";
  EXPECT_GT(tight.preemptions, 0);
  ASSERT_EQ(off.outputs.size(), 3u);
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(tight.outputs, off.outputs);
}

std::vector<BlockHash> HashesOf(const std::vector<int32_t>& tokens, int unit) {
  std::vector<BlockHash> h;
  ExtendBlockHashes(tokens.data(), static_cast<int64_t>(tokens.size()), nullptr, 0, unit, &h);
  return h;
}

float MaxAbsDiff(const std::vector<float>& x, const std::vector<float>& y) {
  float d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

// Engine level: a sequence added with a cached prefix holds the first
// sequence's blocks (same ids), and its logits are exactly those of the same
// tokens on an engine without prefix caching that prefills the prefix as a
// chunk of its own (as the first sequence did) and then the rest. Against
// a single-chunk prefill they differ by float rounding only, as any two
// chunkings of a prefill do on this engine (checked too).
TEST(EnginePrefixCacheTest, SharedPrefixReusesBlocksAndGivesIdenticalLogits) {
  EngineOptions eo = SmallOptions();
  eo.max_seqs = 4;
  eo.max_context = 64;
  eo.prefix_caching = true;
  std::unique_ptr<Engine> cached, plain;
  ASSERT_TRUE(Engine::Create(eo, {{"full", {}, "test"}}, &cached).ok());
  eo.prefix_caching = false;
  ASSERT_TRUE(Engine::Create(eo, {{"full", {}, "test"}}, &plain).ok());
  auto slice = [](const std::vector<int32_t>& v, size_t from, size_t to) {
    return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(to));
  };

  const std::vector<int32_t> a = Prompt(1, 40);
  std::vector<int32_t> b = slice(a, 0, 32);       // 8 blocks of a ...
  for (int32_t t : Prompt(9, 11)) b.push_back(t);  // ... and 11 tokens of its own
  std::vector<std::vector<float>> logits;
  ASSERT_TRUE(cached->AddSequence(1).ok());
  ASSERT_TRUE(cached->Forward({{1, slice(a, 0, 32)}}, false, &logits).ok());
  ASSERT_TRUE(cached->Forward({{1, slice(a, 32, 40)}}, false, &logits).ok());
  cached->CacheFullUnits(1, HashesOf(a, 4));
  const std::vector<BlockHash> hb = HashesOf(b, 4);
  const KVCache::PrefixMatch m = cached->cache().MatchPrefix(hb, 10);
  ASSERT_EQ(m.units, 8);
  ASSERT_TRUE(cached->AddSequenceWithPrefix(2, std::vector<BlockHash>(hb.begin(), hb.begin() + 8)).ok());
  EXPECT_EQ(cached->SequenceLength(2), 32);
  const KVCache& c = cached->cache();
  for (int l = 0; l < c.shape().num_layers; ++l) {
    for (int h = 0; h < c.shape().num_kv_heads; ++h) {
      const std::vector<int32_t>& b1 = c.stream(1, l, h).blocks;
      EXPECT_EQ(c.stream(2, l, h).blocks, std::vector<int32_t>(b1.begin(), b1.begin() + 8)) << "layer " << l << " head " << h;
    }
  }
  std::vector<std::vector<float>> got, want, whole;
  ASSERT_TRUE(cached->Forward({{2, slice(b, 32, 43)}}, true, &got).ok());
  ASSERT_TRUE(plain->AddSequence(2).ok());
  ASSERT_TRUE(plain->Forward({{2, slice(b, 0, 32)}}, false, &want).ok());
  ASSERT_TRUE(plain->Forward({{2, slice(b, 32, 43)}}, true, &want).ok());
  const int64_t vocab = cached->model_config().vocab_size;
  ASSERT_EQ(got[0].size(), static_cast<size_t>(11 * vocab));
  EXPECT_EQ(got[0], want[0]) << "logits after a cached prefix differ from computing the prefix";
  // The same tokens in one chunk: rounding-level differences only (K/V
  // computed in a different batch can round to a neighbouring bf16 value).
  ASSERT_TRUE(plain->AddSequence(3).ok());
  ASSERT_TRUE(plain->Forward({{3, b}}, true, &whole).ok());
  const std::vector<float> whole_tail(whole[0].end() - 11 * vocab, whole[0].end());
  EXPECT_LT(MaxAbsDiff(got[0], whole_tail), 1e-2);
  EXPECT_EQ(MaxAbsDiff(got[0], whole_tail), MaxAbsDiff(want[0], whole_tail));
  // Decoding on from there stays identical.
  for (int step = 0; step < 8; ++step) {
    const int32_t next = Argmax(got[0].data() + got[0].size() - static_cast<size_t>(vocab), vocab);
    ASSERT_EQ(next, Argmax(want[0].data() + want[0].size() - static_cast<size_t>(vocab), vocab));
    ASSERT_TRUE(cached->Forward({{2, {next}}}, false, &got).ok());
    ASSERT_TRUE(plain->Forward({{2, {next}}}, false, &want).ok());
    EXPECT_EQ(got[0], want[0]) << "decode step " << step;
  }
}

TEST(EnginePrefixCacheTest, RefusedForSelectionStacks) {
  EngineOptions eo = SmallOptions();
  eo.prefix_caching = true;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(eo, {{"window", {{"window", "16"}}, "test"}}, &e);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("selection policy 'window'"), std::string::npos) << s.message();
  ASSERT_TRUE(Engine::Create(eo, {{"kivi", {{"group", "32"}, {"residual", "32"}}, "test"}}, &e).ok());
  EXPECT_TRUE(e->cache().prefix_caching());
  EXPECT_EQ(e->cache().prefix_unit_tokens(), 32);
}

TEST(EngineExecutorTest, BuildsThePlannedPoolsAndRefusesPlacement) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("small", &mc).ok());
  ServePoolSpec pool;
  pool.pool_blocks = 8 * 12;
  pool.encoded_pool_blocks = 8 * 30 + 5;  // rounded down to whole blocks per stream
  std::unique_ptr<StepExecutor> ex;
  Status s = NewEngineExecutor(SmallOptions(), mc, {{"quant", {}, "test"}}, pool, &ex);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NE(ex->cache().encoded_pool(), nullptr);
  EXPECT_EQ(ex->cache().pool().num_blocks(), 8 * 12);
  EXPECT_EQ(ex->cache().encoded_pool()->num_blocks(), 8 * 30);
  EXPECT_EQ(ex->MaxSequenceTokens(), 30 * 4 + 11 * 4);  // block_size 4: sealed blocks plus all but one plain block

  // Placement is refused (see NewEngineExecutor).
  pool.pool_blocks = 64;
  s = NewEngineExecutor(SmallOptions(), mc, {{"offload", {}, "test"}}, pool, &ex);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("placement (offload) policies are not supported by the scheduler yet"), std::string::npos)
      << s.message();
}

// `kvlab serve-bench` on the engine: the entry point the CLI calls.
TEST(ServeBenchRunTest, EngineRunOnTheSmallModel) {
  const std::string path = ::testing::TempDir() + "serve_engine.toml";
  std::ofstream(path) << R"(
model = "small"
model_free = false
block_size = 4
pool_blocks = 512
max_num_batched_tokens = 64
max_num_seqs = 8
threads = 1
[workload]
seed = 2
[[workload.users]]
count = 4
arrival_rate = 0.5
turns = 2
user_tokens = {dist = "uniform", min = 4, max = 40}
output_tokens = 8
)";
  std::string report;
  Status s = RunServeBench(path, ServeBenchOverrides(), &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(report.find("executor    engine, model small"), std::string::npos) << report;
  EXPECT_NE(report.find("8 requests: 8 finished"), std::string::npos) << report;
  EXPECT_NE(report.find("ms:    median"), std::string::npos) << report;
  EXPECT_NE(report.find("output tokens/s"), std::string::npos) << report;
}

}  // namespace
}  // namespace kvlab
