// The scheduler on the real engine (small preset's shape, tiny pools): a
// request that is preempted and recomputes its cache generates exactly the
// greedy tokens it generates without preemption, and those of
// Engine::Generate; and serve-bench's entry point in engine mode.
#include "core/engine_executor.h"

#include "core/serve_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
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

ServeRun Serve(int64_t blocks_per_stream) {
  ServeRun run;
  ModelConfig mc;
  EXPECT_TRUE(PresetConfig("small", &mc).ok());
  ServePoolSpec pool;
  pool.pool_blocks = blocks_per_stream * mc.num_hidden_layers * mc.num_key_value_heads;
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
  EXPECT_EQ(ex->cache().BytesInUse(), 0);
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
