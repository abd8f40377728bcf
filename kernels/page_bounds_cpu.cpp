// PageBoundScores (kernels/page_bounds.h), compiled once per kernel path
// (kernels/cpu_isa.h); kernels/cpu_dispatch.cpp calls the copy. 16 lanes in
// every path (a zmm, two ymm, or a plain array) with the same lane order and
// the same reduction tree, and no multiply-add contraction (the build gives
// this file -ffp-contract=off), so the three copies agree bit for bit.
// A page's bounds row is read once per batch of up to 4 query heads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/page_bounds.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "kernels/cpu_isa_begin.h"

#if KVLAB_ISA_VECTOR == 2 && defined(__GNUC__) && !defined(__clang__)
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() (a
// self-initialised variable) as their pass-through operand, which
// -Wuninitialized reports at every call (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVLAB_PAGE_BOUNDS_DIAGNOSTICS 1
#endif

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace {

constexpr int kLanes = 16;
constexpr int kHeadsPerPass = 4;

// The bounds' storage, as template arguments.
constexpr int kStoreF32 = 0, kStoreF16 = 1, kStoreBF16 = 2;

template <int T>
inline float Widen(const void* row, int c) {
  if (T == kStoreF32) return static_cast<const float*>(row)[c];
  const uint16_t h = static_cast<const uint16_t*>(row)[c];
  return T == kStoreBF16 ? BF16ToF32(h) : F16ToF32(h);
}

// One channel's term max(q * lo, q * hi), as q times the bound its sign
// picks: rounding is monotone, so for lo <= hi the two agree except that a
// zero product may differ in sign, which no sum starting at +0 can see (x + y
// is -0 only if both are). One multiply instead of two and a max.
inline float Term(float q, float lo, float hi) { return std::signbit(q) ? q * lo : q * hi; }

// Bit j of mask i: the sign of q[i * 16 + j] (the avx512 path blends by it).
using SignMask = uint16_t;

#if KVLAB_ISA_VECTOR == 2
using V = __m512;
inline V Zero() { return _mm512_setzero_ps(); }
inline V LoadQ(const float* p) { return _mm512_loadu_ps(p); }
template <int T>
inline V LoadRow(const void* row, int c) {
  if (T == kStoreF32) return _mm512_loadu_ps(static_cast<const float*>(row) + c);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + c));
  if (T == kStoreF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline V AddTerm(V acc, V q, SignMask neg, V lo, V hi) {
  return _mm512_add_ps(acc, _mm512_mul_ps(q, _mm512_mask_blend_ps(neg, hi, lo)));
}
inline __m256 Fold16(V v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
#elif KVLAB_ISA_VECTOR == 1
struct V {
  __m256 a, b;  // lanes 0-7, 8-15
};
inline V Zero() { return V{_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V LoadQ(const float* p) { return V{_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
template <int T>
inline __m256 LoadRow8(const void* row, int c) {
  if (T == kStoreF32) return _mm256_loadu_ps(static_cast<const float*>(row) + c);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + c));
  if (T == kStoreF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <int T>
inline V LoadRow(const void* row, int c) {
  return V{LoadRow8<T>(row, c), LoadRow8<T>(row, c + 8)};
}
inline __m256 AddTerm8(__m256 acc, __m256 q, __m256 lo, __m256 hi) {  // blendv picks by q's sign bit
  return _mm256_add_ps(acc, _mm256_mul_ps(q, _mm256_blendv_ps(hi, lo, q)));
}
inline V AddTerm(V acc, V q, SignMask, V lo, V hi) {
  return V{AddTerm8(acc.a, q.a, lo.a, hi.a), AddTerm8(acc.b, q.b, lo.b, hi.b)};
}
inline __m256 Fold16(V v) { return _mm256_add_ps(v.a, v.b); }
#endif

// The lanes' sum: lane j + lane j + 8, then + 4, + 2, + 1.
#if KVLAB_ISA_VECTOR >= 1
inline float Reduce(const V& v) {
  const __m256 s8 = Fold16(v);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#else
inline float Reduce(const float* l) {
  float r[8];
  for (int j = 0; j < 8; ++j) r[j] = l[j] + l[j + 8];
  for (int j = 0; j < 4; ++j) r[j] = r[j] + r[j + 4];
  for (int j = 0; j < 2; ++j) r[j] = r[j] + r[j + 2];
  return r[0] + r[1];
}
#endif

// The bounds of NH heads (queries q, head after head; neg, their sign
// masks, d / 16 a head) over one page.
template <int T, int NH>
inline void PassHeads(const float* q, const SignMask* neg, int d, const void* lo_row, const void* hi_row, float* bound) {
  const int chunks = d / kLanes;
  int c = 0;
#if KVLAB_ISA_VECTOR >= 1
  V acc[NH];
  for (int h = 0; h < NH; ++h) acc[h] = Zero();
  for (int i = 0; i < chunks; ++i, c += kLanes) {
    const V lo = LoadRow<T>(lo_row, c), hi = LoadRow<T>(hi_row, c);
    for (int h = 0; h < NH; ++h) acc[h] = AddTerm(acc[h], LoadQ(q + h * d + c), neg[h * chunks + i], lo, hi);
  }
#else
  // Plain lane arrays, written for the compiler's own SSE2 vectors, in the
  // max form (maxps), which gives Term's bits.
  (void)neg;
  float acc[NH][kLanes] = {};
  float lo[kLanes], hi[kLanes];
  for (int i = 0; i < chunks; ++i, c += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lo[j] = Widen<T>(lo_row, c + j);
      hi[j] = Widen<T>(hi_row, c + j);
    }
    for (int h = 0; h < NH; ++h) {
      const float* qh = q + h * d + c;
      for (int j = 0; j < kLanes; ++j) {
        const float x = qh[j] * lo[j], y = qh[j] * hi[j];
        acc[h][j] += x > y ? x : y;
      }
    }
  }
#endif
  for (int h = 0; h < NH; ++h) bound[h] = Reduce(acc[h]);
  for (; c < d; ++c) {
    const float lo = Widen<T>(lo_row, c), hi = Widen<T>(hi_row, c);
    for (int h = 0; h < NH; ++h) bound[h] += Term(q[h * d + c], lo, hi);
  }
}

template <int T>
void Scores(const PageBoundsArgs& a, float* scores) {
  const int d = a.head_dim, g = a.num_queries;
  const int64_t row = static_cast<int64_t>(d) * (T == kStoreF32 ? 4 : 2);
  const uint8_t* lo = static_cast<const uint8_t*>(a.key_min);
  const uint8_t* hi = static_cast<const uint8_t*>(a.key_max);
  const int chunks = d / kLanes;
  std::vector<SignMask> neg(static_cast<size_t>(g) * static_cast<size_t>(chunks), 0);
  for (int h = 0; h < g; ++h) {
    for (int i = 0; i < chunks; ++i) {
      for (int j = 0; j < kLanes; ++j) {
        if (std::signbit(a.queries[static_cast<int64_t>(h) * d + i * kLanes + j])) {
          neg[static_cast<size_t>(h * chunks + i)] |= static_cast<SignMask>(1u << j);
        }
      }
    }
  }
  float bound[kHeadsPerPass];
  for (int64_t b = 0; b < a.num_pages; ++b) {
    const void* lo_row = lo + b * row;
    const void* hi_row = hi + b * row;
    float out = 0.0f;
    for (int h0 = 0; h0 < g; h0 += kHeadsPerPass) {
      const int n = std::min(kHeadsPerPass, g - h0);
      const float* q = a.queries + static_cast<int64_t>(h0) * d;
      const SignMask* m = neg.data() + static_cast<size_t>(h0) * static_cast<size_t>(chunks);
      switch (n) {
        case 4: PassHeads<T, 4>(q, m, d, lo_row, hi_row, bound); break;
        case 3: PassHeads<T, 3>(q, m, d, lo_row, hi_row, bound); break;
        case 2: PassHeads<T, 2>(q, m, d, lo_row, hi_row, bound); break;
        default: PassHeads<T, 1>(q, m, d, lo_row, hi_row, bound); break;
      }
      for (int i = 0; i < n; ++i) {
        out = h0 + i == 0 ? bound[i] : (a.sum_heads ? out + bound[i] : std::max(out, bound[i]));
      }
    }
    scores[b] = out;
  }
}

}  // namespace

void PageBoundScores(const PageBoundsArgs& a, float* scores) {
  switch (a.dtype) {
    case DType::kF32: return Scores<kStoreF32>(a, scores);
    case DType::kF16: return Scores<kStoreF16>(a, scores);
    case DType::kBF16: return Scores<kStoreBF16>(a, scores);
  }
}

}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#ifdef KVLAB_PAGE_BOUNDS_DIAGNOSTICS
#pragma GCC diagnostic pop
#endif

#include "kernels/cpu_isa_end.h"
