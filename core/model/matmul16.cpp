#include "core/model/matmul16.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "kernels/linear_bf16.h"

namespace kvlab {

namespace {

at::Tensor AddBias(at::Tensor y, const at::Tensor& b) { return b.defined() ? y.add_(b) : y; }

// dst (fp32, contiguous, w's shape) = w widened. LinearBf16's widening for
// bf16 (libtorch 1.13's bf16 -> fp32 copy runs at a tenth of the memory's
// speed, matmul_bench's WidenEachCall); libtorch's copy for f16.
void Widen(const at::Tensor& w, at::Tensor& dst) {
  if (w.scalar_type() == at::kBFloat16 && w.is_contiguous()) {
    WidenBf16(reinterpret_cast<const uint16_t*>(w.data_ptr()), w.numel(), dst.data_ptr<float>());
  } else {
    dst.copy_(w);
  }
}

}  // namespace

at::Tensor MatMul16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool math16,
                    int64_t widen_chunk_bytes) {
  if (math16) {
    at::Tensor y = at::linear(x.to(w.scalar_type()), w).to(at::kFloat);
    return AddBias(y, b);
  }
  if (!w.device().is_cpu()) return AddBias(at::linear(x, w.to(at::kFloat)), b);
  const int64_t K = w.size(1), N = w.size(0);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = N;
  const at::Tensor x2 = x.reshape({-1, K}).contiguous();
  const int64_t rows = x2.size(0);
  if (rows <= kMatMul16SmallRows && w.scalar_type() == at::kBFloat16 && w.is_contiguous()) {
    at::Tensor y = at::empty({rows, N}, x2.options());
    LinearBf16(x2.data_ptr<float>(), rows, K, reinterpret_cast<const uint16_t*>(w.data_ptr()), N,
               y.data_ptr<float>());
    return AddBias(y.view(out_shape), b);
  }
  // Chunks of weight rows small enough to stay in a core's L2 once widened,
  // one chunk per task: each thread widens its chunk into its own buffer and
  // multiplies it with BLAS single-threaded (libtorch runs ops inside
  // parallel_for serially), so the widened weights are never written to
  // memory and the row tile of x is shared by every chunk.
  // Many rows (a prefill chunk): larger chunks, which BLAS multiplies more
  // efficiently, while widening stays a small share of the arithmetic.
  const int64_t scale = std::clamp<int64_t>(rows / 32, 1, 16);
  // At least one chunk per thread: a matrix smaller than threads x chunk (a
  // GQA k/v projection at 512 rows) would otherwise run on one core.
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t chunk = std::clamp<int64_t>((N + threads - 1) / threads, 1,
                                            std::max<int64_t>(1, widen_chunk_bytes * scale / (K * 4)));
  const int64_t num_chunks = (N + chunk - 1) / chunk;
  at::Tensor y = at::empty({rows, N}, x2.options());
  at::parallel_for(0, num_chunks, 1, [&](int64_t c0, int64_t c1) {
    at::Tensor wide = at::empty({std::min(chunk, N), K}, x2.options());
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * chunk, n = std::min(chunk, N - r0);
      at::Tensor wn = wide.narrow(0, 0, n);
      Widen(w.narrow(0, r0, n), wn);
      y.narrow(1, r0, n).copy_(at::linear(x2, wn));
    }
  });
  return AddBias(y.view(out_shape), b);
}

}  // namespace kvlab
