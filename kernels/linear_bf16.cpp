#include "kernels/linear_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

// Compiled once per kernel path (kernels/cpu_isa.h): the loops below are
// written for the compiler to vectorise, 8 lanes in the avx2 copy and 16 in
// the avx512 one. kernels/cpu_dispatch.cpp calls the copy.
#define KVLAB_ISA_WIDE_LOOPS 1
#include "kernels/cpu_isa_begin.h"

namespace kvlab {
namespace KVLAB_ISA_NS {

namespace {

inline float Widen(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Lanes of the partial sums: two 16-wide vectors' worth, so consecutive
// FMAs do not wait on each other (the loop is written for the compiler to
// vectorise; its order of additions is fixed, so results do not depend on
// the thread count).
constexpr int kLanes = 32;

inline float Dot(const float* __restrict x, const float* __restrict w, int64_t k) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * w[i + l];
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < k; ++i) s += x[i] * w[i];
  return s;
}

inline float DotBf16(const float* __restrict x, const uint16_t* __restrict w, int64_t k) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * Widen(w[i + l]);
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < k; ++i) s += x[i] * Widen(w[i]);
  return s;
}

}  // namespace

void WidenBf16(const uint16_t* src, int64_t count, float* dst) {
  // Parallel only when it pays (a 64 MiB chunk of weights, not one row).
#pragma omp parallel for schedule(static) if (count >= (int64_t{1} << 20))
  for (int64_t i = 0; i < count; ++i) dst[i] = Widen(src[i]);
}

void LinearBf16(const float* x, int64_t rows, int64_t k, const uint16_t* w, int64_t n, float* y) {
  // One row of x: each weight is used once, widened in registers. More rows:
  // each weight row is widened once into a per-thread buffer (in L1/L2) and
  // dotted with every row of x.
#pragma omp parallel
  {
    std::vector<float> row(rows > 1 ? static_cast<size_t>(k) : 0);
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* wj = w + j * k;
      if (rows == 1) {
        y[j] = DotBf16(x, wj, k);
        continue;
      }
      for (int64_t i = 0; i < k; ++i) row[static_cast<size_t>(i)] = Widen(wj[i]);
      for (int64_t r = 0; r < rows; ++r) y[r * n + j] = Dot(x + r * k, row.data(), k);
    }
  }
}

}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#include "kernels/cpu_isa_end.h"
