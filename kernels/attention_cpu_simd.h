// 8-lane fp32 vectors (AVX2/FMA/F16C in the avx2 and avx512 copies, portable
// loops in the scalar one: kernels/cpu_isa_begin.h) and loads of 16 stored K/V elements as fp32, for the CPU
// attention kernels in kernels/ (not a public API); everything here is inline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/base/dtype.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#ifndef KVLAB_ISA_NS
#error "include kernels/cpu_isa_begin.h before this per-path header"
#endif
#undef KVLAB_ATTN_AVX2
#if KVLAB_ISA_VECTOR >= 1
#define KVLAB_ATTN_AVX2 1
#endif

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace cpu_simd {

#if defined(__GNUC__)
#define KVLAB_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define KVLAB_ALWAYS_INLINE inline
#endif

// ---- 8-lane float vectors: AVX2 or portable loops ----
#ifdef KVLAB_ATTN_AVX2
using F8 = __m256;
inline F8 Zero() { return _mm256_setzero_ps(); }
inline F8 Set1(float x) { return _mm256_set1_ps(x); }
inline F8 Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, F8 v) { _mm256_storeu_ps(p, v); }
inline F8 Add(F8 a, F8 b) { return _mm256_add_ps(a, b); }
inline F8 Sub(F8 a, F8 b) { return _mm256_sub_ps(a, b); }
inline F8 Mul(F8 a, F8 b) { return _mm256_mul_ps(a, b); }
inline F8 Max(F8 a, F8 b) { return _mm256_max_ps(a, b); }
inline F8 Fma(F8 a, F8 b, F8 c) { return _mm256_fmadd_ps(a, b, c); }
inline float HSum(F8 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline float HMax(F8 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
// Lane i = sum of the lanes of a[i]; one transpose-and-add tree for 8 vectors.
inline F8 HSum8(const F8* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
// 2^x for x <= 0: Cephes exp2f polynomial on [-0.5, 0.5] (relative error about
// 2e-7). x < -126, -inf included, gives exactly 0 so masked rows carry no weight.
inline F8 Exp2(F8 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 xi = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, xi);
  __m256 poly = Set1(1.535336188319500e-4f);
  poly = Fma(poly, f, Set1(1.339887440266574e-3f));
  poly = Fma(poly, f, Set1(9.618437357674640e-3f));
  poly = Fma(poly, f, Set1(5.550332471162809e-2f));
  poly = Fma(poly, f, Set1(2.402264791363012e-1f));
  poly = Fma(poly, f, Set1(6.931472028550421e-1f));
  poly = Fma(poly, f, Set1(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(poly, _mm256_castsi256_ps(e)), keep);
}
inline void Prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
// bf16 loads split each 16-element chunk into its even and odd elements (one
// shift and one mask, no cross-lane shuffle); queries are permuted to match.
constexpr bool kBF16EvenOdd = true;
#else
struct F8 {
  float x[8];
};
inline F8 Zero() { return F8{}; }
inline F8 Set1(float v) {
  F8 r;
  for (float& e : r.x) e = v;
  return r;
}
inline F8 Load(const float* p) {
  F8 r;
  std::memcpy(r.x, p, sizeof(r.x));
  return r;
}
inline void Store(float* p, F8 v) { std::memcpy(p, v.x, sizeof(v.x)); }
#define KVLAB_F8_LANEWISE(name, expr)      \
  inline F8 name(F8 a, F8 b) {             \
    F8 r;                                  \
    for (int i = 0; i < 8; ++i) r.x[i] = expr; \
    return r;                              \
  }
KVLAB_F8_LANEWISE(Add, a.x[i] + b.x[i])
KVLAB_F8_LANEWISE(Sub, a.x[i] - b.x[i])
KVLAB_F8_LANEWISE(Mul, a.x[i] * b.x[i])
KVLAB_F8_LANEWISE(Max, std::max(a.x[i], b.x[i]))
#undef KVLAB_F8_LANEWISE
inline F8 Fma(F8 a, F8 b, F8 c) {
  for (int i = 0; i < 8; ++i) c.x[i] += a.x[i] * b.x[i];
  return c;
}
inline float HSum(F8 v) {
  float s = 0.0f;
  for (float e : v.x) s += e;
  return s;
}
inline float HMax(F8 v) {
  float m = v.x[0];
  for (float e : v.x) m = std::max(m, e);
  return m;
}
inline F8 HSum8(const F8* a) {
  F8 r;
  for (int i = 0; i < 8; ++i) r.x[i] = HSum(a[i]);
  return r;
}
inline F8 Exp2(F8 x) {
  for (float& e : x.x) e = e < -126.0f ? 0.0f : std::exp2(e);
  return x;
}
inline void Prefetch(const uint8_t* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}
constexpr bool kBF16EvenOdd = false;
#endif

// 8 fp16 in memory order (scales and zero points of encoded blocks).
inline F8 LoadHalf8(const uint16_t* p) {
#ifdef KVLAB_ATTN_AVX2
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  float f[8];
  for (int i = 0; i < 8; ++i) f[i] = F16ToF32(p[i]);
  return Load(f);
#endif
}

// ---- storage dtypes: 16 stored elements -> two F8 in "lane order" ----
template <DType DT>
struct Storage;

template <>
struct Storage<DType::kF32> {
  static constexpr int kBytes = 4;
  static constexpr int StoredIndex(int lane) { return lane; }
  static void Load16(const uint8_t* p, F8* lo, F8* hi) {
    *lo = Load(reinterpret_cast<const float*>(p));
    *hi = Load(reinterpret_cast<const float*>(p) + 8);
  }
};

template <>
struct Storage<DType::kF16> {
  static constexpr int kBytes = 2;
  static constexpr int StoredIndex(int lane) { return lane; }
  static void Load16(const uint8_t* p, F8* lo, F8* hi) {
#ifdef KVLAB_ATTN_AVX2
    *lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
#else
    float f[16];
    ConvertToF32(DType::kF16, p, f, 16);
    *lo = Load(f);
    *hi = Load(f + 8);
#endif
  }
};

template <>
struct Storage<DType::kBF16> {
  static constexpr int kBytes = 2;
  static constexpr int StoredIndex(int lane) {
    return !kBF16EvenOdd ? lane : lane < 8 ? 2 * lane : 2 * (lane - 8) + 1;
  }
  static void Load16(const uint8_t* p, F8* lo, F8* hi) {
#ifdef KVLAB_ATTN_AVX2
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *hi = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
#else
    float f[16];
    ConvertToF32(DType::kBF16, p, f, 16);
    *lo = Load(f);
    *hi = Load(f + 8);
#endif
  }
};

}  // namespace cpu_simd
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab
