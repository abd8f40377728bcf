#include "core/base/dtype.h"

namespace kvlab {

bool ParseDType(const std::string& s, DType* out) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "F32") { *out = DType::kF32; return true; }
  if (s == "f16" || s == "fp16" || s == "float16" || s == "F16") { *out = DType::kF16; return true; }
  if (s == "bf16" || s == "bfloat16" || s == "BF16") { *out = DType::kBF16; return true; }
  return false;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;                // overflow -> inf
  if (absu < 0x38800000u) {                                      // subnormal or zero in f16
    if (absu < 0x33000000u) return sign;                         // underflow to zero
    const uint32_t exp = absu >> 23;                             // 102..112
    const uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;                           // value = mant >> shift units of 2^-24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);               // round to nearest even
  r -= (127u - 15u) << 23;
  return sign | static_cast<uint16_t>(r >> 13);
}

void ConvertToF32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
  }
}

void ConvertFromF32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
  }
}

}  // namespace kvlab
