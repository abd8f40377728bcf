// Pseudo-random device fills for paged_decode_bench (see bench_fill.h).
#include "kernels/cuda/bench_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvlab {
namespace cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float Unit(uint64_t seed, int64_t i) {  // [0, 1)
  return static_cast<float>(Mix(seed ^ Mix(static_cast<uint64_t>(i))) >> 40) * (1.0f / 16777216.0f);
}

__global__ void FillUniformKernel(int dtype, void* dst, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = lo + (hi - lo) * Unit(seed, i);
    if (dtype == static_cast<int>(DType::kF32)) {
      static_cast<float*>(dst)[i] = x;
    } else if (dtype == static_cast<int>(DType::kF16)) {
      static_cast<__half*>(dst)[i] = __float2half_rn(x);
    } else {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(x);
    }
  }
}

// One thread per byte of codes (random) or per fp16 parameter.
__global__ void FillKiviKernel(uint8_t* dst, int64_t num_blocks, int64_t block_bytes, int64_t code_bytes,
                               int64_t num_params, uint64_t seed) {
  const int64_t per_block = 2 * code_bytes + num_params;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_blocks * per_block;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / per_block, j = i % per_block;
    uint8_t* blk = dst + b * block_bytes;
    if (j < 2 * code_bytes) {
      blk[j] = static_cast<uint8_t>(Mix(seed ^ Mix(static_cast<uint64_t>(i))) & 0xff);
    } else {
      // Parameters alternate by run: K scales, K zeros, V scales, V zeros.
      // A scale-like value for even runs, a zero-like value for odd ones.
      const int64_t p = j - 2 * code_bytes;
      const int64_t run = p / (num_params / 4);
      const float u = Unit(seed + 1, i);
      const float x = (run % 2 == 0) ? 0.01f + 0.09f * u : -u;
      reinterpret_cast<__half*>(blk + 2 * code_bytes)[p] = __float2half_rn(x);
    }
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

cudaError_t FillUniform(DType dtype, void* dst, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillUniformKernel<<<GridFor(n), kThreads, 0, stream>>>(static_cast<int>(dtype), dst, n, seed, lo, hi);
  return cudaGetLastError();
}

cudaError_t FillKiviBlocks(const KvEncoding& e, uint8_t* dst, int64_t num_blocks, uint64_t seed, cudaStream_t stream) {
  if (num_blocks <= 0) return cudaSuccess;
  const int64_t num_params = 2 * (e.NumKeyParams() + e.NumValueParams());
  if (e.NumKeyParams() != e.NumValueParams()) return cudaErrorNotSupported;  // runs of equal length assumed
  const int64_t n = num_blocks * (2 * e.CodeBytes() + num_params);
  FillKiviKernel<<<GridFor(n), kThreads, 0, stream>>>(dst, num_blocks, e.BlockBytes(), e.CodeBytes(), num_params, seed);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvlab
