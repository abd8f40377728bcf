// Policies running in the engine: what they keep and what the pools then
// hold, measured against the `full` baseline on the same model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"
#include "core/model/memory_calc.h"
#include "core/model/model.h"
#include "kernels/attention_encoded.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

// A random checkpoint of the given shape (vocabulary 300, MLP width 128) in a
// fresh temporary directory named for `name`.
std::string WriteTinyModel(const std::string& name, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, uint64_t seed) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = 300;
  c.hidden_size = hidden;
  c.intermediate_size = 128;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = 4096;
  std::string d = ProcessTempDir() + "/" + name;
  std::filesystem::remove_all(d);
  EXPECT_TRUE(WriteRandomCheckpoint(c, seed, 0.08, d).ok());
  return d;
}

std::string TinyModelDir() {
  static const std::string dir = WriteTinyModel("tiny-policy-test", 64, 2, 8, 2, 32, 21);
  return dir;
}

std::unique_ptr<Engine> MakeEngine(const std::vector<PolicySpec>& policies, DType dtype = DType::kF32) {
  EngineOptions o;
  o.model = TinyModelDir();
  o.kv_dtype = dtype;
  o.max_context = 512;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(o, policies, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return e;
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % 300);
  return t;
}

// Teacher-forced: a prefill chunk, then one token per step; returns every
// step's logits concatenated.
std::vector<float> TeacherForce(Engine* e, const std::vector<int32_t>& tokens, int prefill) {
  EXPECT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  std::vector<float> all;
  EXPECT_TRUE(e->Forward({SeqChunk{0, std::vector<int32_t>(tokens.begin(), tokens.begin() + prefill)}}, false, &logits).ok());
  all = logits[0];
  for (size_t i = static_cast<size_t>(prefill); i < tokens.size(); ++i) {
    Status s = e->Forward({SeqChunk{0, {tokens[i]}}}, false, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    all.insert(all.end(), logits[0].begin(), logits[0].end());
  }
  return all;
}

// Offloading is lossless: with the smallest device budget (each stream's
// open block, which a step writes), host memory for two blocks and the rest
// on disk, the logits are bit-identical to full's.
TEST(PolicyEngineTest, OffloadIsBitIdenticalToFull) {
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}}, DType::kBF16);
  const int64_t block = full->cache().pool().block_bytes();
  const int64_t streams = 2 * 2;
  auto off = MakeEngine({PolicySpec{"offload",
                                    {{"device_budget", std::to_string(streams * block)},
                                     {"host_budget", std::to_string(2 * block)},
                                     {"keep_sinks", "0"},
                                     {"keep_recent", "0"}},
                                    "t"}},
                        DType::kBF16);
  const auto tokens = Tokens(120);
  const auto a = TeacherForce(full.get(), tokens, 30);
  const auto b = TeacherForce(off.get(), tokens, 30);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  const MemoryStats mf = full->Memory(), mo = off->Memory();
  // Same bytes in all, but only each stream's open tail block stays resident.
  EXPECT_EQ(mo.bytes_in_use, mf.bytes_in_use);
  EXPECT_EQ(mo.device_bytes, streams * block);
  EXPECT_EQ(mo.host_bytes, 2 * block);
  EXPECT_EQ(mo.disk_bytes, mf.bytes_in_use - mo.device_bytes - mo.host_bytes);
  EXPECT_GT(mo.disk_bytes, 0);
}

