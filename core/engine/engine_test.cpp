// Engine-level behaviour: batched generation, sampling, pool exhaustion and
// the memory the pools report.
#include "core/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/base/untrusted.h"

namespace kvlab {
namespace {

EngineOptions SmallOptions() {
  EngineOptions o;
  o.model = "small";
  o.weight_seed = 1;
  o.max_seqs = 3;
  o.max_context = 96;
  return o;
}

std::vector<std::vector<int32_t>> Prompts() {
  return {{256, 72, 101, 108, 108, 111}, {256, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}, {256, 65}};
}

// Decoding three prompts of different lengths together gives each the tokens
// it gets alone (greedy).
TEST(EngineTest, BatchedGreedyEqualsOneAtATime) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(SmallOptions(), {PolicySpec{"full", {}, "t"}}, &e).ok());
  GenerateOptions go;
  go.max_new_tokens = 12;
  go.stop_at_eos = false;
  std::vector<GenerateResult> together, alone;
  GenerateStats stats;
  ASSERT_TRUE(e->Generate(Prompts(), go, &together, &stats).ok());
  ASSERT_EQ(together.size(), 3u);
  EXPECT_EQ(stats.decode_step_ms.size(), 11u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(e->Generate({Prompts()[i]}, go, &alone, &stats).ok());
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "prompt " << i;
    EXPECT_EQ(together[i].tokens.size(), 12u);
  }
  // Generation released every block.
  EXPECT_EQ(e->Memory().blocks_in_use, 0);
}

TEST(EngineTest, SamplingIsSeeded) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(SmallOptions(), {PolicySpec{"full", {}, "t"}}, &e).ok());
  GenerateOptions go;
  go.max_new_tokens = 16;
  go.stop_at_eos = false;
  go.sampling.temperature = 1.0;
  go.sampling.top_p = 0.95;
  go.sampling.seed = 7;
  std::vector<GenerateResult> a, b, c;
  GenerateStats st;
  ASSERT_TRUE(e->Generate({Prompts()[0]}, go, &a, &st).ok());
  ASSERT_TRUE(e->Generate({Prompts()[0]}, go, &b, &st).ok());
  go.sampling.seed = 8;
  ASSERT_TRUE(e->Generate({Prompts()[0]}, go, &c, &st).ok());
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_NE(a[0].tokens, c[0].tokens);
}

TEST(EngineTest, MemoryIsReadFromThePool) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(SmallOptions(), {PolicySpec{"full", {}, "t"}}, &e).ok());
  const CacheShape& s = e->cache().shape();
  ASSERT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  ASSERT_TRUE(e->Forward({SeqChunk{0, std::vector<int32_t>(40, 5)}}, false, &logits).ok());
  const MemoryStats m = e->Memory();
  const int64_t streams = s.num_layers * s.num_kv_heads;
  EXPECT_EQ(m.blocks_in_use, streams * 3);  // ceil(40 / 16)
  EXPECT_EQ(m.bytes_in_use, m.blocks_in_use * 2 * 16 * s.head_dim * 2);
  EXPECT_EQ(m.slots_in_use, streams * 40);
  EXPECT_EQ(m.tokens_seen, 40);
}

// Decode-time blocks in runs change where blocks lie, never what is
// computed or what counts as held: the same greedy tokens and the same
// bytes in use with runs on and off; the reserve is reported apart, and an
// h2o stack (compacting every step) holds the same bytes either way and no
// reserve after its compactions.
TEST(EngineTest, RunsChangeNeitherTokensNorHeldBytes) {
  for (const char* policy : {"full", "h2o"}) {
    std::vector<std::vector<GenerateResult>> out;
    std::vector<MemoryStats> mem;
    for (int runs : {0, 16}) {
      EngineOptions o = SmallOptions();
      o.run_blocks = runs;
      std::unique_ptr<Engine> e;
      const std::vector<PolicySpec> stack = {std::string(policy) == "h2o"
                                                 ? PolicySpec{"h2o", {{"budget", "24"}}, "t"}
                                                 : PolicySpec{"full", {}, "t"}};
      ASSERT_TRUE(Engine::Create(o, stack, &e).ok()) << policy;
      ASSERT_TRUE(e->AddSequence(0).ok());
      ASSERT_TRUE(e->AddSequence(1).ok());
      std::vector<std::vector<float>> logits;
      ASSERT_TRUE(e->Forward({SeqChunk{0, Prompts()[1]}, SeqChunk{1, Prompts()[0]}}, false, &logits).ok());
      out.emplace_back(2);
      for (int step = 0; step < 40; ++step) {  // greedy, both sequences each step
        std::vector<SeqChunk> chunks;
        for (size_t i = 0; i < 2; ++i) {
          const std::vector<float>& l = logits[i];
          const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
          out.back()[i].tokens.push_back(next);
          chunks.push_back(SeqChunk{static_cast<int64_t>(i), {next}});
        }
        ASSERT_TRUE(e->Forward(chunks, false, &logits).ok()) << policy << " step " << step;
      }
      mem.push_back(e->Memory());
      // h2o compacts every stream each step, and a compaction returns the reserve.
      EXPECT_EQ(mem.back().run_reserve_bytes > 0, runs > 1 && std::string(policy) == "full") << policy;
      ASSERT_TRUE(e->RemoveSequence(0).ok());
      ASSERT_TRUE(e->RemoveSequence(1).ok());
      EXPECT_EQ(e->Memory().run_reserve_bytes, 0) << policy;
    }
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(out[0][i].tokens, out[1][i].tokens) << policy << " sequence " << i;
    EXPECT_EQ(mem[0].bytes_in_use, mem[1].bytes_in_use) << policy;
    EXPECT_EQ(mem[0].peak_bytes_in_use, mem[1].peak_bytes_in_use) << policy;
    EXPECT_GT(mem[1].peak_run_reserve_bytes, 0) << policy;
  }
}

