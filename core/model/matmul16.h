// Products with weights kept in a 16-bit dtype (bf16 or f16 checkpoints):
// the model's Linear calls MatMul16 for every non-fp32 weight. Internal to
// core/model; the choice it makes is measured by matmul_bench and described
// in docs/performance.md ("16-bit weights").
#pragma once

#include <ATen/ATen.h>

namespace kvlab {

// x [.., K] fp32, w [N, K] bf16 or f16, b [N] fp32 or undefined; returns fp32 [.., N].
// math16 false (the default of the model): fp32 arithmetic on the stored
// weights' exact values — on the CPU, a decode step's few rows through
// LinearBf16 (weights widened in registers, read at 2 bytes each), more rows
// through BLAS on the weights widened a chunk at a time. math16 true: x is
// rounded to w's dtype and libtorch multiplies in it (CUDA's tensor cores;
// on CPUs with AVX512-BF16/AMX, oneDNN), about 3 significant digits.
// widen_chunk_bytes: fp32 bytes of weight rows one thread widens and
// multiplies at once on the many-rows path (a share of a core's L2, so the
// widened rows are read back from cache; enough rows for BLAS to run well);
// tests make it small to cross chunks.
constexpr int64_t kWidenChunkBytes = int64_t{1} << 20;
at::Tensor MatMul16(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool math16,
                    int64_t widen_chunk_bytes = kWidenChunkBytes);

// Rows of x at or below which the CPU's fp32 path uses LinearBf16.
constexpr int64_t kMatMul16SmallRows = 8;

}  // namespace kvlab