// kivi's attention = "int8" is an option of the policy (KernelOptions), not
// of the stored encoding: the engine's CPU backend hands it to the KIVI
// kernel, whose int8 arithmetic moves the logits off the exact ones by far
// less than KIVI's own quantization does; the reference backend computes
// exactly whatever the option says. A model of head_dim 128, the int8
// kernel's shape.
TEST(PolicyEngineTest, KiviInt8AttentionReachesTheCpuKernel) {
  const std::string dir = WriteTinyModel("tiny-int8-attention-test", 256, 1, 4, 1, 128, 5);
  auto run = [&](const std::vector<PolicySpec>& stack, const std::string& attention) {
    EngineOptions o;
    o.model = dir;
    o.kv_dtype = DType::kBF16;
    o.max_context = 512;
    o.attention = attention;
    std::unique_ptr<Engine> e;
    const Status s = Engine::Create(o, stack, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e ? TeacherForce(e.get(), Tokens(260), 64) : std::vector<float>();
  };
  const PolicySpec exact{"kivi", {{"residual", "32"}}, "t"};
  const PolicySpec int8{"kivi", {{"residual", "32"}, {"attention", "int8"}}, "t"};
  const auto full = run({PolicySpec{"full", {}, "t"}}, "cpu");
  const auto a = run({exact}, "cpu"), b = run({int8}, "cpu");
  ASSERT_EQ(a.size(), full.size());
  ASSERT_EQ(b.size(), full.size());
  double own = 0, approx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    own = std::max(own, std::abs(static_cast<double>(a[i]) - full[i]));
    approx = std::max(approx, std::abs(static_cast<double>(b[i]) - a[i]));
  }
  EXPECT_GT(approx, 0.0) << "the int8 path was not taken";
  EXPECT_LT(approx, 0.25 * own) << "KIVI's own error " << own;
  const auto ra = run({exact}, "reference"), rb = run({int8}, "reference");
  ASSERT_EQ(ra.size(), rb.size());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
  std::printf("[ kivi int8 ] max |logit| difference: KIVI-2 beside full %.3g, int8 beside exact %.3g\n", own, approx);
  std::filesystem::remove_all(dir);
}

// quant's sealed int8 / fp8 blocks take the fused CPU kernel
// (kernels/attention_quant_cpu.h) in the engine's CPU backend; its logits
// equal those of the generic decode-then-attend path it replaced (forced by
// ScopedQuantFusedCpu) to fp32 rounding: 1e-4 + 1e-4 |logit| over a
// teacher-forced run (a 64-token prefill, then one token a step), for both
// formats and both scale granularities, on a GQA-4 model of head_dim 128.
// One layer, so that both runs seal the same codes: with more, a layer's
// attention output feeds the next layer's K/V, and an fp32 rounding
// difference that moves a value across a rounding boundary of its 8-bit code
// changes that code by a whole step (measured at two layers: 5-53 times this
// tolerance, as between any two fp32 summation orders).
TEST(PolicyEngineTest, QuantFusedKernelGivesTheGenericPathsLogits) {
  const std::string dir = WriteTinyModel("tiny-quant-fused-test", 256, 1, 8, 2, 128, 9);
  auto run = [&](const PolicySpec& quant, bool fused) {
    const ScopedQuantFusedCpu path(fused);
    EngineOptions o;
    o.model = dir;
    o.kv_dtype = DType::kBF16;
    o.max_context = 512;
    std::unique_ptr<Engine> e;
    const Status s = Engine::Create(o, {quant}, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e ? TeacherForce(e.get(), Tokens(200), 64) : std::vector<float>();
  };
  const std::vector<float> full = run(PolicySpec{"full", {}, "t"}, true);
  for (const char* format : {"int8", "fp8"}) {
    for (const char* scale : {"token", "block"}) {
      SCOPED_TRACE(std::string(format) + ", scale " + scale);
      const PolicySpec quant{"quant", {{"format", format}, {"scale", scale}}, "t"};
      const std::vector<float> fused = run(quant, true), generic = run(quant, false);
      ASSERT_EQ(fused.size(), generic.size());
      ASSERT_EQ(fused.size(), full.size());
      double worst = 0, own = 0;
      for (size_t i = 0; i < fused.size(); ++i) {
        worst = std::max(worst, std::abs(double(fused[i]) - generic[i]) / (1e-4 + 1e-4 * std::abs(generic[i])));
        own = std::max(own, std::abs(double(generic[i]) - full[i]));
      }
      EXPECT_LE(worst, 1.0);
      EXPECT_GT(own, 0.0) << "the quantised cache should move the logits off full's";
      std::printf("[ quant %s/%s ] fused beside generic: %.3g x the tolerance; quant beside full: %.3g\n", format,
                  scale, worst, own);
    }
  }
  std::filesystem::remove_all(dir);
}

// Per-head eviction frees memory: H2O keeps a different set in each head, and
// the pools hold exactly the blocks those sets need.
TEST(PolicyEngineTest, H2OPerHeadEvictionFreesBlocks) {
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}});
  auto h2o = MakeEngine({PolicySpec{"h2o", {{"budget", "40"}}, "t"}});
  const auto tokens = Tokens(150);
  TeacherForce(full.get(), tokens, 20);
  TeacherForce(h2o.get(), tokens, 20);
  const KVCache& c = h2o->cache();
  int64_t blocks = 0;
  bool heads_differ = false;
  for (int l = 0; l < 2; ++l) {
    const Stream& s0 = c.stream(0, l, 0);
    const Stream& s1 = c.stream(0, l, 1);
    heads_differ = heads_differ || s0.positions != s1.positions;
    for (int h = 0; h < 2; ++h) {
      const Stream& s = c.stream(0, l, h);
      EXPECT_LE(s.num_tokens, 40);
      blocks += (s.num_tokens + 15) / 16;
    }
  }
  EXPECT_TRUE(heads_differ) << "H2O should keep different tokens in different heads";
  EXPECT_EQ(c.pool().num_used(), blocks);
  EXPECT_LT(h2o->Memory().bytes_in_use, full->Memory().bytes_in_use / 3);
}

// Bounded steps: a chunk longer than max_step_tokens runs as steps of at
// most that many tokens with the policy acting after each, so no stream
// holds more than the policy keeps plus one step during a long prefill.
// With max_step_tokens = 1, one 300-token Forward is token-by-token
// decoding, the rule H2O defines: the same kept set in every stream and the
// same last logits, bit for bit.
TEST(PolicyEngineTest, BoundedStepsKeepTheTokenByTokenSetAndBoundThePeak) {
  auto make = [](int64_t step) {
    EngineOptions o;
    o.model = TinyModelDir();
    o.kv_dtype = DType::kF32;
    o.max_context = 512;
    o.max_step_tokens = step;
    std::unique_ptr<Engine> e;
    Status s = Engine::Create(o, {PolicySpec{"h2o", {{"budget", "40"}}, "t"}}, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e;
  };
  const auto tokens = Tokens(300);
  auto one_chunk = make(1), by_token = make(1);
  ASSERT_TRUE(one_chunk->AddSequence(0).ok());
  ASSERT_TRUE(by_token->AddSequence(0).ok());
  std::vector<std::vector<float>> a, b;
  ASSERT_TRUE(one_chunk->Forward({SeqChunk{0, tokens}}, false, &a).ok());
  for (int32_t t : tokens) ASSERT_TRUE(by_token->Forward({SeqChunk{0, {t}}}, false, &b).ok());
  EXPECT_EQ(a[0], b[0]);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(one_chunk->cache().stream(0, l, h).positions, by_token->cache().stream(0, l, h).positions);
      EXPECT_EQ(one_chunk->cache().stream(0, l, h).num_tokens, 40);
    }
  }
  // The default step of 64: the peak is 40 + 64 slots a stream, in blocks
  // (2 layers x 2 heads x 7 blocks of 16 x 2 x 32 floats), against the whole
  // chunk's 300 slots a stream with steps as given (0).
  auto bounded = make(64), unbounded = make(0);
  EXPECT_EQ(bounded->step_tokens(), 64);
  EXPECT_EQ(unbounded->step_tokens(), 0);
  for (Engine* e : {bounded.get(), unbounded.get()}) {
    ASSERT_TRUE(e->AddSequence(0).ok());
    ASSERT_TRUE(e->Forward({SeqChunk{0, tokens}}, true, &a).ok());
    EXPECT_EQ(a[0].size(), tokens.size() * 300) << "every token's logits, across the steps";
  }
  const int64_t block_bytes = 2 * 16 * 32 * 4;
  EXPECT_LE(bounded->Memory().peak_bytes_in_use, 4 * 7 * block_bytes);
  EXPECT_GE(unbounded->Memory().peak_bytes_in_use, 4 * 19 * block_bytes);
  // And the pools were sized for it: 4 streams x 7 blocks, against full's 32.
  EXPECT_EQ(bounded->Memory().plain_bytes_reserved, 4 * 7 * block_bytes);
  EXPECT_EQ(bounded->Memory().full_bytes_reserved, 4 * 32 * block_bytes);
  EXPECT_EQ(unbounded->Memory().plain_bytes_reserved, 4 * 32 * block_bytes);
}

