#include "core/model/matmul16.h"

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
  const int64_t chunk = std::max<int64_t>(1, widen_chunk_bytes / (K * 4));
  at::Tensor wide = at::empty({std::min(chunk, N), K}, x2.options());
  if (chunk >= N) {
    Widen(w, wide);
    return AddBias(at::linear(x2, wide).view(out_shape), b);
  }
  at::Tensor y = at::empty({rows, N}, x2.options());
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    at::Tensor wn = wide.narrow(0, 0, n);
    Widen(w.narrow(0, r0, n), wn);
    y.narrow(1, r0, n).copy_(at::linear(x2, wn));
  }
  return AddBias(y.view(out_shape), b);
}

}  // namespace kvlab
