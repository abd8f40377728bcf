// The engine on device "cuda" against the same engine on the CPU: the same
// script of steps (chunked prefill, ragged batches mixing prefill chunks and
// decode tokens, batched decode) gives the same logits within a tolerance
// set by the cache's storage dtype, and greedy generation the same tokens.
// Two binaries run this file: cuda_engine_test (the real kernels and
// libtorch's CUDA tensors; skips without a GPU or a CUDA libtorch) and
// cuda_engine_emu_test (the kernels on the CUDA emulation, tensors on the
// CPU: runs everywhere, slowly, hence the tiny model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/base/temp_dir_test_util.h"
#include "core/attention/cuda_backend.h"
#include "core/engine/engine.h"

namespace kvlab {
namespace {

// 2 layers, 4 query heads over 2 KV heads (GQA 2), head_dim 64 (the decode
// kernel serves 64 and 128), byte vocabulary; random weights written once.
const std::string& TinyModelDir() {
  static const std::string dir = [] {
    ModelConfig c;
    EXPECT_TRUE(PresetConfig("small", &c).ok());
    c.name = "tiny-cuda-test";
    c.num_hidden_layers = 2;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 64;
    const std::string d = ProcessTempDir() + "/tiny-cuda-test";
    // A larger init than the default 0.02 so that attention is far from uniform.
    const Status s = WriteRandomCheckpoint(c, /*seed=*/11, /*init_std=*/0.1, d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

#define SKIP_WITHOUT_CUDA()                                   \
  do {                                                        \
    const Status st_ = CudaDeviceStatus("device \"cuda\"");   \
    if (!st_.ok()) GTEST_SKIP() << st_.message();             \
  } while (0)

EngineOptions Options(const std::string& device, DType dtype) {
  EngineOptions o;
  o.model = TinyModelDir();
  o.device = device;
  o.kv_dtype = dtype;
  o.block_size = 16;
  o.max_seqs = 2;
  o.max_context = 160;
  o.prefill_chunk = 24;
  o.num_threads = 1;
  return o;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + salt * 101 + 11) % 256));
  return t;
}

// Every step's logits (all tokens) for a fixed script on one engine.
struct Trace {
  std::vector<std::vector<std::vector<float>>> logits;  // [step][chunk][T * vocab]
  std::vector<std::vector<int32_t>> positions;         // kept positions of every stream after each step
  int64_t encoded_slots = 0, slots = 0;                // at the end, over all streams
};

Status RunScript(const EngineOptions& o, const std::vector<PolicySpec>& policies, Trace* trace) {
  std::unique_ptr<Engine> e;
  KVLAB_RETURN_IF_ERROR(Engine::Create(o, policies, &e));
  KVLAB_RETURN_IF_ERROR(e->AddSequence(0));
  KVLAB_RETURN_IF_ERROR(e->AddSequence(1));
  const std::vector<int32_t> a = Tokens(80, 1), b = Tokens(40, 2);
  std::vector<std::vector<SeqChunk>> steps = {
      {{0, {a.begin(), a.begin() + 21}}},                                   // prefill, rows across two blocks
      {{0, {a.begin() + 21, a.begin() + 50}}, {1, {b.begin(), b.begin() + 5}}},  // ragged: two prefill chunks
      {{1, {b.begin() + 5, b.begin() + 9}}, {0, {a[50]}}},                   // a prefill chunk beside a decode token
      {{0, {a.begin() + 51, a.begin() + 70}}},                              // after sealing (KIVI): rows over both segments
  };
  for (int i = 0; i < 5; ++i) steps.push_back({{0, {a[70 + i]}}, {1, {b[9 + i]}}});  // batched decode
  const CacheShape& shape = e->cache().shape();
  for (const auto& chunks : steps) {
    std::vector<std::vector<float>> logits;
    KVLAB_RETURN_IF_ERROR(e->Forward(chunks, /*all_logits=*/true, &logits));
    trace->logits.push_back(logits);
    std::vector<int32_t> pos;
    for (int64_t seq : {0, 1}) {
      for (int l = 0; l < shape.num_layers; ++l) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          const Stream& s = e->cache().stream(seq, l, h);
          pos.insert(pos.end(), s.positions.begin(), s.positions.end());
          pos.push_back(-1);
        }
      }
    }
    trace->positions.push_back(pos);
  }
  for (int64_t seq : {0, 1}) {
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        trace->encoded_slots += e->cache().stream(seq, l, h).num_encoded;
        trace->slots += e->cache().stream(seq, l, h).num_tokens;
      }
    }
  }
  return Status::OK();
}

