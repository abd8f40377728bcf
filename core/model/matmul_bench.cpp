// The products of a model with 16-bit weights, at Llama-3.1-8B's MLP shape
// (w [14336, 4096]), for the ways a CPU can compute them:
//   F32Weights      at::linear on fp32 weights (an f32 checkpoint: twice the memory)
//   WidenEachCall   at::linear on the bf16 weights widened whole for each call
//                   (per-layer conversion)
//   MatMul16F32     kvlab's fp32 arithmetic on bf16 weights (matmul16.h: a
//                   decode step's rows through LinearBf16, more through BLAS on
//                   chunks widened 1 MiB at a time per thread) — the default
//   MatMul16Bf16    activations rounded to bf16, libtorch's bf16 product
//                   (--matmul weights)
// The argument is the rows of x (1: batch-1 decode; 512: a prefill chunk).
// Each call rotates over distinct weight copies (>= 1 GiB of bf16 in all, above
// a 480 MiB L3) so the weights come from memory, as in a model step.
// Counters: w_read = bytes of stored weights per second; frac_bw = w_read /
// read_bw (the all-core read bandwidth, measured at start-up).
// Run: ./<build dir>/matmul_bench --benchmark_min_time=1 --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#include <omp.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "core/model/matmul16.h"
#include "kernels/bench_memory.h"
#include "kernels/linear_bf16.h"

namespace kvlab {
namespace {

constexpr int64_t kN = 14336, kK = 4096;
constexpr int64_t kCopies = 10;  // 10 x 117 MB of bf16

const std::vector<at::Tensor>& Weights(at::ScalarType st) {
  static std::vector<at::Tensor> bf16, f32;
  std::vector<at::Tensor>& v = st == at::kFloat ? f32 : bf16;
  if (v.empty()) {
    at::manual_seed(0);
    // fp32 copies rotate over half as many (2x the bytes each).
    for (int64_t i = 0; i < (st == at::kFloat ? kCopies / 2 : kCopies); ++i) {
      v.push_back((at::randn({kN, kK}) * 0.02).to(st).contiguous());
    }
  }
  return v;
}

void Run(benchmark::State& state, at::ScalarType stored, const std::function<at::Tensor(const at::Tensor&,
                                                                                          const at::Tensor&)>& f) {
  const std::vector<at::Tensor>& ws = Weights(stored);
  at::Tensor x = at::randn({state.range(0), kK});
  size_t i = 0;
  for (auto _ : state) {
    at::Tensor y = f(x, ws[i++ % ws.size()]);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  const double bytes = static_cast<double>(kN * kK * at::elementSize(stored)) * static_cast<double>(state.iterations());
  state.counters["w_read"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["frac_bw"] = benchmark::Counter(bytes / ReadBandwidth(), benchmark::Counter::kIsRate);
}

void BM_F32Weights(benchmark::State& s) {
  Run(s, at::kFloat, [](const at::Tensor& x, const at::Tensor& w) { return at::linear(x, w); });
}
void BM_WidenEachCall(benchmark::State& s) {
  Run(s, at::kBFloat16, [](const at::Tensor& x, const at::Tensor& w) { return at::linear(x, w.to(at::kFloat)); });
}
void BM_MatMul16F32(benchmark::State& s) {
  Run(s, at::kBFloat16, [](const at::Tensor& x, const at::Tensor& w) { return MatMul16(x, w, at::Tensor(), false); });
}
void BM_MatMul16Bf16(benchmark::State& s) {
  Run(s, at::kBFloat16, [](const at::Tensor& x, const at::Tensor& w) { return MatMul16(x, w, at::Tensor(), true); });
}

// LinearBf16 alone at every row count (MatMul16 uses it up to
// kMatMul16SmallRows): where BLAS on widened chunks starts to win.
void BM_LinearBf16(benchmark::State& s) {
  Run(s, at::kBFloat16, [](const at::Tensor& x, const at::Tensor& w) {
    at::Tensor y = at::empty({x.size(0), w.size(0)});
    LinearBf16(x.data_ptr<float>(), x.size(0), x.size(1), reinterpret_cast<const uint16_t*>(w.data_ptr()), w.size(0),
               y.data_ptr<float>());
    return y;
  });
}

void Rows(benchmark::internal::Benchmark* b) {
  for (int64_t r : {1, 4, 8, 16, 32, 64, 512}) b->Arg(r);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_F32Weights)->Apply(Rows);
BENCHMARK(BM_WidenEachCall)->Apply(Rows);
BENCHMARK(BM_MatMul16F32)->Apply(Rows);
BENCHMARK(BM_MatMul16Bf16)->Apply(Rows);
BENCHMARK(BM_LinearBf16)->Apply(Rows);

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return kvlab::BenchMain(argc, argv, /*rotate=*/false);
}
