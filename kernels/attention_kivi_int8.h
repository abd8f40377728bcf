// The int8 arithmetic of KIVI-2 decode attention on the CPU (the kivi policy's
// `attention = "int8"`), for attention_kivi_cpu.cpp. Internal to kernels/;
// everything here is inline, in the avx2 and avx512 copies only (kAvailable is
// false in the scalar one, whose caller then takes the exact path); the avx512
// copy adds VNNI scores (ScoreTileVnni) for CPUs that have it.
//
// Scope: 2-bit codes, head_dim 128, KIVI group 32, keys per channel and
// values per token (the paper's and the benchmark's shape; the kivi policy
// refuses "int8" on any other, naming `attention`, and a direct caller of the
// kernel that sets the flag on another shape gets the exact path). Per
// encoded block:
//   scores: the folded query q * s_k (key scales per channel) is rounded to
//     int8 against its largest magnitude (sigma = max|q * s_k| / 127), and
//     code . q8 is one vpmaddubsw per 32 channels: score = sigma * (code . q8)
//     + q . z_k.
//   values: the weights w(t, g) = p(t) * s_v(t, g) (softmax weight times the
//     token's value scale for value group g) are rounded to 0..255 against
//     their largest value over the tile's 32 rows (omega(g) = max_t w / 255),
//     and sum_t w8(t, g) * code(t, c) is one vpmaddubsw per two rows and 16
//     channels, summed exactly in int16 over the 32-row tile (at most
//     16 * 2 * 255 * 3 = 24,480) with the codes centred as 2 code - 3 (a
//     vpshufb lookup, so the running fp32 sums stay small). The tile adds
//     omega / 2 * that sum to fp32 accumulators and 1.5 * omega * sum w8 to
//     the zero-point sums: the rounded weights are used consistently, and
//     only their rounding is an error.
// The error against the exact kernel is what those two roundings make:
// tested in core/cache/attention_encoded_test.cpp against a stated bound and against
// KIVI-2's own error; the bytes read are the same as the exact path's.
//
// Register order: the value accumulators of a query vector are kept in the
// order the code registers come in (RegIndex), not channel order; the caller
// permutes them once per job, when the job's encoded blocks are done.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace kivi_int8 {

inline constexpr int kDim = 128;   // head_dim
inline constexpr int kRows = 32;   // tokens per block == KIVI group == tile
inline constexpr int kGroups = 4;  // value groups per token (kDim / kRows)
inline constexpr int kPairs = kRows / 2;
inline constexpr float kMid = 1.5f;  // centre of the 2-bit codes

// Position of channel `ch` in the register order of the value accumulators:
// code register (half, k) holds channels 4j + k for byte pairs j of the
// unpacklo (half 0: j = 0..7 | 16..23) or unpackhi (half 1: j = 8..15 | 24..31)
// of two rows.
constexpr int RegIndex(int ch) {
  const int j = ch / 4, k = ch % 4;
  return ((j / 8) % 2 * 4 + k) * 16 + j % 8 + 8 * (j / 16);
}
// Value group of register-order lanes [8 * v, 8 * v + 8).
constexpr int RegGroup(int v) { return v / 8 + 2 * (v % 2); }

#ifdef KVLAB_ATTN_AVX2
inline constexpr bool kAvailable = true;