// Tolerance atol + rtol * |ref| by storage dtype: the kernels accumulate in
// fp32 in another order than the CPU's, and one K/V value rounded the other
// way in 16-bit storage moves the next layer.
void ExpectClose(const Trace& cpu, const Trace& gpu, DType dtype, const std::string& what) {
  const double atol = dtype == DType::kF32 ? 1e-4 : 2e-3;
  const double rtol = dtype == DType::kF32 ? 1e-3 : 2e-2;
  ASSERT_EQ(cpu.logits.size(), gpu.logits.size());
  double worst = 0;
  for (size_t st = 0; st < cpu.logits.size(); ++st) {
    EXPECT_EQ(cpu.positions[st], gpu.positions[st]) << what << ": kept slots differ after step " << st;
    ASSERT_EQ(cpu.logits[st].size(), gpu.logits[st].size());
    for (size_t c = 0; c < cpu.logits[st].size(); ++c) {
      const std::vector<float>& r = cpu.logits[st][c];
      const std::vector<float>& g = gpu.logits[st][c];
      ASSERT_EQ(r.size(), g.size());
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        const double err = std::fabs(static_cast<double>(r[i]) - g[i]);
        worst = std::max(worst, err);
        if (!(err <= atol + rtol * std::fabs(r[i]))) {
          if (bad++ == 0) first = i;
        }
      }
      EXPECT_EQ(bad, 0u) << what << ": step " << st << " chunk " << c << ": " << bad << " logits off, first at " << first
                         << ": cpu " << r[first] << " cuda " << g[first];
    }
  }
  std::printf("%s: max |cpu - cuda| logit difference %.3g\n", what.c_str(), worst);
}

Trace CompareScript(DType dtype, const std::vector<PolicySpec>& policies, const std::string& what) {
  Trace cpu, gpu;
  Status s = RunScript(Options("cpu", dtype), policies, &cpu);
  EXPECT_TRUE(s.ok()) << s.message();
  s = RunScript(Options("cuda", dtype), policies, &gpu);
  EXPECT_TRUE(s.ok()) << s.message();
  if (s.ok()) ExpectClose(cpu, gpu, dtype, what);
  return gpu;
}

TEST(CudaEngineTest, FullMatchesCpuBf16) {
  SKIP_WITHOUT_CUDA();
  CompareScript(DType::kBF16, {PolicySpec{"full", {}, "t"}}, "full bf16");
}

TEST(CudaEngineTest, FullMatchesCpuF32) {
  SKIP_WITHOUT_CUDA();
  CompareScript(DType::kF32, {PolicySpec{"full", {}, "t"}}, "full f32");
}

// Sealing (EncodeSealKivi) after the second step, and the encoded segment
// read by decode and by the prefill rows of the fourth step.
TEST(CudaEngineTest, KiviMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const Trace t = CompareScript(
      DType::kBF16, {PolicySpec{"kivi", {{"bits", "2"}, {"group", "32"}, {"residual", "16"}}, "t"}}, "kivi-2 bf16");
  EXPECT_GT(t.encoded_slots, 0) << "the script sealed nothing";
}

// Selection: per-slot attention from the kernel (slot_attn) and compaction of
// the device's rows; the same slots are kept.
TEST(CudaEngineTest, H2OMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const Trace t = CompareScript(DType::kF32, {PolicySpec{"h2o", {{"budget", "24"}}, "t"}}, "h2o f32");
  EXPECT_LE(t.slots, 2 * 2 * 2 * 24) << "the script evicted nothing";
}

