// KIVI's row loaders for the CPU kernel (attention_kivi_cpu.cpp): packed
// 2- and 4-bit codes as fp32 lanes in the order of Storage<DT>::Load16
// (CodeRows, with Load16Z for the avx512 copy's 16-lane loops), and the
// per-channel fp16 key scales and zeros in that order (LoadHalf16). A
// per-path header: include it after kernels/cpu_isa_begin.h. Internal to
// kernels/; everything here is inline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/base/dtype.h"
#include "kernels/attention_cpu_simd.h"

#if KVLAB_ISA_VECTOR == 2 && defined(__GNUC__) && !defined(__clang__)
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() as their
// pass-through operand, which -W(maybe-)uninitialized reports wherever they
// are inlined (GCC bug 105593, fixed in 13; as in page_bounds_cpu.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace cpu_kivi_rows {

using namespace cpu_simd;  // NOLINT: the vector vocabulary of these loaders

// ---- row loader for codes (plain rows: PlainRows in attention_cpu_tiles.h) ----

// KIVI codes: BITS-bit codes packed little-endian within bytes, row-major, so
// the 16 codes of a chunk are one (2-bit) or two (4-bit) little-endian dwords.
// Load16 gives each lane its code times a power of two, 2^Exp(lane), exactly
// (at most 2 + 28 significant bits): the factor is folded into the query for
// scores and taken out once per tile for values. 2-bit: the dword broadcast,
// masked in place for the low 8 lanes and, for the high 8, after one shift
// (bf16 lane order) or from a second broadcast 2 bytes on (natural order),
// then converted: 4-5 ops per 16 codes. 4-bit: each lane's dword (a permute),
// shifted by its code's offset, masked, converted: 8 ops per 16 codes.
template <int BITS, DType DT>
struct CodeRows {
  static constexpr float kMid = static_cast<float>((1 << BITS) - 1) / 2;
  static constexpr int Bit(int lane) { return Storage<DT>::StoredIndex(lane) * BITS; }
  static constexpr int HiShift() {
    int m = 32;
    for (int i = 8; i < 16; ++i) m = std::min(m, Bit(i) % 32);
    return m;
  }
  static constexpr int Exp(int lane) {
    if constexpr (BITS != 2) return 0;
#if KVLAB_ISA_VECTOR >= 2
    // AVX-512 converts unsigned dwords: every lane masks its code in place
    // in the one dword, up to bit 31 (Load16Z).
    return Bit(lane) % 32;
#else
    return lane < 8 ? Bit(lane) % 32 : Bit(lane) % 32 - HiShift();
#endif
  }
  static constexpr int Mask(int lane) { return static_cast<int>(((1u << BITS) - 1) << Exp(lane)); }
#if KVLAB_ISA_VECTOR >= 2
  static_assert(BITS != 2 || Exp(15) + BITS <= 32, "codes must stay inside the dword");
#else
  static_assert(BITS != 2 || (Exp(7) + BITS <= 31 && Exp(15) + BITS <= 31), "codes must stay below the sign bit");
#endif
  static float LaneScale(int lane) { return std::ldexp(1.0f, -Exp(lane)); }  // 1 / 2^Exp(lane)
  // Score steps: unpacking takes registers that more rows would need, so
  // fewer rows than plain rows, and two accumulators per pair when the
  // vectors are few (chosen by measurement at NQ = 4).
  static constexpr int ScoreRows(int nq) { return nq >= 5 ? 1 : nq >= 3 ? 2 : 4 / nq; }
  static constexpr int ScoreSplit(int nq) { return nq <= 2 ? 2 : 1; }

  static KVLAB_ALWAYS_INLINE void Load16(const uint8_t* row, int c, F8* lo, F8* hi) {
    const uint8_t* p = row + c * BITS / 8;
#ifdef KVLAB_ATTN_AVX2
    if constexpr (BITS == 2) {
      const __m256i mask_lo = _mm256_setr_epi32(Mask(0), Mask(1), Mask(2), Mask(3), Mask(4), Mask(5), Mask(6), Mask(7));
      const __m256i mask_hi =
          _mm256_setr_epi32(Mask(8), Mask(9), Mask(10), Mask(11), Mask(12), Mask(13), Mask(14), Mask(15));
      int32_t w;
      std::memcpy(&w, p, 4);
      const __m256i x = _mm256_set1_epi32(w);
#if KVLAB_ISA_VECTOR >= 2
      *lo = _mm256_cvtepu32_ps(_mm256_and_si256(x, mask_lo));
      *hi = _mm256_cvtepu32_ps(_mm256_and_si256(x, mask_hi));
      return;
#endif
      *lo = _mm256_cvtepi32_ps(_mm256_and_si256(x, mask_lo));
      if constexpr (HiShift() % 8 == 0) {
        // Natural order: the high lanes' codes are whole bytes further on; a
        // second broadcast load (reading at most 2 bytes past the chunk, still
        // inside the block) saves the shift.
        std::memcpy(&w, p + HiShift() / 8, 4);
        *hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_set1_epi32(w), mask_hi));
      } else {
        *hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x, HiShift()), mask_hi));
      }
    } else {
      const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
      const __m256i x = _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i xl = _mm256_permutevar8x32_epi32(
          x, _mm256_setr_epi32(Bit(0) / 32, Bit(1) / 32, Bit(2) / 32, Bit(3) / 32, Bit(4) / 32, Bit(5) / 32,
                               Bit(6) / 32, Bit(7) / 32));
      const __m256i xh = _mm256_permutevar8x32_epi32(
          x, _mm256_setr_epi32(Bit(8) / 32, Bit(9) / 32, Bit(10) / 32, Bit(11) / 32, Bit(12) / 32, Bit(13) / 32,
                               Bit(14) / 32, Bit(15) / 32));
      const __m256i shift_lo = _mm256_setr_epi32(Bit(0) % 32, Bit(1) % 32, Bit(2) % 32, Bit(3) % 32, Bit(4) % 32,
                                                 Bit(5) % 32, Bit(6) % 32, Bit(7) % 32);
      const __m256i shift_hi = _mm256_setr_epi32(Bit(8) % 32, Bit(9) % 32, Bit(10) % 32, Bit(11) % 32,
                                                 Bit(12) % 32, Bit(13) % 32, Bit(14) % 32, Bit(15) % 32);
      *lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(xl, shift_lo), mask));
      *hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(xh, shift_hi), mask));
    }
#else
    float f[16];
    for (int i = 0; i < 16; ++i) {
      const int code = (p[Bit(i) / 8] >> (Bit(i) % 8)) & ((1 << BITS) - 1);
      f[i] = std::ldexp(static_cast<float>(code), Exp(i));
    }
    *lo = Load(f);
    *hi = Load(f + 8);
#endif
  }

  static constexpr bool kWide = KVLAB_ISA_VECTOR >= 2;  // Load16Z below: the 16-lane tile loops
#if KVLAB_ISA_VECTOR >= 2
  // The 16 lanes of Load16 in one zmm (lanes 0-7 = lo, 8-15 = hi): 2-bit, a
  // broadcast dword, one mask and an unsigned convert; 4-bit, one permute of
  // the chunk's 64 bits, a shift per lane, a mask and a convert.
  static KVLAB_ALWAYS_INLINE __m512 Load16Z(const uint8_t* row, int c) {
    const uint8_t* p = row + c * BITS / 8;
    if constexpr (BITS == 2) {
      const __m512i mask = _mm512_setr_epi32(Mask(0), Mask(1), Mask(2), Mask(3), Mask(4), Mask(5), Mask(6), Mask(7),
                                             Mask(8), Mask(9), Mask(10), Mask(11), Mask(12), Mask(13), Mask(14),
                                             Mask(15));
      int32_t w;
      std::memcpy(&w, p, 4);
      return _mm512_cvtepu32_ps(_mm512_and_si512(_mm512_set1_epi32(w), mask));
    } else {
      const __m512i x = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m512i idx = _mm512_setr_epi32(Bit(0) / 32, Bit(1) / 32, Bit(2) / 32, Bit(3) / 32, Bit(4) / 32,
                                            Bit(5) / 32, Bit(6) / 32, Bit(7) / 32, Bit(8) / 32, Bit(9) / 32,
                                            Bit(10) / 32, Bit(11) / 32, Bit(12) / 32, Bit(13) / 32, Bit(14) / 32,
                                            Bit(15) / 32);
      const __m512i shift = _mm512_setr_epi32(Bit(0) % 32, Bit(1) % 32, Bit(2) % 32, Bit(3) % 32, Bit(4) % 32,
                                              Bit(5) % 32, Bit(6) % 32, Bit(7) % 32, Bit(8) % 32, Bit(9) % 32,
                                              Bit(10) % 32, Bit(11) % 32, Bit(12) % 32, Bit(13) % 32, Bit(14) % 32,
                                              Bit(15) % 32);
      const __m512i v = _mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, x), shift);
      return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32((1 << BITS) - 1)));
    }
  }
#endif
};


// 16 fp16 (a chunk of per-channel key scales or zeros) in the lane order of DT.
template <DType DT>
inline void LoadHalf16(const uint16_t* p, F8* lo, F8* hi) {
  if constexpr (Storage<DT>::StoredIndex(1) == 1) {
    *lo = LoadHalf8(p);
    *hi = LoadHalf8(p + 8);
  } else {
#ifdef KVLAB_ATTN_AVX2
    // Even halves to the low 8 bytes of each 128-bit lane, odd to the high;
    // then the qwords to [even lo, even hi, odd lo, odd hi].
    const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12,
                                         13, 2, 3, 6, 7, 10, 11, 14, 15);
    __m256i x = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), sel);
    x = _mm256_permute4x64_epi64(x, _MM_SHUFFLE(3, 1, 2, 0));
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(x));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(x, 1));
#else
    float f[16];
    for (int i = 0; i < 16; ++i) f[i] = F16ToF32(p[Storage<DT>::StoredIndex(i)]);
    *lo = Load(f);
    *hi = Load(f + 8);
#endif
  }
}

}  // namespace cpu_kivi_rows
}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#if KVLAB_ISA_VECTOR == 2 && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