// q8 (kDim bytes, code-register order: byte 32k + j = channel 4j + k) and
// sigma for the folded query qs (kDim floats, channel order): qs ~ sigma * q8.
inline float QuantizeQuery(const float* qs, int8_t* q8) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  for (int c = 0; c < kDim; c += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(qs + c)));
  // The largest magnitude in every lane, and 127 over it (0 for a zero query).
  mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 0x01));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m256 inv = _mm256_blendv_ps(_mm256_div_ps(_mm256_set1_ps(127.0f), mx), _mm256_setzero_ps(),
                                      _mm256_cmp_ps(mx, _mm256_setzero_ps(), _CMP_EQ_OQ));
  const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i tr = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13,
                                      2, 6, 10, 14, 3, 7, 11, 15);
  __m256i r[4];  // r[i]: qword k = channels 4j + k for j = 8i .. 8i + 7
  for (int i = 0; i < 4; ++i) {
    __m256i x[4];
    for (int v = 0; v < 4; ++v) x[v] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(qs + 32 * i + 8 * v), inv));
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(x[0], x[1]), _mm256_packs_epi32(x[2], x[3]));
    b = _mm256_permutevar8x32_epi32(b, fix);                                   // dword j: channels 4j .. 4j + 3
    r[i] = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(b, tr), fix);  // bytes by k, then j
  }
  const __m256i t0 = _mm256_unpacklo_epi64(r[0], r[1]), t1 = _mm256_unpackhi_epi64(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi64(r[2], r[3]), t3 = _mm256_unpackhi_epi64(r[2], r[3]);
  __m256i* out = reinterpret_cast<__m256i*>(q8);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(t0, t2, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(t1, t3, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(t0, t2, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(t1, t3, 0x31));
  return _mm256_cvtss_f32(mx) * (1.0f / 127.0f);
}

// s[n * kRows + r0 + r] = sigma[n] * raw_n(r) + kconst[n] for 8 rows, from
// raw[(n * 8 + r) * 8 ..] (8 int32 partial dot products per row).
template <int NQ>
inline void ReduceScores(const int32_t* raw, const float* sigma, const float* kconst, float* s, int r0) {
  for (int n = 0; n < NQ; ++n) {
    __m256i v[8];
    for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw + (n * 8 + i) * 8));
    const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    const __m256i dot =
        _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_ps(s + n * kRows + r0,
                     _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sigma[n]), _mm256_set1_ps(kconst[n])));
  }
}

// s[n * kRows + r] = sigma[n] * (code_r . q8_n) + kconst[n] for the block's
// 32 rows (codes: kRows rows of 32 bytes) and NQ query vectors.
template <int NQ>
inline void ScoreTile(const uint8_t* codes, const int8_t* q8, const float* sigma, const float* kconst, float* s,
                      int32_t* raw /* [NQ][8][8] */) {
  const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  for (int r0 = 0; r0 < kRows; r0 += 8) {
    for (int r = 0; r < 8; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (r0 + r) * 32));
      const __m256i c0 = _mm256_and_si256(x, m3);
      const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(x, 2), m3);
      const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(x, 4), m3);
      const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(x, 6), m3);
      for (int n = 0; n < NQ; ++n) {
        const __m256i* q = reinterpret_cast<const __m256i*>(q8 + n * kDim);
        const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(c0, _mm256_loadu_si256(q)),
                                           _mm256_maddubs_epi16(c1, _mm256_loadu_si256(q + 1)));
        const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(c2, _mm256_loadu_si256(q + 2)),
                                           _mm256_maddubs_epi16(c3, _mm256_loadu_si256(q + 3)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(raw + (n * 8 + r) * 8),
                            _mm256_madd_epi16(_mm256_add_epi16(a, b), ones));
      }
    }
    ReduceScores<NQ>(raw, sigma, kconst, s, r0);
  }
}

#if KVLAB_ISA_VECTOR >= 2
// ScoreTile with AVX-512 VNNI: each 32-channel product is one vpdpbusd
// accumulating into the row's dwords (4 instructions a row and vector, where
// ScoreTile takes 4 vpmaddubsw, 3 adds and a vpmaddwd). The integer sums are
// the same (no int16 saturation is reachable: |sum| <= 4 * 2 * 3 * 127), so
// the scores equal ScoreTile's bit for bit. Runs only when ActiveCpuVnni().
template <int NQ>
KVLAB_ISA_VNNI inline void ScoreTileVnni(const uint8_t* codes, const int8_t* q8, const float* sigma,
                                         const float* kconst, float* s, int32_t* raw /* [NQ][8][8] */) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int r0 = 0; r0 < kRows; r0 += 8) {
    for (int r = 0; r < 8; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (r0 + r) * 32));
      const __m256i c0 = _mm256_and_si256(x, m3);
      const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(x, 2), m3);
      const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(x, 4), m3);
      const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(x, 6), m3);
      for (int n = 0; n < NQ; ++n) {
        const __m256i* q = reinterpret_cast<const __m256i*>(q8 + n * kDim);
        __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c0, _mm256_loadu_si256(q));
        a = _mm256_dpbusd_epi32(a, c1, _mm256_loadu_si256(q + 1));
        a = _mm256_dpbusd_epi32(a, c2, _mm256_loadu_si256(q + 2));
        a = _mm256_dpbusd_epi32(a, c3, _mm256_loadu_si256(q + 3));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(raw + (n * 8 + r) * 8), a);
      }
    }
    ReduceScores<NQ>(raw, sigma, kconst, s, r0);
  }
}
#endif

