// Tile kernels shared by the CPU attention paths: attention_cpu.cpp (plain
// paged K/V) and attention_kivi_cpu.cpp (KIVI codes, then the plain tail).
// Scores of a tile of T key rows against a few query vectors, the weighted sum
// of value rows into fp32 accumulators, the online-softmax step between them,
// and the software prefetch that runs beside them. Generic over the row
// loader L, which gives channels [c, c + 16) of a row as two F8 in the lane
// order of Storage<DT>::Load16 (plain rows: PlainRows below) and says how
// many rows and accumulators a score step takes (ScoreRows, ScoreSplit).
// In the avx512 copy, a loader that also has Load16Z (the 16 lanes in one
// zmm: KIVI's and quant's code rows) gets 16-lane score and value loops
// (ScoreRows16, AccumulateChunk16): half the FMAs, the same arrays in the
// same lane order, so the rest of a kernel is shared.
// Internal to kernels/; everything here is inline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/attention_cpu_simd.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace cpu_tiles {

using namespace cpu_simd;  // NOLINT: the vector vocabulary of these kernels

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows of K/V as stored (fp32, fp16 or bf16).
template <DType DT>
struct PlainRows {
  static KVLAB_ALWAYS_INLINE void Load16(const uint8_t* row, int c, F8* lo, F8* hi) {
    Storage<DT>::Load16(row + c * Storage<DT>::kBytes, lo, hi);
  }
  // Rows per score step for NQ query vectors (8 accumulators) and one
  // accumulator per (vector, row) pair.
  static constexpr int ScoreRows(int nq) { return nq >= 8 ? 1 : 8 / nq; }
  static constexpr int ScoreSplit(int) { return 1; }
  static constexpr bool kWide = false;  // no Load16Z: 8-lane loops on every path
};

// ---- software prefetch ----

// A later block's lines, issued a few per kernel step so that the memory
// system keeps fetching while the FMAs run. (Prefetching a whole block at once
// stalls on the miss buffers and serialises memory and compute; blocks are
// scattered, so the hardware prefetcher restarts at every block.) The lines
// per step adapt to the steps the previous block took.
class PrefetchStream {
 public:
  // Finishes the current unit's prefetches and starts on [unit, unit + bytes).
  void NextBlock(const uint8_t* unit, int64_t bytes) {
    Issue(INT32_MAX);
    const int lines = static_cast<int>((bytes + 63) / 64);
    lines_per_step_ = steps_ > 0 ? std::max(1, (lines + steps_ - 1) / steps_) : std::max(1, lines / 16);
    steps_ = 0;
    next_ = unit;
    end_ = unit == nullptr ? nullptr : unit + static_cast<int64_t>(lines) * 64;
  }
  void Step() {
    ++steps_;
    Issue(lines_per_step_);
  }

 private:
  void Issue(int lines) {
    for (; lines > 0 && next_ < end_; --lines, next_ += 64) Prefetch(next_);
  }
  const uint8_t* next_ = nullptr;
  const uint8_t* end_ = nullptr;
  int lines_per_step_ = 1, steps_ = 0;
};

// ---- scores ----

// raw[(n * T + r) * 8 ..] = lane-wise partial sums of q_n . K_r for NQ query
// vectors and R rows of a T-row tile, with S accumulators per pair (S = 2
// keeps 8 FMA chains busy when NQ * R is small, as for code rows, whose
// unpacking takes registers that more rows would need).
template <int T, class L, int NQ, int R, int S>
KVLAB_ALWAYS_INLINE void ScoreRows(const float* q, int d, const uint8_t* k, int64_t row_bytes, float* raw) {
  F8 acc[NQ * R][S];
  for (auto& a : acc) {
    for (F8& x : a) x = Zero();
  }
#pragma GCC unroll 8
  for (int c = 0; c < d; c += 16) {
    F8 lo[R], hi[R];
    for (int r = 0; r < R; ++r) L::Load16(k + r * row_bytes, c, &lo[r], &hi[r]);
    for (int n = 0; n < NQ; ++n) {
      const F8 ql = Load(q + n * d + c), qh = Load(q + n * d + c + 8);
      for (int r = 0; r < R; ++r) {
        acc[n * R + r][0] = Fma(lo[r], ql, acc[n * R + r][0]);
        acc[n * R + r][S - 1] = Fma(hi[r], qh, acc[n * R + r][S - 1]);
      }
    }
  }
  for (int n = 0; n < NQ; ++n) {
    for (int r = 0; r < R; ++r) {
      Store(raw + (n * T + r) * 8, S == 2 ? Add(acc[n * R + r][0], acc[n * R + r][S - 1]) : acc[n * R + r][0]);
    }
  }
}

// Whether L runs 16 lanes wide here: L::kWide, true for loaders with Load16Z
// in the avx512 copy.
template <class L>
inline constexpr bool kWideRows = KVLAB_ISA_VECTOR >= 2 && L::kWide;

#if KVLAB_ISA_VECTOR >= 2
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() as their
// pass-through operand, which -W(maybe-)uninitialized reports wherever they
// are inlined (GCC bug 105593, fixed in 13; as in page_bounds_cpu.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVLAB_TILES_DIAGNOSTICS 1
#endif

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

#endif

// Rows per score step, and the step itself at L's width.
template <class L>
constexpr int ScoreStepRows(int nq) {
#if KVLAB_ISA_VECTOR >= 2
  if constexpr (kWideRows<L>) return ScoreRowsFor(nq);
#endif
  return L::ScoreRows(nq);
}
template <int T, class L, int NQ, int R, int S>
KVLAB_ALWAYS_INLINE void ScoreStep(const float* q, int d, const uint8_t* k, int64_t row_bytes, float* raw) {
#if KVLAB_ISA_VECTOR >= 2
  if constexpr (kWideRows<L>) {
    ScoreRows16<T, L, NQ, R>(q, d, k, row_bytes, raw);
    return;
  }
#endif
  ScoreRows<T, L, NQ, R, S>(q, d, k, row_bytes, raw);
}

// s[n * T + r] = q_n . K_r for r < nrows (entries past nrows are stale;
// MaskTile overwrites them).
template <int T, class L, int NQ>
void ScoreTile(const float* q, int d, const uint8_t* k, int64_t row_bytes, int nrows, float* s, float* raw,
               PrefetchStream* pf) {
  constexpr int R = ScoreStepRows<L>(NQ);
  constexpr int S = L::ScoreSplit(NQ);
  int r = 0;
  for (; r + R <= nrows; r += R) {
    ScoreStep<T, L, NQ, R, S>(q, d, k + r * row_bytes, row_bytes, raw + r * 8);
    pf->Step();
  }
  for (; r < nrows; ++r) ScoreStep<T, L, NQ, 1, 2>(q, d, k + r * row_bytes, row_bytes, raw + r * 8);
  for (int n = 0; n < NQ; ++n) {
    for (int h = 0; h < nrows; h += 8) {
      F8 rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = Load(raw + (n * T + h + i) * 8);
      Store(s + n * T + h, HSum8(rows));
    }
  }
}

template <int T, class L>
void ScoreTileAny(int nq, const float* q, int d, const uint8_t* k, int64_t row_bytes, int nrows, float* s, float* raw,
                  PrefetchStream* pf) {
  switch (nq) {
    case 1: return ScoreTile<T, L, 1>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 2: return ScoreTile<T, L, 2>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 3: return ScoreTile<T, L, 3>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 4: return ScoreTile<T, L, 4>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 5: return ScoreTile<T, L, 5>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 6: return ScoreTile<T, L, 6>(q, d, k, row_bytes, nrows, s, raw, pf);
    case 7: return ScoreTile<T, L, 7>(q, d, k, row_bytes, nrows, s, raw, pf);
    default: return ScoreTile<T, L, 8>(q, d, k, row_bytes, nrows, s, raw, pf);
  }
}

// ---- weighted value sums ----

