// Storage dtypes of the KV cache and of checkpoint tensors, and scalar
// conversions to and from fp32. Torch-free so kernels and loaders can use it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace kvlab {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline int DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}
// Accepts f32/fp32/float32, f16/fp16/float16, bf16/bfloat16. Returns false otherwise.
bool ParseDType(const std::string& s, DType* out);

inline float BF16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// Converts n values stored as `t` at src into fp32 at dst.
void ConvertToF32(DType t, const void* src, float* dst, int64_t n);
// Converts n fp32 values into dtype `t` at dst.
void ConvertFromF32(DType t, const float* src, void* dst, int64_t n);

}  // namespace kvlab
