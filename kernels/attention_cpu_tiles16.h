// 16-lane (zmm) versions of attention_cpu_tiles.h's score and value loops,
// for the avx512 copies of the encoded kernels (attention_kivi_cpu.cpp's KIVI
// codes, attention_quant_cpu.cpp's 8-bit codes). Each 16-element chunk of a
// row is one zmm instead of two 8-lane halves: half the FMAs, and the row
// loader unpacks 16 codes at once (L::Load16Z, lanes 0-7 = Load16's lo,
// 8-15 = its hi). Queries, accumulators, weights and lane scales are the same
// arrays in the same lane order as the 8-lane loops', read 16 floats at a
// time, so the rest of a kernel (softmax, epilogues, plain blocks) is shared.
// Empty outside the avx512 copy. Internal to kernels/; everything is inline.
#pragma once

#include "kernels/attention_cpu_tiles.h"

#if KVLAB_ISA_VECTOR >= 2

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() as their
// pass-through operand, which -W(maybe-)uninitialized reports wherever they
// are inlined (GCC bug 105593, fixed in 13; as in page_bounds_cpu.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace cpu_tiles16 {

using namespace cpu_simd;   // NOLINT: the vector vocabulary of these kernels
using namespace cpu_tiles;  // NOLINT: PrefetchStream, ValueEpilogue

inline __m256 Fold8(__m512 a) { return _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)); }

// raw[(n * T + r) * 8 ..] = lane-wise partial sums of q_n . K_r (ScoreRows).
template <int T, class L, int NQ, int R>
KVLAB_ALWAYS_INLINE void ScoreRows16(const float* q, int d, const uint8_t* k, int64_t row_bytes, float* raw) {
  __m512 acc[NQ * R];
  for (__m512& a : acc) a = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int c = 0; c < d; c += 16) {
    __m512 kz[R];
    for (int r = 0; r < R; ++r) kz[r] = L::Load16Z(k + r * row_bytes, c);
    for (int n = 0; n < NQ; ++n) {
      const __m512 qz = _mm512_loadu_ps(q + n * d + c);
      for (int r = 0; r < R; ++r) acc[n * R + r] = _mm512_fmadd_ps(kz[r], qz, acc[n * R + r]);
    }
  }
  for (int n = 0; n < NQ; ++n) {
    for (int r = 0; r < R; ++r) Store(raw + (n * T + r) * 8, Fold8(acc[n * R + r]));
  }
}

// Rows per score step: about 16 accumulators (of 32 registers).
constexpr int ScoreRowsFor(int nq) { return std::min(8, std::max(1, 16 / nq)); }

// s[n * T + r] = q_n . K_r for r < nrows (ScoreTile).
template <int T, class L, int NQ>
void ScoreTile16(const float* q, int d, const uint8_t* k, int64_t row_bytes, int nrows, float* s, float* raw,
                 PrefetchStream* pf) {
  constexpr int R = ScoreRowsFor(NQ);
  int r = 0;
  for (; r + R <= nrows; r += R) {
    ScoreRows16<T, L, NQ, R>(q, d, k + r * row_bytes, row_bytes, raw + r * 8);
    pf->Step();
  }
  for (; r < nrows; ++r) ScoreRows16<T, L, NQ, 1>(q, d, k + r * row_bytes, row_bytes, raw + r * 8);
  for (int n = 0; n < NQ; ++n) {
    for (int h = 0; h < nrows; h += 8) {
      F8 rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = Load(raw + (n * T + h + i) * 8);
      Store(s + n * T + h, HSum8(rows));
    }
  }
}

template <int T, class L>
void ScoreTileAny16(int nq, const float* q, int d, const uint8_t* k, int64_t row_bytes, int nrows, float* s,
                    float* raw, PrefetchStream* pf) {
  switch (nq) {
    case 1: return ScoreTile16<T, L, 1>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 2: return ScoreTile16<T, L, 2>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 3: return ScoreTile16<T, L, 3>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 4: return ScoreTile16<T, L, 4>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 5: return ScoreTile16<T, L, 5>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 6: return ScoreTile16<T, L, 6>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 7: return ScoreTile16<T, L, 7>(q, d, k, row_bytes, nrows, s, raw, pf);
    default: return ScoreTile16<T, L, 8>(q, d, k, row_bytes, nrows, s, raw, pf);
  }
}

// acc_n[c .. c + 16C) += sum_r w_n(r, g) V_r[c .. c + 16C) (AccumulateChunk:
// Enc, code rows with their value groups and epilogue; !Enc, one weight per
// row, w_n(r) = w[n * wstride + r], added straight into acc).
template <class L, int NV, int C, bool Enc>
KVLAB_ALWAYS_INLINE void AccumulateChunk16(const float* w, int wstride, int ng, int vgroup, const uint8_t* v,
                                           int64_t row_bytes, int nrows, int c, int d, float* acc,
                                           const ValueEpilogue& ep) {
  __m512 a[NV][C];
  int g[C];
  for (int cc = 0; cc < C; ++cc) g[cc] = Enc ? (c + 16 * cc) / vgroup : 0;
  for (int n = 0; n < NV; ++n) {
    for (int cc = 0; cc < C; ++cc) a[n][cc] = Enc ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + n * d + c + 16 * cc);
  }
#pragma GCC unroll 4
  for (int r = 0; r < nrows; ++r) {
    for (int cc = 0; cc < C; ++cc) {
      const __m512 vz = L::Load16Z(v + r * row_bytes, c + 16 * cc);
      for (int n = 0; n < NV; ++n) {
        const float wr = Enc ? w[n * wstride + r * ng + g[cc]] : w[n * wstride + r];
        a[n][cc] = _mm512_fmadd_ps(_mm512_set1_ps(wr), vz, a[n][cc]);
      }
    }
  }
  for (int n = 0; n < NV; ++n) {
    for (int cc = 0; cc < C; ++cc) {
      float* dst = acc + n * d + c + 16 * cc;
      if constexpr (Enc) {
        const __m512 bias = _mm512_set1_ps(-ep.mid * ep.wsum[n * ng + g[cc]]);
        _mm512_storeu_ps(dst, _mm512_fmadd_ps(a[n][cc], _mm512_loadu_ps(ep.lane_scale),
                                              _mm512_add_ps(_mm512_loadu_ps(dst), bias)));
      } else {
        _mm512_storeu_ps(dst, a[n][cc]);
      }
    }
  }
}

template <class L, bool Enc, int NV>
void AccumulateTile16(const float* w, int wstride, int ng, int vgroup, const uint8_t* v, int64_t row_bytes, int nrows,
                      int d, float* acc, const ValueEpilogue& ep, PrefetchStream* pf) {
  constexpr int C = NV == 1 ? 8 : NV == 2 ? 4 : 2;  // 8 accumulators at least
  int c = 0;
  for (; c + 16 * C <= d; c += 16 * C) {
    AccumulateChunk16<L, NV, C, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
    pf->Step();
  }
  for (; c < d; c += 16) AccumulateChunk16<L, NV, 1, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
}

template <class L, bool Enc>
void AccumulateTileAny16(int nv, const float* w, int wstride, int ng, int vgroup, const uint8_t* v, int64_t row_bytes,
                         int nrows, int d, float* acc, const ValueEpilogue& ep, PrefetchStream* pf) {
  switch (nv) {
    case 1: return AccumulateTile16<L, Enc, 1>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    case 2: return AccumulateTile16<L, Enc, 2>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    case 3: return AccumulateTile16<L, Enc, 3>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    default: return AccumulateTile16<L, Enc, 4>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
  }
}

}  // namespace cpu_tiles16
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // KVLAB_ISA_VECTOR >= 2