// Sliding windows (layer 0: 8 positions, layer 1 global): first_visible in
// decode and in the prefill rows, and the leading blocks freed on the device
// as on the CPU; alone, and under h2o (selection within the window).
TEST(CudaEngineTest, SlidingWindowMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (const std::vector<PolicySpec>& stack :
       {std::vector<PolicySpec>{PolicySpec{"full", {}, "t"}}, {PolicySpec{"h2o", {{"budget", "24"}}, "t"}}}) {
    Trace cpu, gpu;
    EngineOptions oc = Options("cpu", DType::kF32), og = Options("cuda", DType::kF32);
    oc.layer_sliding_window = og.layer_sliding_window = {8, 0};
    Status s = RunScript(oc, stack, &cpu);
    ASSERT_TRUE(s.ok()) << s.message();
    s = RunScript(og, stack, &gpu);
    ASSERT_TRUE(s.ok()) << s.message();
    ExpectClose(cpu, gpu, DType::kF32, "window 8, " + stack[0].name);
    // Fewer slots than without the window (sequences of 75 and 14 tokens, 2
    // layers of 2 heads; h2o: 24 a stream at most).
    const int64_t no_window = stack[0].name == "full" ? 2 * 2 * (75 + 14) : 2 * 2 * (24 + 14);
    EXPECT_LT(gpu.slots, no_window);
  }
}

TEST(CudaEngineTest, GreedyGenerationMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  GenerateOptions go;
  go.max_new_tokens = 6;
  go.stop_at_eos = false;
  const std::vector<std::vector<int32_t>> prompts = {Tokens(30, 3), Tokens(9, 4)};
  std::vector<std::vector<GenerateResult>> results(2);
  int i = 0;
  for (const char* device : {"cpu", "cuda"}) {
    std::unique_ptr<Engine> e;
    Status s = Engine::Create(Options(device, DType::kBF16), {PolicySpec{"full", {}, "t"}}, &e);
    ASSERT_TRUE(s.ok()) << s.message();
    GenerateStats stats;
    s = e->Generate(prompts, go, &results[static_cast<size_t>(i++)], &stats);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(e->Memory().blocks_in_use, 0);
  }
  for (size_t p = 0; p < prompts.size(); ++p) EXPECT_EQ(results[0][p].tokens, results[1][p].tokens) << "prompt " << p;
}

// What the CUDA path does not implement is refused at Create, naming it.
TEST(CudaEngineTest, RefusesWhatItDoesNotImplement) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    std::vector<PolicySpec> stack;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{PolicySpec{"sink", {}, "t"}}, "'sink'"},  // positions="cache": rotation at read time
      {{PolicySpec{"offload", {}, "t"}}, "'offload'"},
      {{PolicySpec{"quant", {{"format", "int8"}}, "t"}}, "'quant'"},
      {{PolicySpec{"kivi", {{"key_axis", "token"}}, "t"}}, "'kivi'"},
      {{PolicySpec{"window", {{"positions", "original"}, {"window", "64"}}, "t"}, PolicySpec{"kivi", {}, "t"}}, "'window'"},
      {{PolicySpec{"snapkv", {{"budget", "64"}, {"window", "16"}}, "t"}}, "'snapkv'"},
      {{PolicySpec{"pyramidkv", {{"budget", "64"}, {"window", "16"}}, "t"}}, "'pyramidkv'"},
      {{PolicySpec{"adakv", {{"budget", "64"}, {"window", "16"}}, "t"}}, "'adakv'"},
      {{PolicySpec{"tova", {{"budget", "64"}}, "t"}}, "'tova'"},
      {{PolicySpec{"key-norm", {{"budget", "64"}}, "t"}}, "'key-norm'"},
      {{PolicySpec{"duo", {{"streaming", "0.0"}, {"sinks", "4"}, {"recent", "60"}}, "t"}}, "'duo'"},
      {{PolicySpec{"think", {}, "t"}}, "'think'"},  // kThink blocks: no device decode or seal
      {{PolicySpec{"quest", {{"token_budget", "64"}}, "t"}}, "'quest'"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Engine> e;
    const Status s = Engine::Create(Options("cuda", DType::kBF16), c.stack, &e);
    EXPECT_FALSE(s.ok()) << c.expect;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("cuda"), std::string::npos) << s.message();
  }
  EngineOptions o = Options("cuda", DType::kBF16);
  o.model = "small";  // head_dim 32
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("head_dim 32"), std::string::npos) << s.message();
  o = Options("cuda", DType::kBF16);
  o.prefix_caching = true;  // with selection: copy-on-write of shared blocks
  s = Engine::Create(o, {PolicySpec{"h2o", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("prefix caching"), std::string::npos) << s.message();
  o = Options("cuda", DType::kBF16);
  o.attention = "reference";
  s = Engine::Create(o, {PolicySpec{"full", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("reference"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