TEST(EngineTest, ExhaustedPoolIsReportedAndChangesNothing) {
  EngineOptions o = SmallOptions();
  o.num_blocks = 4 * 2 * 2;  // small preset: 4 layers x 2 KV heads, two blocks each
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e).ok());
  ASSERT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  ASSERT_TRUE(e->Forward({SeqChunk{0, std::vector<int32_t>(32, 5)}}, false, &logits).ok());
  EXPECT_FALSE(e->CanForward({SeqChunk{0, {5}}}));
  Status s = e->Forward({SeqChunk{0, {5}}}, false, &logits);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(e->SequenceLength(0), 32);
  EXPECT_EQ(e->cache().stream(0, 0, 0).num_tokens, 32);
}

TEST(EngineTest, RejectsBadInput) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(SmallOptions(), {PolicySpec{"full", {}, "t"}}, &e).ok());
  ASSERT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  Status s = e->Forward({SeqChunk{0, {5, 300}}}, false, &logits);
  EXPECT_NE(s.message().find("token id 300"), std::string::npos);
  EXPECT_FALSE(e->Forward({SeqChunk{9, {5}}}, false, &logits).ok());
  EXPECT_FALSE(e->Forward({SeqChunk{0, {5}}, SeqChunk{0, {6}}}, false, &logits).ok());
  EngineOptions bad = SmallOptions();
  bad.attention = "gpu";
  EXPECT_FALSE(Engine::Create(bad, {PolicySpec{"full", {}, "t"}}, &e).ok());
  bad = SmallOptions();
  bad.model = "/nonexistent/model";
  s = Engine::Create(bad, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("/nonexistent/model"), std::string::npos) << s.message();
  EXPECT_FALSE(Engine::Create(SmallOptions(), {PolicySpec{"nope", {}, "t"}}, &e).ok());
  bad = SmallOptions();
  bad.device = "tpu";
  s = Engine::Create(bad, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("device 'tpu'"), std::string::npos) << s.message();
  // Refused on every machine, naming the device: a build without CUDA, no
  // GPU, or (with one) the small preset's head_dim 32, which the CUDA decode
  // kernel does not serve.
  bad = SmallOptions();
  bad.device = "cuda";
  s = Engine::Create(bad, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("device \"cuda\""), std::string::npos) << s.message();
}

// A run whose pools the host cannot hold is refused before anything is
// allocated, with both numbers (the engine knows its reservation).
TEST(EngineTest, PoolsLargerThanTheHostAreRefusedUpFront) {
  const int64_t available = HostAvailableBytes();
  ASSERT_GT(available, 0) << "/proc/meminfo has no MemAvailable";
  EngineOptions o = SmallOptions();
  o.max_seqs = 65536;
  o.max_context = 65536;  // 2^32 tokens of the small preset: far past any host
  o.allow_long_context = true;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("the KV pools (65536 sequences x 65536 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bytes this host has available (MemAvailable)"), std::string::npos) << s.message();
  EXPECT_EQ(e, nullptr);
  // The same engine at a size that fits is made as before.
  EXPECT_TRUE(Engine::Create(SmallOptions(), {PolicySpec{"full", {}, "t"}}, &e).ok());
}

TEST(EngineTest, HostMemoryCheckNamesBothNumbers) {
  EXPECT_TRUE(CheckHostMemory("x", 100, 200).ok());
  EXPECT_TRUE(CheckHostMemory("x", 200, 200).ok());
  const Status s = CheckHostMemory("the pools", 300, 200);
  EXPECT_EQ(s.message(), "the pools needs 300 bytes, more than the 200 bytes this host has available (MemAvailable)");
}

}  // namespace
}  // namespace kvlab
