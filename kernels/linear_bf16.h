// A linear layer's product for weights kept in bfloat16: y = x · wᵀ with fp32
// activations, weights widened to fp32 as they are read and fp32 arithmetic,
// so the result is the fp32 product of the stored weights (no activation
// rounding) while the weights cost 2 bytes each to read. The model calls it
// for the few rows of a decode step; prefill's many rows go to BLAS.
#pragma once

#include <cstdint>

namespace kvlab {

// x: fp32 [rows, k] row-major; w: bfloat16 bits [n, k] row-major; y: fp32
// [rows, n] row-major (overwritten). Parallel over w's rows (OpenMP).
// REQUIRES: rows >= 1, k >= 1, n >= 1; no overlap between y and x or w.
void LinearBf16(const float* x, int64_t rows, int64_t k, const uint16_t* w, int64_t n, float* y);

// Widens count bfloat16 values to fp32 (exact: bfloat16 is fp32's top half);
// OpenMP-parallel for large counts.
void WidenBf16(const uint16_t* src, int64_t count, float* dst);

}  // namespace kvlab