// ScoreTile<NQ>, or ScoreTileVnni<NQ> when vnni (the avx512 copy only).
template <int NQ>
inline void ScoreTileOn(bool vnni, const uint8_t* codes, const int8_t* q8, const float* sigma, const float* kconst,
                        float* s, int32_t* raw) {
#if KVLAB_ISA_VECTOR >= 2
  if (vnni) return ScoreTileVnni<NQ>(codes, q8, sigma, kconst, s, raw);
#else
  (void)vnni;
#endif
  ScoreTile<NQ>(codes, q8, sigma, kconst, s, raw);
}

// The tile's value weights for one query vector, from p (kRows softmax
// weights) and the rows' value scales vsf / zeros vzf (fp32, [row][group]):
// the rounded weights wq (per row pair p, one qword: w8(2p, 0..3), w8(2p + 1,
// 0..3)), half_omega[g] = omega(g) / 2, and z[g] += sum_t p(t) zv(t, g) +
// kMid * omega(g) * sum_t w8(t, g).
inline void ValueWeights(const float* p, const float* vsf, const float* vzf, uint8_t* wq, float* half_omega,
                         float* z) {
  constexpr int kVecs = kRows * kGroups / 8;  // 16: vector i = rows 2i, 2i + 1, groups 0..3
  __m256 w[kVecs];
  __m256 mx = _mm256_setzero_ps(), zs = _mm256_setzero_ps();
  const __m256i ex[4] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                         _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
  for (int i = 0; i < kVecs; i += 4) {
    const __m256 p8 = _mm256_loadu_ps(p + 2 * i);  // rows 2i .. 2i + 7
    for (int v = 0; v < 4; ++v) {
      const __m256 pe = _mm256_permutevar8x32_ps(p8, ex[v]);
      w[i + v] = _mm256_mul_ps(pe, _mm256_loadu_ps(vsf + 8 * (i + v)));
      mx = _mm256_max_ps(mx, w[i + v]);
      zs = _mm256_fmadd_ps(pe, _mm256_loadu_ps(vzf + 8 * (i + v)), zs);
    }
  }
  // Lanes g and g + 4: group g, both halves of the tile's rows.
  mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 0x01));
  const __m128 zs4 = _mm_add_ps(_mm256_castps256_ps128(zs), _mm256_extractf128_ps(zs, 1));
  const __m256 inv = _mm256_blendv_ps(_mm256_div_ps(_mm256_set1_ps(255.0f), mx), _mm256_setzero_ps(),
                                      _mm256_cmp_ps(mx, _mm256_setzero_ps(), _CMP_EQ_OQ));
  const __m256i fix = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i sum = _mm256_setzero_si256();
  for (int i = 0; i < kVecs; i += 4) {  // 8 rows: 4 row pairs
    __m256i x[4];
    for (int v = 0; v < 4; ++v) {
      x[v] = _mm256_cvtps_epi32(_mm256_mul_ps(w[i + v], inv));
      sum = _mm256_add_epi32(sum, x[v]);
    }
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(x[0], x[1]), _mm256_packs_epi32(x[2], x[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + i * 8), _mm256_permutevar8x32_epi32(b, fix));
  }
  const __m128 m4 = _mm256_castps256_ps128(mx);
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  _mm_storeu_ps(half_omega, _mm_mul_ps(m4, _mm_set1_ps(1.0f / 510.0f)));
  const __m128 zmid = _mm_mul_ps(_mm_mul_ps(m4, _mm_set1_ps(kMid / 255.0f)), _mm_cvtepi32_ps(s4));
  _mm_storeu_ps(z, _mm_add_ps(_mm_loadu_ps(z), _mm_add_ps(zs4, zmid)));
}

