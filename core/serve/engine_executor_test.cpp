// The scheduler on the real engine (small preset's shape, tiny pools): a
// request that is preempted and recomputes its cache generates exactly the
// greedy tokens it generates without preemption, and those of
// Engine::Generate; prefix caching keeps the tokens (for a selection stack
// too, which copies shared blocks before evicting); offloading keeps them;
// and serve-bench's entry point in engine mode.
#include "core/serve/engine_executor.h"

#include "core/serve/serve_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

struct ServeRun {
  std::map<int64_t, std::vector<int32_t>> outputs;
  int64_t peak_host_bytes = 0;   // offloaded KV, after a step
  int64_t copied_blocks = 0;     // shared blocks copied before compaction
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
    const std::string d = ProcessTempDir() + "/serve_engine_model";
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
               bool shared_prefix = false, const std::vector<PolicySpec>& policies = {{"full", {}, "test"}}) {
  ServeRun run;
  ModelConfig mc;
  EXPECT_TRUE(PresetConfig("small", &mc).ok());
  ServePoolSpec pool;
  pool.pool_blocks = blocks_per_stream * mc.num_hidden_layers * mc.num_key_value_heads;
  pool.prefix_caching = prefix;
  std::unique_ptr<StepExecutor> ex;
  Status s = NewEngineExecutor(SmallOptions(), mc, policies, pool, &ex);
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
    run.peak_host_bytes = std::max(run.peak_host_bytes, ex->cache().HostBytesInUse());
    for (Request& r : sched.TakeFinished()) {
      EXPECT_EQ(r.state, RequestState::kFinished) << r.abort_reason;
      run.outputs[r.spec.id] = r.output;
      run.recomputed_outputs =
          std::max<int64_t>(run.recomputed_outputs, r.recompute_until - static_cast<int64_t>(r.spec.prompt.size()));
    }
  }
  EXPECT_FALSE(sched.HasUnfinished());
  run.preemptions = sched.num_preemptions();
  run.recomputed = sched.num_recomputed_tokens();
  run.prefix_hit_tokens = sched.num_prefix_hit_tokens();
  run.copied_blocks = ex->cache().num_copied_blocks();
  EXPECT_EQ(ex->cache().prefix_caching(), prefix == PrefixCachingMode::kOn);
  EXPECT_EQ(ex->cache().BytesInUse(), ex->cache().CachedOnlyBytes());  // only the prefix cache holds blocks
  EXPECT_EQ(ex->cache().HostBytesInUse() + ex->cache().DiskBytesInUse(), 0);
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

// A selection stack with prefix caching: sink keeps 4 + 28 slots, so the
// requests (42-48 tokens) evict while decoding, after the shared 12 tokens
// were cached; each copies the shared blocks before its first eviction.
// The greedy tokens are those without prefix caching (with preemptions too:
// a tight pool).
TEST(EngineExecutorTest, SelectionWithPrefixCachingKeepsTheGreedyTokens) {
  const std::vector<PolicySpec> sink = {{"sink", {{"n_sink", "4"}, {"window", "28"}}, "test"}};
  const ServeRun off = Serve(64, PrefixCachingMode::kOff, true, sink);
  const ServeRun on = Serve(64, PrefixCachingMode::kOn, true, sink);
  // A request's first eviction copies every shared block it holds (those it
  // cached itself included): 9 blocks of 4 slots per stream plus 8 copies.
  const ServeRun tight = Serve(18, PrefixCachingMode::kOn, true, sink);
  EXPECT_EQ(off.prefix_hit_tokens, 0);
  EXPECT_GE(on.prefix_hit_tokens, 2 * 12);
  EXPECT_GT(on.copied_blocks, 0);
  EXPECT_GT(tight.preemptions, 0);
  ASSERT_EQ(off.outputs.size(), 3u);
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(tight.outputs, off.outputs);
}

