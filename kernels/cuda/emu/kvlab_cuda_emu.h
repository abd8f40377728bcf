// A CPU emulation of the small part of CUDA that kvlab's kernels use, so that
// the unmodified kernels and launchers (kernels/cuda/*.cu, compiled as C++)
// and their unmodified test run on a machine without a GPU. Every CUDA thread
// is a cooperative fiber: __syncthreads and warp shuffles are real barriers
// (a barrier some thread never reaches is reported as a deadlock, not hung),
// a CTA's dynamic shared memory is exactly the launch's bytes plus a checked
// canary, and every device allocation ends at an inaccessible page, so an
// out-of-bounds read past a buffer's end faults. Not emulated: timing,
// asynchrony (everything runs at the call), cp.async (a plain copy), memory
// coalescing, register or occupancy limits. Only for tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "core/base/dtype.h"

#define KVLAB_CUDA_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr {
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// Streams and events are handles checked on use (an unknown or destroyed one
// is cudaErrorInvalidResourceHandle); work runs at the call, so recording,
// waiting and synchronising only check their arguments.
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
// Page-locked host memory: an allocation like cudaMalloc's (guard page
// included), tracked so that cudaFreeHost of anything else fails, as does
// cudaFree of it.
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
cudaError_t EmuOccupancy(int* num_blocks, const void* func, int block_size, size_t smem_bytes);
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, F func, int block_size, size_t smem_bytes) {
  return EmuOccupancy(num_blocks, reinterpret_cast<const void*>(func), block_size, smem_bytes);
}

namespace kvlab_emu {

// Runs body() once per thread of every CTA of the grid, CTA after CTA.
// Returns cudaErrorLaunchFailure (and prints why) on a deadlock, a shuffle in
// a partial warp, or shared memory written past the launch's bytes.
cudaError_t RunGrid(const void* func, dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body);

const dim3& ThreadIdx();
const dim3& BlockIdx();
const dim3& BlockDim();
const dim3& GridDim();
uint8_t* DynamicSmem();
void SyncThreads();
uint32_t ShflXor(uint32_t v, int lane_mask);
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: c += A B over the warp,
// each lane passing its PTX fragment registers (fp32 products and sums).
void MmaM16N8K16(const uint32_t (&a)[4], const uint32_t (&b)[2], float (&c)[4], bool bf16);

}  // namespace kvlab_emu

#define threadIdx (::kvlab_emu::ThreadIdx())
#define blockIdx (::kvlab_emu::BlockIdx())
#define blockDim (::kvlab_emu::BlockDim())
#define gridDim (::kvlab_emu::GridDim())

inline void __syncthreads() { kvlab_emu::SyncThreads(); }
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask, int /*width*/ = 32) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = kvlab_emu::ShflXor(u, lane_mask);
  std::memcpy(&v, &u, 4);
  return v;
}

template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
  return a < b ? b : a;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }

// fp16 / bf16 as bit patterns, converted with kvlab's own (round-to-nearest-even) code.
struct __half {
  uint16_t bits;
};
struct __half2 {
  __half x, y;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline float __half2float(__half h) { return kvlab::F16ToF32(h.bits); }
inline __half __float2half_rn(float f) { return __half{kvlab::F32ToF16(f)}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{kvlab::F32ToBF16(f)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