// acc_n (register order, kDim floats) += omega(g) / 2 * sum_t w8 (2 code - 3)
// (= omega (sum_t w8 code - 1.5 sum_t w8): centred codes, exact in int16)
// over the tile's 32 rows of value codes, for NV query vectors; wq and ho as
// ValueWeights leaves them, per vector n at wq + n * kRows * 4 and ho + n *
// kGroups, and acc_n at acc + n * kDim.
template <int NV>
inline void AccumulateTile(const uint8_t* codes, const uint8_t* wq, const float* ho, float* acc) {
  // 2 c - 3 for the code c in bits 0-1 (lut_a) or 2-3 (lut_b) of a nibble.
  const __m256i m15 = _mm256_set1_epi8(15);
  const __m256i lut_a = _mm256_setr_epi8(-3, -1, 1, 3, -3, -1, 1, 3, -3, -1, 1, 3, -3, -1, 1, 3, -3, -1, 1, 3, -3, -1,
                                         1, 3, -3, -1, 1, 3, -3, -1, 1, 3);
  const __m256i lut_b = _mm256_setr_epi8(-3, -3, -3, -3, -1, -1, -1, -1, 1, 1, 1, 1, 3, 3, 3, 3, -3, -3, -3, -3, -1,
                                         -1, -1, -1, 1, 1, 1, 1, 3, 3, 3, 3);
  // The weight vectors of each row pair and half: 16-bit lanes (w8(2p, g),
  // w8(2p + 1, g)), g = half in the low 128 bits and 2 + half in the high;
  // made once here, read by both passes of each half.
  const __m256i pick0 = _mm256_setr_epi8(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 2, 6, 2, 6, 2, 6, 2, 6, 2, 6,
                                         2, 6, 2, 6, 2, 6);
  const __m256i pick1 = _mm256_add_epi8(pick0, _mm256_set1_epi8(1));
  __m256i wvec[NV][kPairs][2];
  for (int n = 0; n < NV; ++n) {
    for (int p = 0; p < kPairs; ++p) {
      int64_t pair;
      std::memcpy(&pair, wq + n * kRows * 4 + p * 8, 8);
      const __m256i b = _mm256_set1_epi64x(pair);
      wvec[n][p][0] = _mm256_shuffle_epi8(b, pick0);
      wvec[n][p][1] = _mm256_shuffle_epi8(b, pick1);
    }
  }
  for (int half = 0; half < 2; ++half) {
    for (int kp = 0; kp < 2; ++kp) {
      __m256i a[NV][2];
      for (int n = 0; n < NV; ++n) a[n][0] = a[n][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) {
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (2 * p) * 32));
        const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (2 * p + 1) * 32));
        __m256i v = half ? _mm256_unpackhi_epi8(xa, xb) : _mm256_unpacklo_epi8(xa, xb);
        if (kp) v = _mm256_srli_epi16(v, 4);
        const __m256i nib = _mm256_and_si256(v, m15);
        const __m256i ca = _mm256_shuffle_epi8(lut_a, nib), cb = _mm256_shuffle_epi8(lut_b, nib);
        for (int n = 0; n < NV; ++n) {
          const __m256i w = _mm256_load_si256(&wvec[n][p][half]);
          a[n][0] = _mm256_add_epi16(a[n][0], _mm256_maddubs_epi16(w, ca));
          a[n][1] = _mm256_add_epi16(a[n][1], _mm256_maddubs_epi16(w, cb));
        }
      }
      for (int n = 0; n < NV; ++n) {
        for (int e = 0; e < 2; ++e) {
          const int reg = half * 4 + 2 * kp + e;  // code register (half, k)
          float* dst = acc + n * kDim + reg * 16;
          const __m256i lo = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(a[n][e]));
          const __m256i hi = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a[n][e], 1));
          const int ga = RegGroup(2 * reg), gb = RegGroup(2 * reg + 1);
          _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_set1_ps(ho[n * kGroups + ga]),
                                                _mm256_loadu_ps(dst)));
          _mm256_storeu_ps(dst + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(ho[n * kGroups + gb]),
                                                    _mm256_loadu_ps(dst + 8)));
        }
      }
    }
  }
}