// Reservations follow the stack: every compressing stack reserves less than
// full for the same run, and says why. (Offload cannot at two layers: its two
// staging sets of one layer's blocks are the whole cache; the llama-3.1-8b
// case is in model_io_test's CacheReservationTest.)
TEST(PolicyEngineTest, ReservationsAreBelowFullsForEveryCompressingStack) {
  const std::vector<std::vector<PolicySpec>> stacks = {
      {PolicySpec{"sink", {{"n_sink", "4"}, {"window", "60"}}, "t"}},
      {PolicySpec{"h2o", {{"ratio", "0.25"}}, "t"}},
      {PolicySpec{"kivi", {{"residual", "32"}}, "t"}},
      {PolicySpec{"quant", {}, "t"}},
      {PolicySpec{"gqa-reuse", {}, "t"}},
      {PolicySpec{"sink", {{"window", "60"}}, "t"}, PolicySpec{"kivi", {{"residual", "32"}}, "t"}},
  };
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}});
  const MemoryStats fm = full->Memory();
  EXPECT_EQ(fm.bytes_reserved, fm.full_bytes_reserved);
  for (const auto& st : stacks) {
    auto e = MakeEngine(st);
    ASSERT_NE(e, nullptr);
    SCOPED_TRACE(e->policies().Describe());
    const MemoryStats m = e->Memory();
    EXPECT_EQ(m.full_bytes_reserved, fm.bytes_reserved);
    EXPECT_LT(m.bytes_reserved, fm.bytes_reserved) << e->reservation().why;
    EXPECT_EQ(m.bytes_reserved, m.plain_bytes_reserved + m.encoded_bytes_reserved);
    EXPECT_FALSE(e->reservation().why.empty());
    // A long run fits: 400 tokens teacher-forced, 100 at once then one a step.
    TeacherForce(e.get(), Tokens(400), 100);
  }
}

// Just past KIVI's residual its two pools, each at its own peak (plain: the
// residual, a group being filled and a step; encoded: what is sealed by the
// end), would reserve more than the full cache: the engine lowers its step
// (whole blocks) until they do not, says so in the reservation, and the run
// stays within what it reserved.
TEST(PolicyEngineTest, KiviStepLoweredSoTheReservationStaysWithinFull) {
  for (int64_t ctx : {208, 256}) {
    EngineOptions o;
    o.model = TinyModelDir();
    o.kv_dtype = DType::kBF16;
    o.max_context = ctx;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(o, {PolicySpec{"kivi", {{"bits", "4"}}, "t"}}, &e).ok());
    SCOPED_TRACE(std::to_string(ctx) + " tokens:\n" + e->reservation().why);
    const MemoryStats m = e->Memory();
    EXPECT_LE(m.bytes_reserved, m.full_bytes_reserved);
    EXPECT_LT(e->step_tokens(), o.max_step_tokens);
    EXPECT_EQ(e->step_tokens() % 16, 0);
    EXPECT_NE(e->reservation().why.find("step: lowered from " + std::to_string(o.max_step_tokens) + " to " +
                                        std::to_string(e->step_tokens())),
              std::string::npos);
    TeacherForce(e.get(), Tokens(static_cast<int>(ctx)), static_cast<int>(ctx) - 8);
    EXPECT_LE(e->Memory().peak_bytes_in_use, m.bytes_reserved);
  }
}

// `kvlab memory`'s analytic figure (EstimateKVMemory, in whole blocks) is
// what the engine's pools hold at the end of a teacher-forced run, for every
// concern: selection, representation, head sharing, placement and stacks.
TEST(PolicyEngineTest, MemoryCalculatorEqualsTheEnginesEndBytes) {
  const std::vector<std::vector<PolicySpec>> stacks = {
      {PolicySpec{"full", {}, "t"}},
      {PolicySpec{"sink", {{"n_sink", "4"}, {"window", "60"}}, "t"}},
      {PolicySpec{"h2o", {{"ratio", "0.25"}}, "t"}},
      {PolicySpec{"h2o", {{"budget", "50"}}, "t"}},
      {PolicySpec{"kivi", {{"residual", "32"}}, "t"}},
      {PolicySpec{"quant", {}, "t"}},
      {PolicySpec{"gqa-reuse", {}, "t"}},
      {PolicySpec{"offload", {{"device_budget", "16384"}, {"host_budget", "32768"}}, "t"}},
      {PolicySpec{"sink", {{"window", "60"}}, "t"}, PolicySpec{"kivi", {{"residual", "32"}}, "t"}},
      {PolicySpec{"gqa-reuse", {}, "t"}, PolicySpec{"h2o", {{"budget", "40"}}, "t"}},
  };
  ModelConfig mc;
  ASSERT_TRUE(LoadModelConfig(TinyModelDir() + "/config.json", &mc).ok());
  for (const auto& specs : stacks) {
    auto e = MakeEngine(specs, DType::kBF16);
    ASSERT_NE(e, nullptr);
    SCOPED_TRACE(e->policies().Describe());
    TeacherForce(e.get(), Tokens(333), 100);
    MemoryEstimate est;
    ASSERT_TRUE(EstimateKVMemory(mc, 333, 16, e->policies(), &est).ok());
    const MemoryStats m = e->Memory();
    EXPECT_EQ(est.bytes_in_blocks, m.bytes_in_use);
    if (est.placed) {
      EXPECT_EQ(est.host_bytes, m.host_bytes);
      EXPECT_EQ(est.disk_bytes, m.disk_bytes);
      EXPECT_EQ(est.device_bytes + est.host_bytes + est.disk_bytes, m.bytes_in_use);
    }
  }
}