// Offloading in serving: the scheduler books each step's staging blocks; the
// tokens are those of `full` (offload is lossless), with and without
// preemptions, while most KV lives in host memory.
TEST(EngineExecutorTest, OffloadGeneratesTheTokensOfFull) {
  const std::vector<PolicySpec> offload = {
      {"offload", {{"device_budget", "8192"}, {"host_budget", "16777216"}, {"keep_sinks", "0"}, {"keep_recent", "8"}},
       "test"}};
  const ServeRun full = Serve(64);
  const ServeRun roomy = Serve(64, PrefixCachingMode::kOff, false, offload);
  const ServeRun tight = Serve(13, PrefixCachingMode::kOff, false, offload);
  EXPECT_EQ(full.peak_host_bytes, 0);
  EXPECT_GT(roomy.peak_host_bytes, 100 * 512) << "little KV was offloaded";
  EXPECT_GT(tight.preemptions, 0);
  ASSERT_EQ(full.outputs.size(), 3u);
  EXPECT_EQ(roomy.outputs, full.outputs);
  EXPECT_EQ(tight.outputs, full.outputs);
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

// The bytes of every block of the cached units `hashes`, unit by unit, stream by stream.
std::vector<std::vector<uint8_t>> CachedUnitBytes(const KVCache& c, const std::vector<BlockHash>& hashes,
                                                  std::vector<int32_t>* ids) {
  std::vector<std::vector<uint8_t>> out;
  ids->clear();
  for (BlockHash h : hashes) {
    const PrefixCache::Unit* u = c.prefix_cache()->Find(h);
    EXPECT_NE(u, nullptr);
    if (u == nullptr) return out;
    for (int32_t b : u->blocks) {
      ids->push_back(b);
      const uint8_t* p = c.pool().BlockData(b);
      out.emplace_back(p, p + c.pool().block_bytes());
    }
  }
  return out;
}

// Copy on write on the engine, with sink (2 + 38 slots): sequence 1 caches
// its prefix, then decodes past the budget; its first eviction moves every
// slot after the sinks, so it copies the shared blocks and writes the
// copies: the cached units keep their block ids and bytes. Sequence 2, added
// with the cached prefix, then gives exactly the logits of the same tokens
// run alone without prefix caching (prefix prefilled as its own chunk, as
// sequence 1 did), evictions included; so does sequence 1.
TEST(EnginePrefixCacheTest, SelectionCopiesSharedBlocksBeforeEvicting) {
  EngineOptions eo = SmallOptions();
  eo.max_seqs = 4;
  eo.max_context = 64;
  const std::vector<PolicySpec> sink = {{"sink", {{"n_sink", "2"}, {"window", "38"}}, "test"}};
  std::unique_ptr<Engine> cached, alone;
  eo.prefix_caching = true;
  ASSERT_TRUE(Engine::Create(eo, sink, &cached).ok());
  eo.prefix_caching = false;
  ASSERT_TRUE(Engine::Create(eo, sink, &alone).ok());
  auto slice = [](const std::vector<int32_t>& v, size_t from, size_t to) {
    return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(to));
  };
  const int64_t vocab = cached->model_config().vocab_size;
  auto last_argmax = [vocab](const std::vector<float>& l) {
    return Argmax(l.data() + l.size() - static_cast<size_t>(vocab), vocab);
  };
  // Decodes both engines' sequence `seq` in lockstep; logits must agree.
  auto decode = [&](int64_t seq, std::vector<float> got, int steps) {
    std::vector<std::vector<float>> g, w;
    for (int step = 0; step < steps; ++step) {
      const int32_t next = last_argmax(got);
      ASSERT_TRUE(cached->Forward({{seq, {next}}}, false, &g).ok());
      ASSERT_TRUE(alone->Forward({{seq, {next}}}, false, &w).ok());
      ASSERT_EQ(g[0], w[0]) << "sequence " << seq << " decode step " << step;
      got = g[0];
    }
  };

  const std::vector<int32_t> a = Prompt(1, 38);
  std::vector<int32_t> b = slice(a, 0, 32);       // 8 blocks of a ...
  for (int32_t t : Prompt(9, 7)) b.push_back(t);  // ... and 7 tokens of its own
  std::vector<std::vector<float>> la, wa;
  for (Engine* e : {cached.get(), alone.get()}) {
    ASSERT_TRUE(e->AddSequence(1).ok());
    ASSERT_TRUE(e->Forward({{1, slice(a, 0, 32)}}, false, &wa).ok());
    ASSERT_TRUE(e->Forward({{1, slice(a, 32, 38)}}, false, e == cached.get() ? &la : &wa).ok());
  }
  ASSERT_EQ(la[0], wa[0]);
  cached->CacheFullUnits(1, HashesOf(a, 4));
  const KVCache& c = cached->cache();
  ASSERT_EQ(c.prefix_cache()->num_units(), 9);
  const std::vector<BlockHash> hb = HashesOf(b, 4);
  const std::vector<BlockHash> prefix(hb.begin(), hb.begin() + 8);
  std::vector<int32_t> ids, ids_now;
  const auto bytes = CachedUnitBytes(c, prefix, &ids);
  EXPECT_EQ(c.stream(1, 0, 0).blocks[0], ids[0]);

  // Sequence 1 decodes 8 tokens: 38 -> 46 slots, evicting from the 41st.
  decode(1, la[0], 8);
  EXPECT_EQ(c.stream(1, 0, 0).num_tokens, 40);
  EXPECT_EQ(c.num_copied_blocks(), 9 * c.shape().StreamsPerSequence()) << "every cached block of sequence 1 copied once";
  EXPECT_EQ(c.CopyOnWriteBlocks(1), 0);
  EXPECT_NE(c.stream(1, 0, 0).blocks[0], ids[0]);
  EXPECT_EQ(CachedUnitBytes(c, prefix, &ids_now), bytes) << "sequence 1's eviction changed a cached block";
  EXPECT_EQ(ids_now, ids);
  EXPECT_EQ(c.prefix_cache()->num_units(), 9) << "units after an eviction were cached";

  // Sequence 2 takes the cached prefix; its logits are those of running alone.
  std::vector<std::vector<float>> got, want;
  ASSERT_TRUE(cached->AddSequenceWithPrefix(2, prefix).ok());
  EXPECT_EQ(c.stream(2, 0, 0).blocks[0], ids[0]);
  ASSERT_TRUE(cached->Forward({{2, slice(b, 32, 39)}}, true, &got).ok());
  ASSERT_TRUE(alone->AddSequence(2).ok());
  ASSERT_TRUE(alone->Forward({{2, slice(b, 0, 32)}}, false, &want).ok());
  ASSERT_TRUE(alone->Forward({{2, slice(b, 32, 39)}}, true, &want).ok());
  ASSERT_EQ(got[0].size(), static_cast<size_t>(7 * vocab));
  EXPECT_EQ(got[0], want[0]) << "logits after a cached prefix differ from computing the prefix";
  decode(2, got[0], 8);  // 39 -> 47 slots: sequence 2 evicts (and copies) too
  EXPECT_EQ(c.stream(2, 0, 0).num_tokens, 40);
  EXPECT_EQ(c.CopyOnWriteBlocks(2), 0);
  EXPECT_EQ(CachedUnitBytes(c, prefix, &ids_now), bytes) << "sequence 2's eviction changed a cached block";
  EXPECT_EQ(ids_now, ids);
  ASSERT_TRUE(cached->RemoveSequence(1).ok());
  ASSERT_TRUE(cached->RemoveSequence(2).ok());
  EXPECT_EQ(c.BytesInUse(), c.CachedOnlyBytes());
  EXPECT_EQ(c.prefix_cache()->num_evictable(), c.prefix_cache()->num_units());
}

TEST(EnginePrefixCacheTest, RefusedForPlacementStacks) {
  EngineOptions eo = SmallOptions();
  eo.prefix_caching = true;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(eo, {{"offload", {}, "test"}}, &e);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("placement policy 'offload'"), std::string::npos) << s.message();
  ASSERT_TRUE(Engine::Create(eo, {{"window", {{"window", "16"}}, "test"}}, &e).ok()) << "selection shares by copy on write";
  ASSERT_TRUE(Engine::Create(eo, {{"kivi", {{"group", "32"}, {"residual", "32"}}, "test"}}, &e).ok());
  EXPECT_TRUE(e->cache().prefix_caching());
  EXPECT_EQ(e->cache().prefix_unit_tokens(), 32);
}

TEST(EngineExecutorTest, BuildsThePlannedPools) {
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

  // Placement: the engine offloads (the scheduler books staging blocks).
  pool.pool_blocks = 64;
  s = NewEngineExecutor(SmallOptions(), mc, {{"offload", {}, "test"}}, pool, &ex);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ex->cache().offload_enabled());
}

// serve-bench configs on the small model: the engine and pool, and a
// workload of 4 users x 2 turns (8 requests).
const char* kSmallServeHead = R"(
model = "small"
model_free = false
block_size = 4
pool_blocks = 512
max_num_batched_tokens = 64
max_num_seqs = 8
threads = 1
)";
const char* kSmallServeWorkload = R"(
[workload]
seed = 2
[[workload.users]]
count = 4
arrival_rate = 0.5
turns = 2
user_tokens = {dist = "uniform", min = 4, max = 40}
output_tokens = 8
)";

// `kvlab serve-bench` on the engine: the entry point the CLI calls, with a
// --set override (block_size 4 in the file, 8 run).
TEST(ServeBenchRunTest, EngineRunOnTheSmallModel) {
  const std::string path = ProcessTempDir() + "/serve_engine.toml";
  std::ofstream(path) << std::string(kSmallServeHead) + kSmallServeWorkload;
  ServeBenchOverrides ov;
  ov.sets = {"block_size=8"};
  std::string report;
  Status s = RunServeBench(path, ov, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(report.rfind("serve-bench " + path + " --set block_size=8\n", 0), 0u) << report;
  EXPECT_NE(report.find("executor    engine, model small"), std::string::npos) << report;
  EXPECT_NE(report.find(", block_size 8, "), std::string::npos) << report;
  EXPECT_NE(report.find("8 requests: 8 finished"), std::string::npos) << report;
  EXPECT_NE(report.find("ms:    median"), std::string::npos) << report;
  EXPECT_NE(report.find("output tokens/s"), std::string::npos) << report;
}

// serve-bench on the engine with ["offload"]: the same requests finish with
// the same tokens processed as with ["full"], and the report gives the
// bytes on the device and in host memory.
TEST(ServeBenchRunTest, EngineRunWithOffloadReportsDeviceAndHostBytes) {
  const std::string head = kSmallServeHead, workload = kSmallServeWorkload;
  const std::string offload = R"(
[[policy]]
name = "offload"
device_budget = 16384
host_budget = 16777216
keep_sinks = 0
keep_recent = 8
)";
  ServeBenchOverrides ov;
  ov.json_path = ProcessTempDir() + "/serve_offload.jsonl";
  std::remove(ov.json_path.c_str());
  std::string full_report, offload_report;
  const std::string full_path = ProcessTempDir() + "/serve_full.toml";
  const std::string offload_path = ProcessTempDir() + "/serve_offload.toml";
  std::ofstream(full_path) << head + workload;
  std::ofstream(offload_path) << head + offload + workload;
  Status s = RunServeBench(full_path, ov, &full_report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = RunServeBench(offload_path, ov, &offload_report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(full_report.find("tiers"), std::string::npos) << full_report;
  EXPECT_NE(offload_report.find("tiers       device mean"), std::string::npos) << offload_report;
  EXPECT_NE(offload_report.find("8 requests: 8 finished"), std::string::npos) << offload_report;
  std::ifstream f(ov.json_path);
  std::string line_full, line_offload;
  ASSERT_TRUE(std::getline(f, line_full) && std::getline(f, line_offload));
  const auto jf = nlohmann::json::parse(line_full), jo = nlohmann::json::parse(line_offload);
  EXPECT_EQ(jf["offload"], false);
  EXPECT_EQ(jo["offload"], true);
  EXPECT_EQ(jo["output_tokens"], jf["output_tokens"]);
  EXPECT_EQ(jo["prompt_tokens"], jf["prompt_tokens"]);
  EXPECT_EQ(jf["peak_host_bytes"], 0);
  EXPECT_GT(jo["peak_host_bytes"].get<int64_t>(), 0);
  EXPECT_GT(jo["mean_host_bytes"].get<double>(), 0);
  EXPECT_LT(jo["mean_device_bytes"].get<double>(), jf["mean_device_bytes"].get<double>());
}

}  // namespace
}  // namespace kvlab