// One block's scores for nq query vectors: the key scales and zeros (fp16,
// kDim each) folded into the channel-order queries qn ([nq][kDim], log2
// units), the folded queries rounded (q8, sigma; kconst = q . z), then
// s[n * kRows + r] = sigma * (code_r . q8_n) + kconst (with VNNI when vnni).
// pf steps the caller's prefetch stream.
inline void BlockScores(bool vnni, const uint8_t* key_codes, const uint16_t* ks, const uint16_t* kz, int nq,
                        const float* qn, int8_t* q8, float* sigma, float* kconst, int32_t* iraw, float* s,
                        cpu_tiles::PrefetchStream* pf) {
  using namespace cpu_simd;  // NOLINT
  alignas(32) float qs[kDim], ksf[kDim], kzf[kDim];
  for (int c = 0; c < kDim; c += 8) {
    Store(ksf + c, LoadHalf8(ks + c));
    Store(kzf + c, LoadHalf8(kz + c));
  }
  for (int n = 0; n < nq; ++n) {
    const float* q = qn + n * kDim;
    F8 z0 = Zero(), z1 = Zero();
    for (int c = 0; c < kDim; c += 16) {
      Store(qs + c, Mul(Load(q + c), Load(ksf + c)));
      Store(qs + c + 8, Mul(Load(q + c + 8), Load(ksf + c + 8)));
      z0 = Fma(Load(q + c), Load(kzf + c), z0);
      z1 = Fma(Load(q + c + 8), Load(kzf + c + 8), z1);
    }
    kconst[n] = HSum(Add(z0, z1));
    sigma[n] = QuantizeQuery(qs, q8 + n * kDim);
  }
  for (int n0 = 0; n0 < nq; n0 += 4) {
    const int8_t* q = q8 + n0 * kDim;
    float* sn = s + n0 * kRows;
    switch (std::min(4, nq - n0)) {
      case 1: ScoreTileOn<1>(vnni, key_codes, q, sigma + n0, kconst + n0, sn, iraw); break;
      case 2: ScoreTileOn<2>(vnni, key_codes, q, sigma + n0, kconst + n0, sn, iraw); break;
      case 3: ScoreTileOn<3>(vnni, key_codes, q, sigma + n0, kconst + n0, sn, iraw); break;
      default: ScoreTileOn<4>(vnni, key_codes, q, sigma + n0, kconst + n0, sn, iraw); break;
    }
    pf->Step();
  }
}

// One block's value sums, after the softmax turned s into weights p
// ([nq][kRows]): the value scales and zeros (fp16, kRows * kGroups each) to
// fp32 (vsf, vzf), each vector's rounded weights (wq: kRows * 4 bytes a
// vector; half_omega: kGroups floats), its zero-point sums (zacc + n * zlen),
// and accr += the tile's value sums (register order, [nq][kDim]).
inline void BlockValues(const uint8_t* value_codes, const uint16_t* vs, const uint16_t* vz, int nq, const float* p,
                        float* vsf, float* vzf, uint8_t* wq, float* half_omega, float* zacc, int zlen, float* accr,
                        cpu_tiles::PrefetchStream* pf) {
  using namespace cpu_simd;  // NOLINT
  for (int f = 0; f < kRows * kGroups; f += 8) {
    Store(vsf + f, LoadHalf8(vs + f));
    Store(vzf + f, LoadHalf8(vz + f));
  }
  constexpr int kWq = kRows * 4;
  for (int n = 0; n < nq; ++n) {
    ValueWeights(p + n * kRows, vsf, vzf, wq + n * kWq, half_omega + n * kGroups, zacc + n * zlen);
  }
  for (int n0 = 0; n0 < nq; n0 += 4) {
    const uint8_t* w = wq + n0 * kWq;
    const float* ho = half_omega + n0 * kGroups;
    float* acc = accr + n0 * kDim;
    switch (std::min(4, nq - n0)) {
      case 1: AccumulateTile<1>(value_codes, w, ho, acc); break;
      case 2: AccumulateTile<2>(value_codes, w, ho, acc); break;
      case 3: AccumulateTile<3>(value_codes, w, ho, acc); break;
      default: AccumulateTile<4>(value_codes, w, ho, acc); break;
    }
    pf->Step();
  }
}
#else
inline constexpr bool kAvailable = false;
inline void BlockScores(bool, const uint8_t*, const uint16_t*, const uint16_t*, int, const float*, int8_t*, float*,
                        float*, int32_t*, float*, cpu_tiles::PrefetchStream*) {}
inline void BlockValues(const uint8_t*, const uint16_t*, const uint16_t*, int, const float*, float*, float*, uint8_t*,
                        float*, float*, int, float*, cpu_tiles::PrefetchStream*) {}
#endif

}  // namespace kivi_int8
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab
