// Emulation stand-in for CUDA's <cuda_fp8.h> (see kvlab_cuda_emu.h): the
// float -> fp8 e4m3 conversion that EncodeSealQuant8 uses, with CUDA's
// semantics: round to nearest, ties to even (subnormals included);
// __NV_SATFINITE clamps finite values beyond 448 to +-448, __NV_NOSAT makes
// them NaN (e4m3 has no infinity); NaN becomes 0x7f; the sign of zero is kept.
// e5m2 is not emulated (aborts).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/emu/kvlab_cuda_emu.h"

typedef unsigned char __nv_fp8_storage_t;
enum __nv_saturation_t { __NV_NOSAT = 0, __NV_SATFINITE = 1 };
enum __nv_fp8_interpretation_t { __NV_E4M3 = 0, __NV_E5M2 = 1 };

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                                __nv_fp8_interpretation_t interpretation) {
  if (interpretation != __NV_E4M3) {
    std::fprintf(stderr, "kvlab_emu: __nv_cvt_float_to_fp8 emulates e4m3 only\n");
    std::abort();
  }
  if (std::isnan(x)) return 0x7f;
  const unsigned char sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  // Beyond 464 (448 + half an ulp) rounding would reach 480, not a finite
  // e4m3 value; 464 itself is a tie that goes to the even 448.
  if (a > 464.0f) return static_cast<__nv_fp8_storage_t>(sign | (saturate == __NV_SATFINITE ? 0x7e : 0x7f));
  if (a < 0.015625f) {  // below 2^-6: subnormal codes m * 2^-9, m = 0..8 (8 is 2^-6, the first normal)
    const float m = std::nearbyint(a * 512.0f);  // exact scaling; nearbyint rounds ties to even
    return static_cast<__nv_fp8_storage_t>(sign | static_cast<unsigned char>(m));
  }
  int e = std::ilogb(a);                                 // a = 2^e * f, f in [1, 2)
  float m = std::nearbyint((std::ldexp(a, -e) - 1.0f) * 8.0f);  // 3 mantissa bits, ties to even
  if (m == 8.0f) {
    m = 0.0f;
    ++e;
  }
  return static_cast<__nv_fp8_storage_t>(sign | ((e + 7) << 3) | static_cast<unsigned char>(m));
}