// gqa-reuse with merge = mean stores, in layer 0, the mean of the two K heads
// that full stores (layer 0's inputs do not depend on the cache).
TEST(PolicyEngineTest, GqaReusePoolsHeadsByMean) {
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}});
  auto mean = MakeEngine({PolicySpec{"gqa-reuse", {{"group", "2"}, {"merge", "mean"}}, "t"}});
  auto first = MakeEngine({PolicySpec{"gqa-reuse", {{"group", "2"}, {"merge", "first"}}, "t"}});
  const auto tokens = Tokens(20);
  TeacherForce(full.get(), tokens, 20);
  TeacherForce(mean.get(), tokens, 20);
  TeacherForce(first.get(), tokens, 20);
  EXPECT_EQ(mean->cache().shape().num_kv_heads, 1);
  EXPECT_EQ(mean->Memory().bytes_in_use * 2, full->Memory().bytes_in_use);
  std::vector<float> k0(32), v0(32), k1(32), v1(32), km(32), vm(32), kf(32), vf(32);
  for (int64_t t = 0; t < 20; ++t) {
    full->cache().ReadSlot(0, 0, 0, t, k0.data(), v0.data());
    full->cache().ReadSlot(0, 0, 1, t, k1.data(), v1.data());
    mean->cache().ReadSlot(0, 0, 0, t, km.data(), vm.data());
    first->cache().ReadSlot(0, 0, 0, t, kf.data(), vf.data());
    for (int d = 0; d < 32; ++d) {
      EXPECT_NEAR(km[d], 0.5f * (k0[d] + k1[d]), 1e-5);
      EXPECT_NEAR(vm[d], 0.5f * (v0[d] + v1[d]), 1e-5);
      EXPECT_EQ(kf[d], k0[d]);
    }
  }
}

// sink keeps n_sink + window slots whatever the length; memory stops growing.
TEST(PolicyEngineTest, SinkBoundsMemoryWhileStreaming) {
  auto e = MakeEngine({PolicySpec{"sink", {{"n_sink", "4"}, {"window", "28"}, {"positions", "original"}}, "t"}});
  const auto tokens = Tokens(200);
  TeacherForce(e.get(), tokens, 10);
  const Stream& s = e->cache().stream(0, 1, 1);
  ASSERT_EQ(s.num_tokens, 32);
  EXPECT_EQ(s.positions[3], 3);
  EXPECT_EQ(s.positions[4], 200 - 28);
  EXPECT_EQ(s.positions[31], 199);
  EXPECT_EQ(e->Memory().blocks_in_use, 4 * 2);
  EXPECT_EQ(e->SequenceLength(0), 200);
}

// The design card's compositions run, and each saves at least what its
// parts save alone.
TEST(PolicyEngineTest, StacksCompose) {
  const auto tokens = Tokens(150);
  const std::vector<std::vector<PolicySpec>> stacks = {
      {{"sink", {{"window", "60"}}, "t"}, {"kivi", {{"residual", "32"}}, "t"}},
      {{"h2o", {{"budget", "64"}}, "t"}, {"kivi", {{"residual", "32"}}, "t"}},
      {{"gqa-reuse", {}, "t"}, {"kivi", {{"residual", "32"}}, "t"}, {"offload", {{"device_budget", "8192"}, {"keep_recent", "16"}}, "t"}},
      {{"h2o", {{"budget", "64"}}, "t"}, {"offload", {{"device_budget", "8192"}, {"keep_recent", "16"}}, "t"}},
  };
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}}, DType::kBF16);
  TeacherForce(full.get(), tokens, 40);
  for (const auto& stack : stacks) {
    auto e = MakeEngine(stack, DType::kBF16);
    ASSERT_TRUE(e);
    SCOPED_TRACE(e->policies().Describe());
    const auto logits = TeacherForce(e.get(), tokens, 40);
    bool finite = true;
    for (float x : logits) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite);
    EXPECT_LT(e->Memory().device_bytes, full->Memory().device_bytes / 2);
  }
  // Two policies of one concern: an error naming both.
  EngineOptions o;
  o.model = TinyModelDir();
  std::unique_ptr<Engine> e;
  Status st = Engine::Create(o, {{"sink", {}, "x.toml:3:1"}, {"h2o", {}, "x.toml:6:1"}}, &e);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'sink' and 'h2o'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"kivi", {}, "t"}, {"quant", {}, "t"}}, &e);
  EXPECT_NE(st.message().find("'kivi' and 'quant'"), std::string::npos) << st.message();
}