// What AccumulateChunk adds besides the weighted rows: nothing for plain rows.
// For code rows (Enc), the rows' sum is formed from zero (codes times 2^Exp),
// then acc += sum * lane_scale - mid * wsum(n, g): the tile's values with
// centred codes, (code - mid) * scale, whose running sum stays small (raw codes
// would add a positive amount every tile and cancel against the zero-point
// sum at the end: fp32 error ~ sqrt(context) * eps * |x|). The mid * scale
// part goes to the zero-point sums (ValueWeights).
struct ValueEpilogue {
  const float* lane_scale;  // [16]: 2^-Exp(lane)
  const float* wsum;        // [n * ng + g]: the tile's sum of w_n(r, g) over r
  float mid;
};

// acc_n[c .. c + 16C) += sum_r w_n(r, g) * V_r[c .. c + 16C) for NV query
// vectors, where w_n(r, g) = w[n * wstride + r * ng + g] and g is the value
// group of the chunk (plain rows, !Enc: w_n(r) = w[n * wstride + r], one group;
// ng, vgroup and ep unused).
template <class L, int NV, int C, bool Enc>
KVLAB_ALWAYS_INLINE void AccumulateChunk(const float* w, int wstride, int ng, int vgroup, const uint8_t* v,
                                         int64_t row_bytes, int nrows, int c, int d, float* acc,
                                         const ValueEpilogue& ep) {
  F8 a[NV][C][2];
  int g[C];
  for (int cc = 0; cc < C; ++cc) g[cc] = (c + 16 * cc) / vgroup;
  for (int n = 0; n < NV; ++n) {
    for (int cc = 0; cc < C; ++cc) {
      a[n][cc][0] = Enc ? Zero() : Load(acc + n * d + c + 16 * cc);
      a[n][cc][1] = Enc ? Zero() : Load(acc + n * d + c + 16 * cc + 8);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < nrows; ++r) {
    F8 wrow[NV];  // plain rows: one weight per row and vector, for every chunk
    if constexpr (!Enc) {
      for (int n = 0; n < NV; ++n) wrow[n] = Set1(w[n * wstride + r]);
    }
    for (int cc = 0; cc < C; ++cc) {
      F8 lo, hi;
      L::Load16(v + r * row_bytes, c + 16 * cc, &lo, &hi);
      for (int n = 0; n < NV; ++n) {
        const F8 wr = Enc ? Set1(w[n * wstride + r * ng + g[cc]]) : wrow[n];
        a[n][cc][0] = Fma(wr, lo, a[n][cc][0]);
        a[n][cc][1] = Fma(wr, hi, a[n][cc][1]);
      }
    }
  }
  for (int n = 0; n < NV; ++n) {
    for (int cc = 0; cc < C; ++cc) {
      float* dst = acc + n * d + c + 16 * cc;
      if constexpr (Enc) {
        const F8 bias = Set1(-ep.mid * ep.wsum[n * ng + g[cc]]);
        Store(dst, Fma(a[n][cc][0], Load(ep.lane_scale), Add(Load(dst), bias)));
        Store(dst + 8, Fma(a[n][cc][1], Load(ep.lane_scale + 8), Add(Load(dst + 8), bias)));
      } else {
        Store(dst, a[n][cc][0]);
        Store(dst + 8, a[n][cc][1]);
      }
    }
  }
}

#if KVLAB_ISA_VECTOR >= 2
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

#endif

// One chunk step at L's width.
template <class L, int NV, int C, bool Enc>
KVLAB_ALWAYS_INLINE void AccumulateStep(const float* w, int wstride, int ng, int vgroup, const uint8_t* v,
                                        int64_t row_bytes, int nrows, int c, int d, float* acc,
                                        const ValueEpilogue& ep) {
#if KVLAB_ISA_VECTOR >= 2
  if constexpr (kWideRows<L>) {
    AccumulateChunk16<L, NV, C, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
    return;
  }
#endif
  AccumulateChunk<L, NV, C, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
}

template <class L, bool Enc, int NV>
void AccumulateTile(const float* w, int wstride, int ng, int vgroup, const uint8_t* v, int64_t row_bytes, int nrows,
                    int d, float* acc, const ValueEpilogue& ep, PrefetchStream* pf) {
  // About 8 accumulators (8 zmm ones at least on the 16-lane loops).
  constexpr int C = (NV == 1 ? 4 : NV == 2 ? 2 : 1) * (kWideRows<L> ? 2 : 1);
  int c = 0;
  for (; c + 16 * C <= d; c += 16 * C) {
    AccumulateStep<L, NV, C, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
    pf->Step();
  }
  for (; c < d; c += 16) AccumulateStep<L, NV, 1, Enc>(w, wstride, ng, vgroup, v, row_bytes, nrows, c, d, acc, ep);
}

template <class L, bool Enc>
void AccumulateTileAny(int nv, const float* w, int wstride, int ng, int vgroup, const uint8_t* v, int64_t row_bytes,
                       int nrows, int d, float* acc, const ValueEpilogue& ep, PrefetchStream* pf) {
  switch (nv) {
    case 1: return AccumulateTile<L, Enc, 1>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    case 2: return AccumulateTile<L, Enc, 2>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    case 3: return AccumulateTile<L, Enc, 3>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
    default: return AccumulateTile<L, Enc, 4>(w, wstride, ng, vgroup, v, row_bytes, nrows, d, acc, ep, pf);
  }
}

// ---- online softmax ----

// Rows of the tile past the query vector's causal limit, or past nrows, get
// -inf; so do rows before `first` (its first visible slot: a sliding window).
template <int T>
inline void MaskTile(float* s_n, int64_t slot0, int64_t limit, int nrows, int64_t first = 0) {
  const int valid = static_cast<int>(std::clamp<int64_t>(limit - slot0 + 1, 0, nrows));
  for (int r = valid; r < T; ++r) s_n[r] = kNegInf;
  const int lo = static_cast<int>(std::clamp<int64_t>(first - slot0, 0, valid));
  for (int r = 0; r < lo; ++r) s_n[r] = kNegInf;
}

// One online-softmax step over a T-row tile for nq query vectors: turns the
// scores s[n * T + r] (log2 units) into weights in place, adds them to l[n],
// and when the running max m[n] grows rescales l[n], the accumulator
// acc[n * d ..] and, when given, extra[n * extra_len ..] (another running sum
// that the weights feed, e.g. KIVI's zero-point sums). `first`, when given,
// is each vector's first visible slot (see MaskTile).
template <int T>
void SoftmaxTile(int nq, int nrows, int64_t slot0, const int64_t* limit, int d, float* s, float* m, float* l,
                 float* acc, float* extra = nullptr, int extra_len = 0, const int64_t* first = nullptr) {
  static_assert(T % 8 == 0, "tiles are whole vectors");
  constexpr int kVecs = T / 8;
  for (int n = 0; n < nq; ++n) {
    float* s_n = s + n * T;
    MaskTile<T>(s_n, slot0, limit[n], nrows, first == nullptr ? 0 : first[n]);
    F8 x[kVecs];
    for (int i = 0; i < kVecs; ++i) x[i] = Load(s_n + 8 * i);
    F8 mx = x[0];
    for (int i = 1; i < kVecs; ++i) mx = Max(mx, x[i]);
    const float tile_max = HMax(mx);
    if (tile_max == kNegInf) {  // nothing visible to this query in the tile
      for (int i = 0; i < kVecs; ++i) Store(s_n + 8 * i, Zero());
      continue;
    }
    if (tile_max > m[n]) {
      const float alpha = std::exp2(m[n] - tile_max);  // 0 on the first visible tile
      l[n] *= alpha;
      const F8 av = Set1(alpha);
      float* a = acc + static_cast<size_t>(n) * d;
      for (int c = 0; c < d; c += 8) Store(a + c, Mul(Load(a + c), av));
      float* e = extra + static_cast<size_t>(n) * extra_len;
      for (int c = 0; c < extra_len; c += 8) Store(e + c, Mul(Load(e + c), av));
      m[n] = tile_max;
    }
    const F8 mv = Set1(m[n]);
    F8 sum = Zero();
    for (int i = 0; i < kVecs; ++i) {
      const F8 w = Exp2(Sub(x[i], mv));
      Store(s_n + 8 * i, w);
      sum = Add(sum, w);
    }
    l[n] += HSum(sum);
  }
}

}  // namespace cpu_tiles
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#ifdef KVLAB_TILES_DIAGNOSTICS
#pragma GCC diagnostic pop
#undef KVLAB_TILES_DIAGNOSTICS
#endif
