// Device helpers shared by kvlab's CUDA kernels: storage-dtype conversion of
// 16-byte vectors and of int8 / fp8 codes, cp.async wrappers, the CTA's
// dynamic shared memory and the typed launch helper. Included by .cu files only. With KVLAB_CUDA_EMULATION
// (emu/: the CPU emulation the tests also run on) the same code compiles as C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/base/dtype.h"
#include "kernels/paged_kv.h"

namespace kvlab {
namespace cuda {

// Host-side helpers of the launchers.
inline bool Aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// Caller-provided temporary storage is carved into pieces that each start on
// a 256-byte boundary.
constexpr size_t kTempAlign = 256;
inline size_t TempAlignUp(size_t n) { return (n + kTempAlign - 1) / kTempAlign * kTempAlign; }

// The page-table fields every kernel's argument struct copies from a PagedKV
// (its base: Byte is const uint8_t for kernels that only read the pool).
template <typename Byte>
struct PageTableArgs {
  Byte* base;
  int64_t block_bytes;
  const int32_t* indptr;
  const int32_t* indices;
  int block_size;
};

template <typename Byte>
void SetPageTable(const PagedKV& kv, PageTableArgs<Byte>* a) {
  a->base = kv.base;
  a->block_bytes = kv.block_bytes;
  a->indptr = kv.indptr;
  a->indices = kv.indices;
  a->block_size = kv.block_size;
}

// The storage element types, and how 16 bytes of them become fp32.
template <typename T>
struct Storage;

template <>
struct Storage<float> {
  static constexpr int kVec = 4;  // elements per 16 bytes
  static constexpr DType kDType = DType::kF32;
  __device__ __forceinline__ static void ToF32(const uint4& raw, float* out) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  }
  __device__ __forceinline__ static float One(const void* p) { return *static_cast<const float*>(p); }
};

template <>
struct Storage<__half> {
  static constexpr int kVec = 8;
  static constexpr DType kDType = DType::kF16;
  __device__ __forceinline__ static void ToF32(const uint4& raw, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
  __device__ __forceinline__ static float One(const void* p) { return __half2float(*static_cast<const __half*>(p)); }
};

template <>
struct Storage<__nv_bfloat16> {
  static constexpr int kVec = 8;
  static constexpr DType kDType = DType::kBF16;
  __device__ __forceinline__ static void ToF32(const uint4& raw, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // bf16 -> fp32 is a 16-bit shift: exact, as in BF16ToF32.
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ __forceinline__ static float One(const void* p) {
    return __uint_as_float(static_cast<uint32_t>(*static_cast<const uint16_t*>(p)) << 16);
  }
};

// Four 8-bit codes (little-endian in w) times their scale, exactly as
// Sym8Decode in kv_encoding.cpp computes them (one fp32 product each).
__device__ __forceinline__ void Int8x4ToF32(uint32_t w, float scale, float* out) {
#pragma unroll
  for (int e = 0; e < 4; ++e) out[e] = static_cast<float>(static_cast<int8_t>((w >> (8 * e)) & 0xffu)) * scale;
}

// fp8 e4m3 -> fp16 by moving bits: sign to bit 15, exponent and mantissa to
// bits 13..7, which is the e4m3 value times 2^-8 exactly (normals and
// subnormals alike; fp16's exponent bias is 8 more than e4m3's). The factor
// 2^8 goes into the scale, so x = h * (256 * scale) is the same single
// rounding of q * scale as Sym8Decode's. The NaN codes 0x7f / 0xff (never
// written by the encoders) would read as +-480. Architecture-independent:
// sm_80 has no fp8 conversion instruction.
__device__ __forceinline__ void Fp8x4ToF32(uint32_t w, float scale, float* out) {
  const float s = scale * 256.0f;  // exact: a power-of-two factor
  const uint32_t pairs[2] = {((w & 0xffu) << 8) | ((w & 0xff00u) << 16),  // codes 0, 1 in the high byte of each half
                             ((w & 0xff0000u) >> 8) | (w & 0xff000000u)};  // codes 2, 3
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t h = (pairs[i] & 0x80008000u) | ((pairs[i] >> 1) & 0x3f803f80u);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    out[2 * i] = f.x * s;
    out[2 * i + 1] = f.y * s;
  }
}

// 16-byte global -> shared copy that does not wait (sm_80+: cp.async.cg, which
// also bypasses L1; older targets fall back to a synchronous copy).
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem_src) : "memory");
#else
  *static_cast<uint4*>(smem_dst) = *static_cast<const uint4*>(gmem_src);
#endif
}

// 4-byte variant (cp.async.ca: the only sizes below 16 go through L1), for
// encoded blocks whose size or arena stride is not a multiple of 16 bytes.
__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(gmem_src) : "memory");
#else
  *static_cast<uint32_t*>(smem_dst) = *static_cast<const uint32_t*>(gmem_src);
#endif
}

__device__ __forceinline__ void CpAsyncCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// One tensor-core MMA of a warp, D = A B + C with A 16x16 (row-major), B
// 16x8 (column-major) in bf16 (kBf16) or fp16 and C / D 16x8 in fp32, in
// PTX's m16n8k16 fragment layout (groupID g = lane / 4, t = lane % 4):
// a[r] holds A's row g + 8 (r & 1), columns 2t + 8 (r >> 1) + {0, 1}; b[r]
// rows 2t + 8 r + {0, 1} of column g; c[i] row g + 8 (i >> 1), column
// 2t + (i & 1). Lower column / row index in the low 16 bits. sm_80 and up.
template <bool kBf16>
__device__ __forceinline__ void Mma16816(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]) {
#ifdef KVLAB_CUDA_EMULATION
  const uint32_t b[2] = {b0, b1};
  ::kvlab_emu::MmaM16N8K16(a, b, c, kBf16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  __trap();  // the planner never picks the tensor-core kernel below sm_80
#endif
}

// CpAsyncWait with a run-time count in [0, 3] (a pipeline depth of 2 to 4).
__device__ __forceinline__ void CpAsyncWaitPending(int n) {
  switch (n) {
    case 0: CpAsyncWait<0>(); break;
    case 1: CpAsyncWait<1>(); break;
    case 2: CpAsyncWait<2>(); break;
    default: CpAsyncWait<3>(); break;
  }
}

// The CTA's dynamic shared memory (the launch's smem bytes, 16-byte aligned).
__device__ __forceinline__ uint8_t* DynamicSmem() {
#ifdef KVLAB_CUDA_EMULATION
  return ::kvlab_emu::DynamicSmem();
#else
  extern __shared__ __align__(16) uint8_t kvlab_dynamic_smem[];
  return kvlab_dynamic_smem;
#endif
}

// Launches a kernel whose one parameter is an argument struct; returns the
// launch error (cudaSuccess does not mean the kernel ran without faults).
template <class Args>
cudaError_t LaunchKernel(void (*kernel)(Args), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                         const Args& args) {
#ifdef KVLAB_CUDA_EMULATION
  (void)stream;  // everything runs at the call
  return ::kvlab_emu::RunGrid(reinterpret_cast<const void*>(kernel), grid, block, smem_bytes,
                              [&] { kernel(args); });
#else
  void* argv[] = {const_cast<Args*>(&args)};
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, argv, smem_bytes, stream);
#endif
}

}  // namespace cuda
}  // namespace kvlab