// Shape-dependent bad parameters are errors naming the parameter.
TEST(PolicyEngineTest, ShapeErrorsNameTheParameter) {
  EngineOptions o;
  o.model = TinyModelDir();  // 2 KV heads, head_dim 32
  std::unique_ptr<Engine> e;
  Status st = Engine::Create(o, {{"gqa-reuse", {{"group", "3"}}, "t"}}, &e);
  EXPECT_NE(st.message().find("'group'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"kivi", {{"group", "48"}}, "t"}}, &e);  // per-token values need group | head_dim
  EXPECT_NE(st.message().find("'group'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"kivi", {{"group", "8"}}, "t"}}, &e);  // not a multiple of block_size 16
  EXPECT_NE(st.message().find("'group'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"kivi", {{"bits", "3"}}, "t"}}, &e);
  EXPECT_NE(st.message().find("'bits'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"kivi", {{"attention", "int4"}}, "t"}}, &e);  // exact | int8
  EXPECT_NE(st.message().find("'attention'"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"sink", {{"window", "0"}}, "t"}}, &e);
  EXPECT_NE(st.message().find("window"), std::string::npos) << st.message();
  st = Engine::Create(o, {{"offload", {{"device_budget", "-1"}}, "t"}}, &e);
  EXPECT_NE(st.message().find("'device_budget'"), std::string::npos) << st.message();
  // A device budget below the open block of every stream (which each step
  // writes and which never leaves the device) could never be met: one error
  // with both numbers. 2 seqs x 2 layers x 2 KV heads x 2,048-byte blocks.
  o.max_seqs = 2;
  st = Engine::Create(o, {{"offload", {{"device_budget", "16383"}}, "t"}}, &e);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'offload' parameter 'device_budget' is 16,383 bytes, less than the 16,384 bytes"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("lower max_seqs"), std::string::npos) << st.message();
  EXPECT_TRUE(Engine::Create(o, {{"offload", {{"device_budget", "16384"}}, "t"}}, &e).ok());
}

// Blocks the streams of sequence 0 reference on the device, over all pools.
int64_t DeviceBlocksReferenced(const KVCache& c) {
  int64_t n = 0;
  for (int l = 0; l < c.shape().num_layers; ++l) {
    for (int h = 0; h < c.shape().num_kv_heads; ++h) {
      const Stream& s = c.stream(0, l, h);
      for (int32_t b : s.blocks) n += !IsOffloaded(b);
      for (int32_t b : s.enc_blocks) n += !IsOffloaded(b);
    }
  }
  return n;
}

// duo in the engine, alone and stacked with a representation (kivi) and a
// placement (offload): streaming heads hold sinks + recent, retrieval heads
// every token, and offload changes no output bit of duo's.
TEST(PolicyEngineTest, DuoComposesWithKiviAndOffload) {
  const auto tokens = Tokens(200);
  const PolicySpec duo{"duo", {{"streaming", "0.1+1.0"}, {"sinks", "4"}, {"recent", "60"}}, "t"};
  auto alone = MakeEngine({duo}, DType::kBF16);
  auto kivi = MakeEngine({duo, PolicySpec{"kivi", {{"group", "16"}, {"residual", "16"}}, "t"}}, DType::kBF16);
  auto off = MakeEngine({duo, PolicySpec{"offload", {{"device_budget", "8192"}, {"keep_recent", "0"}}, "t"}}, DType::kBF16);
  ASSERT_TRUE(alone && kivi && off);
  const std::vector<float> a = TeacherForce(alone.get(), tokens, 40);
  const std::vector<float> k = TeacherForce(kivi.get(), tokens, 40);
  const std::vector<float> o = TeacherForce(off.get(), tokens, 40);
  ASSERT_EQ(a.size(), o.size());
  EXPECT_EQ(std::memcmp(a.data(), o.data(), a.size() * sizeof(float)), 0) << "offload changed duo's output";
  for (Engine* e : {alone.get(), kivi.get(), off.get()}) {
    for (int l = 0; l < 2; ++l) {
      for (int h = 0; h < 2; ++h) {
        const bool streaming = (l == 0 && h == 1) || (l == 1 && h == 0);
        // live tokens: under kivi a streaming head's sealed groups keep their evicted slots, dead
        EXPECT_EQ(e->cache().stream(0, l, h).LiveTokens(), streaming ? 64 : 200) << l << "." << h;
      }
    }
  }
  EXPECT_LT(kivi->Memory().bytes_in_use, alone->Memory().bytes_in_use) << "kivi encoded nothing under duo";
  EXPECT_LT(off->Memory().device_bytes, alone->Memory().device_bytes) << "offload moved nothing under duo";
  bool finite = true;
  for (float x : k) finite = finite && std::isfinite(x);
  EXPECT_TRUE(finite);
}

// Conformance over every registered policy, in the engine, so a new policy is
// checked the day it is registered: with its test_params on a 200-token
// teacher-forced run it is deterministic, it is not a silent no-op (the
// device holds fewer bytes than under full), the pools hold exactly the
// blocks its streams reference (the savings are real), no stream exceeds
// its length, and a placement policy changes no output bit.
TEST(PolicyEngineConformanceTest, EveryRegisteredPolicy) {
  const auto tokens = Tokens(200);
  auto full = MakeEngine({PolicySpec{"full", {}, "t"}}, DType::kBF16);
  const std::vector<float> base = TeacherForce(full.get(), tokens, 40);
  const MemoryStats full_mem = full->Memory();
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    if (info.name == "full") continue;
    SCOPED_TRACE(info.name);
    const PolicySpec spec{info.name, info.test_params, "conformance"};
    auto a = MakeEngine({spec}, DType::kBF16);
    auto b = MakeEngine({spec}, DType::kBF16);
    ASSERT_TRUE(a && b);
    const std::vector<float> la = TeacherForce(a.get(), tokens, 40);
    const std::vector<float> lb = TeacherForce(b.get(), tokens, 40);
    ASSERT_EQ(la.size(), base.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "not deterministic";
    const MemoryStats m = a->Memory();
    EXPECT_EQ(m.bytes_in_use, b->Memory().bytes_in_use);
    if (info.concerns == kConcernRead) {  // the cache stays whole; the step reads less
      EXPECT_EQ(m.bytes_in_use, full_mem.bytes_in_use) << "a read policy changed what is stored";
      EXPECT_EQ(a->reads().kv_dense_bytes, full->reads().kv_dense_bytes);
      EXPECT_LT(a->reads().kv_read_bytes, full->reads().kv_read_bytes) << "a silent no-op: it read every block";
      EXPECT_EQ(full->reads().kv_read_bytes, full->reads().kv_dense_bytes);
      EXPECT_GT(a->reads().decode_steps, 0);
      continue;
    }
    EXPECT_LT(m.device_bytes, full_mem.device_bytes) << "a silent no-op: the device holds as much as under full";
    const KVCache& c = a->cache();
    const int64_t pool_blocks = c.pool().num_used() + (c.encoded_pool() ? c.encoded_pool()->num_used() : 0);
    EXPECT_EQ(pool_blocks, DeviceBlocksReferenced(c)) << "pools hold blocks no stream references";
    for (int l = 0; l < c.shape().num_layers; ++l) {
      for (int h = 0; h < c.shape().num_kv_heads; ++h) EXPECT_LE(c.stream(0, l, h).num_tokens, 200);
    }
    bool finite = true;
    for (float x : la) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite);
    if (info.concerns == kConcernPlacement) {
      EXPECT_EQ(std::memcmp(la.data(), base.data(), la.size() * sizeof(float)), 0) << "placement changed the output";
      EXPECT_EQ(m.bytes_in_use, full_mem.bytes_in_use);
    } else {
      EXPECT_LT(m.bytes_in_use, full_mem.bytes_in_use);
    }
  }
}

}  // namespace
}  // namespace kvlab
