// CUDA cache writers: AppendKv, EncodeSealKivi and EncodeSealQuant8 (see append_kv.h).
#include "kernels/cuda/append_kv.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace kvlab {
namespace cuda {

namespace {

constexpr int kThreads = 256;

struct AppendArgs : PageTableArgs<uint8_t> {
  const int32_t* last_block_len;
  int head_dim;
  const int32_t* qo_indptr;
  int num_seqs;
  int num_kv_heads;
  int64_t total_rows;  // total_q * num_kv_heads
  const float* k;
  const float* v;
};

// Four fp32 values to the storage dtype, round-to-nearest-even as
// ConvertFromF32 (F32ToBF16 / F32ToF16).
template <typename T>
__device__ __forceinline__ void Store4(uint8_t* dst, const float4 x);

template <>
__device__ __forceinline__ void Store4<float>(uint8_t* dst, const float4 x) {
  *reinterpret_cast<float4*>(dst) = x;
}
template <>
__device__ __forceinline__ void Store4<__half>(uint8_t* dst, const float4 x) {
  const __half2 a = __floats2half2_rn(x.x, x.y), b = __floats2half2_rn(x.z, x.w);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(dst) = u;
}
template <>
__device__ __forceinline__ void Store4<__nv_bfloat16>(uint8_t* dst, const float4 x) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(dst) = u;
}

// One thread per 4 channels of one (token, KV head) row.
template <typename T>
__global__ void AppendKvKernel(const __grid_constant__ AppendArgs a) {
  const int per_row = a.head_dim / 4;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = gid / per_row;
  if (row >= a.total_rows) return;
  const int c4 = static_cast<int>(gid % per_row);
  const int tok = static_cast<int>(row / a.num_kv_heads);
  const int h = static_cast<int>(row % a.num_kv_heads);
  // The sequence of token `tok`: the largest i with qo_indptr[i] <= tok
  // (sequences with no new tokens share their start with the next one).
  int lo = 0, hi = a.num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.qo_indptr[mid] <= tok) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int q_len = a.qo_indptr[lo + 1] - a.qo_indptr[lo];
  const int j = tok - a.qo_indptr[lo];
  const int s = lo * a.num_kv_heads + h;
  const int32_t nb = a.indptr[s + 1] - a.indptr[s];
  const int64_t len = nb == 0 ? 0 : static_cast<int64_t>(nb - 1) * a.block_size + a.last_block_len[s];
  const int64_t slot = len - q_len + j;
  if (slot < 0) return;  // REQUIRES violated; do not write outside the stream
  const int32_t blk = a.indices[a.indptr[s] + static_cast<int32_t>(slot / a.block_size)];
  const int64_t row_bytes = static_cast<int64_t>(a.head_dim) * sizeof(T);
  uint8_t* kdst = a.base + static_cast<int64_t>(blk) * a.block_bytes + (slot % a.block_size) * row_bytes + c4 * 4 * sizeof(T);
  uint8_t* vdst = kdst + a.block_size * row_bytes;
  const int64_t src = row * a.head_dim + c4 * 4;
  Store4<T>(kdst, *reinterpret_cast<const float4*>(a.k + src));
  Store4<T>(vdst, *reinterpret_cast<const float4*>(a.v + src));
}

// What both seal kernels read: the plain pool's page table, where the encoded
// blocks go, and the jobs (SetSealCommon). SealArgs and Quant8Args add their
// encoding's parameters.
struct SealCommon : PageTableArgs<const uint8_t> {
  int head_dim;
  uint8_t* enc_base;
  int64_t enc_block_bytes;
  const int32_t* job_stream;
  const int32_t* job_first;
  const int32_t* job_dst;
  int tpb;
};

void SetSealCommon(const PagedKV& kv, const KvEncoding& enc, uint8_t* enc_base, int64_t enc_block_bytes,
                   const SealJobs& jobs, SealCommon* a) {
  SetPageTable(kv, a);
  a->head_dim = kv.head_dim;
  a->enc_base = enc_base;
  a->enc_block_bytes = enc_block_bytes;
  a->job_stream = jobs.stream;
  a->job_first = jobs.first_slot;
  a->job_dst = jobs.dst_block;
  a->tpb = enc.tokens_per_block;
}

struct SealArgs : SealCommon {
  int bits, group;
  int key_axis, value_axis;  // QuantAxis values
  int max_groups;
  int64_t code_bytes, nk, nv;
};

// One CTA per job; K then V: gather the group as fp32 into shared memory,
// one thread per quantization group for (min, max) -> fp16 (scale, zero),
// then one thread per output byte of codes. Same operations, in the same
// order, as KiviEncode in kv_encoding.cpp.
template <typename T>
__global__ void EncodeSealKiviKernel(const __grid_constant__ SealArgs a) {
  const int D = a.head_dim;
  const int n = a.tpb * D;
  float* x = reinterpret_cast<float*>(DynamicSmem());
  float* sc = x + n;
  float* zr = sc + a.max_groups;
  const int job = blockIdx.x;
  const int s = a.job_stream[job];
  const int64_t first = a.job_first[job];
  uint8_t* dst = a.enc_base + static_cast<int64_t>(a.job_dst[job]) * a.enc_block_bytes;
  const float qmax = static_cast<float>((1 << a.bits) - 1);
  const int per_byte = 8 / a.bits;
  for (int which = 0; which < 2; ++which) {
    const int axis = which == 0 ? a.key_axis : a.value_axis;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int t = i / D, ch = i % D;
      const int64_t slot = first + t;
      const int32_t blk = a.indices[a.indptr[s] + static_cast<int32_t>(slot / a.block_size)];
      const uint8_t* src = a.base + static_cast<int64_t>(blk) * a.block_bytes +
                           (static_cast<int64_t>(which) * a.block_size + slot % a.block_size) * D * sizeof(T) +
                           ch * sizeof(T);
      x[i] = Storage<T>::One(src);
    }
    __syncthreads();
    const int per_tok = D / a.group;
    const int num_groups = axis == static_cast<int>(QuantAxis::kChannel) ? D : a.tpb * per_tok;
    uint16_t* scales = reinterpret_cast<uint16_t*>(dst + 2 * a.code_bytes) + (which == 0 ? 0 : 2 * a.nk);
    uint16_t* zeros = scales + (which == 0 ? a.nk : a.nv);
    for (int g = threadIdx.x; g < num_groups; g += blockDim.x) {
      int t0, t1, c0, c1;
      if (axis == static_cast<int>(QuantAxis::kChannel)) {
        t0 = 0, t1 = a.tpb, c0 = g, c1 = g + 1;
      } else {
        t0 = g / per_tok, t1 = t0 + 1, c0 = (g % per_tok) * a.group, c1 = c0 + a.group;
      }
      float mn = INFINITY, mx = -INFINITY;
      for (int t = t0; t < t1; ++t) {
        for (int ch = c0; ch < c1; ++ch) {
          const float v = x[t * D + ch];
          mn = v < mn ? v : mn;  // std::min / std::max semantics (signed zeros included)
          mx = mx < v ? v : mx;
        }
      }
      const __half zh = __float2half_rn(mn);
      const __half sh = __float2half_rn(__fdiv_rn(__fsub_rn(mx, mn), qmax));
      scales[g] = __half_as_ushort(sh);
      zeros[g] = __half_as_ushort(zh);
      sc[g] = __half2float(sh);
      zr[g] = __half2float(zh);
    }
    __syncthreads();
    uint8_t* codes = dst + which * a.code_bytes;
    for (int64_t b = threadIdx.x; b < a.code_bytes; b += blockDim.x) {
      uint32_t byte = 0;
      for (int k = 0; k < per_byte; ++k) {
        const int i = static_cast<int>(b * per_byte + k);
        const int t = i / D, ch = i % D;
        const int g = axis == static_cast<int>(QuantAxis::kChannel) ? ch : t * per_tok + ch / a.group;
        float q = sc[g] > 0.0f ? rintf(__fdiv_rn(__fsub_rn(x[i], zr[g]), sc[g])) : 0.0f;
        q = fminf(fmaxf(q, 0.0f), qmax);
        byte |= static_cast<uint32_t>(q) << (k * a.bits);
      }
      codes[b] = static_cast<uint8_t>(byte);
    }
    __syncthreads();  // x, sc and zr are reused for V
  }
}

struct Quant8Args : SealCommon {
  int fp8;              // 1: fp8 e4m3, 0: int8
  int rows_per_scale;   // 1 (per-token scales) or tpb (one per block)
  int64_t code_bytes, nk;
};

// One CTA per job; K then V: gather the block as fp32 into shared memory, one
// warp per scale group for the absmax (max is exact, so any order gives
// Sym8Encode's), then one thread per code. Same operations as Sym8Encode in
// kv_encoding.cpp.
template <typename T>
__global__ void EncodeSealQuant8Kernel(const __grid_constant__ Quant8Args a) {
  const int D = a.head_dim;
  const int n = a.tpb * D;
  const int num_groups = a.tpb / a.rows_per_scale;
  float* x = reinterpret_cast<float*>(DynamicSmem());
  float* sc = x + n;
  const int job = blockIdx.x;
  const int s = a.job_stream[job];
  const int64_t first = a.job_first[job];
  uint8_t* dst = a.enc_base + static_cast<int64_t>(a.job_dst[job]) * a.enc_block_bytes;
  const float qmax = a.fp8 ? 448.0f : 127.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  for (int which = 0; which < 2; ++which) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int t = i / D, ch = i % D;
      const int64_t slot = first + t;
      const int32_t blk = a.indices[a.indptr[s] + static_cast<int32_t>(slot / a.block_size)];
      const uint8_t* src = a.base + static_cast<int64_t>(blk) * a.block_bytes +
                           (static_cast<int64_t>(which) * a.block_size + slot % a.block_size) * D * sizeof(T) +
                           ch * sizeof(T);
      x[i] = Storage<T>::One(src);
    }
    __syncthreads();
    uint16_t* scales = reinterpret_cast<uint16_t*>(dst + 2 * a.code_bytes) + (which == 0 ? 0 : a.nk);
    const int group_n = a.rows_per_scale * D;
    for (int g = warp; g < num_groups; g += num_warps) {  // whole warps: the shuffles see all lanes
      float amax = 0.0f;
      for (int i = lane; i < group_n; i += 32) amax = fmaxf(amax, fabsf(x[g * group_n + i]));
      for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      if (lane == 0) {
        const __half sh = __float2half_rn(__fdiv_rn(amax, qmax));
        scales[g] = __half_as_ushort(sh);
        sc[g] = __half2float(sh);
      }
    }
    __syncthreads();
    uint8_t* codes = dst + which * a.code_bytes;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float scale = sc[i / group_n];
      const float y = scale > 0.0f ? __fdiv_rn(x[i], scale) : 0.0f;
      if (a.fp8) {
        codes[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3));
      } else {
        const float q = fminf(fmaxf(rintf(y), -127.0f), 127.0f);
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
    }
    __syncthreads();  // x and sc are reused for V
  }
}

template <typename T>
cudaError_t LaunchAppend(const AppendArgs& a, cudaStream_t stream) {
  const int64_t threads_total = a.total_rows * (a.head_dim / 4);
  const int64_t blocks = (threads_total + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchKernel(AppendKvKernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, a);
}

template <typename T>
cudaError_t LaunchSeal(const SealArgs& a, int num_jobs, int64_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(EncodeSealKiviKernel<T>),
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  return LaunchKernel(EncodeSealKiviKernel<T>, dim3(static_cast<unsigned>(num_jobs)), dim3(kThreads),
                      static_cast<size_t>(smem), stream, a);
}

template <typename T>
cudaError_t LaunchQuant8(const Quant8Args& a, int num_jobs, int64_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(EncodeSealQuant8Kernel<T>),
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  return LaunchKernel(EncodeSealQuant8Kernel<T>, dim3(static_cast<unsigned>(num_jobs)), dim3(kThreads),
                      static_cast<size_t>(smem), stream, a);
}

// Checks shared by the encode-on-seal launchers, after the format's own.
std::string SealCommonCheck(const char* what, const PagedKV& kv, const KvEncoding& enc, const uint8_t* enc_base,
                            int64_t enc_block_bytes, const SealJobs& jobs) {
  const std::string w(what);
  const std::string why = enc.Validate();
  if (!why.empty()) return w + ": " + why;
  if (enc.head_dim != kv.head_dim) return w + ": encoding head_dim differs from the cache's";
  if (jobs.num_jobs < 0) return w + ": num_jobs must be >= 0";
  if (jobs.num_jobs == 0) return "";
  if (kv.block_size <= 0 || kv.block_bytes < 2LL * kv.block_size * kv.head_dim * DTypeBytes(kv.dtype)) {
    return w + ": bad block_size or block_bytes";
  }
  if (enc_block_bytes < enc.BlockBytes() || enc_block_bytes % 2 != 0) {
    return w + ": enc_block_bytes must be even and >= BlockBytes() = " + std::to_string(enc.BlockBytes());
  }
  if (kv.base == nullptr || kv.indptr == nullptr || kv.indices == nullptr || enc_base == nullptr ||
      !Aligned(enc_base, 2) || jobs.stream == nullptr || jobs.first_slot == nullptr || jobs.dst_block == nullptr) {
    return w + ": a pointer is null (or enc_base is not 2-byte aligned)";
  }
  return "";
}

}  // namespace

std::string AppendKvCheck(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, int total_q,
                          const float* k, const float* v) {
  if (num_seqs < 0 || num_kv_heads <= 0 || total_q < 0 || kv.num_streams != num_seqs * num_kv_heads) {
    return "append_kv: cache has " + std::to_string(kv.num_streams) + " streams, expected num_seqs * num_kv_heads = " +
           std::to_string(num_seqs) + " * " + std::to_string(num_kv_heads) + " (and total_q >= 0)";
  }
  if (num_seqs == 0 || total_q == 0) return "";
  if (kv.head_dim <= 0 || kv.head_dim % 4 != 0) return "append_kv: head_dim must be a positive multiple of 4";
  if (kv.block_size <= 0) return "append_kv: block_size must be positive";
  const int64_t row_bytes = static_cast<int64_t>(kv.head_dim) * DTypeBytes(kv.dtype);
  if (kv.block_bytes < 2 * kv.block_size * row_bytes || kv.block_bytes % 16 != 0) {
    return "append_kv: block_bytes must be >= 2 * block_size * head_dim * dtype bytes and a multiple of 16";
  }
  if (kv.base == nullptr || kv.indptr == nullptr || kv.indices == nullptr || kv.last_block_len == nullptr ||
      qo_indptr == nullptr || k == nullptr || v == nullptr) {
    return "append_kv: a pointer is null";
  }
  if (!Aligned(kv.base, 16) || !Aligned(k, 16) || !Aligned(v, 16)) return "append_kv: base, k and v must be 16-byte aligned";
  return "";
}

cudaError_t AppendKv(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, int total_q,
                     const float* k, const float* v, cudaStream_t stream) {
  if (!AppendKvCheck(kv, qo_indptr, num_seqs, num_kv_heads, total_q, k, v).empty()) {
    return kv.head_dim > 0 && kv.head_dim % 4 != 0 ? cudaErrorNotSupported : cudaErrorInvalidValue;
  }
  if (num_seqs == 0 || total_q == 0) return cudaSuccess;
  AppendArgs a{};
  SetPageTable(kv, &a);
  a.last_block_len = kv.last_block_len;
  a.head_dim = kv.head_dim;
  a.qo_indptr = qo_indptr;
  a.num_seqs = num_seqs;
  a.num_kv_heads = num_kv_heads;
  a.total_rows = static_cast<int64_t>(total_q) * num_kv_heads;
  a.k = k;
  a.v = v;
  switch (kv.dtype) {
    case DType::kF32: return LaunchAppend<float>(a, stream);
    case DType::kF16: return LaunchAppend<__half>(a, stream);
    case DType::kBF16: return LaunchAppend<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

std::string EncodeSealKiviCheck(const PagedKV& kv, const KvEncoding& enc, const uint8_t* enc_base,
                                int64_t enc_block_bytes, const SealJobs& jobs) {
  if (enc.kind != EncodingKind::kKivi) {
    return "encode_seal: EncodeSealKivi takes KIVI only (int8 / fp8: EncodeSealQuant8), got " + enc.Describe();
  }
  return SealCommonCheck("encode_seal", kv, enc, enc_base, enc_block_bytes, jobs);
}

cudaError_t EncodeSealKivi(const PagedKV& kv, const KvEncoding& enc, uint8_t* enc_base, int64_t enc_block_bytes,
                           const SealJobs& jobs, cudaStream_t stream) {
  if (!EncodeSealKiviCheck(kv, enc, enc_base, enc_block_bytes, jobs).empty()) {
    return enc.kind != EncodingKind::kKivi ? cudaErrorNotSupported : cudaErrorInvalidValue;
  }
  if (jobs.num_jobs == 0) return cudaSuccess;
  SealArgs a{};
  SetSealCommon(kv, enc, enc_base, enc_block_bytes, jobs, &a);
  a.bits = enc.bits;
  a.group = enc.group;
  a.key_axis = static_cast<int>(enc.key_axis);
  a.value_axis = static_cast<int>(enc.value_axis);
  a.nk = enc.NumKeyParams();
  a.nv = enc.NumValueParams();
  a.max_groups = static_cast<int>(std::max(a.nk, a.nv));
  a.code_bytes = enc.CodeBytes();
  const int64_t smem = (static_cast<int64_t>(a.tpb) * a.head_dim + 2LL * a.max_groups) * 4;
  switch (kv.dtype) {
    case DType::kF32: return LaunchSeal<float>(a, jobs.num_jobs, smem, stream);
    case DType::kF16: return LaunchSeal<__half>(a, jobs.num_jobs, smem, stream);
    case DType::kBF16: return LaunchSeal<__nv_bfloat16>(a, jobs.num_jobs, smem, stream);
  }
  return cudaErrorInvalidValue;
}


std::string EncodeSealQuant8Check(const PagedKV& kv, const KvEncoding& enc, const uint8_t* enc_base,
                                  int64_t enc_block_bytes, const SealJobs& jobs) {
  if (enc.kind != EncodingKind::kInt8 && enc.kind != EncodingKind::kFp8) {
    return "encode_seal_quant8: only int8 and fp8, got " + enc.Describe();
  }
  return SealCommonCheck("encode_seal_quant8", kv, enc, enc_base, enc_block_bytes, jobs);
}

cudaError_t EncodeSealQuant8(const PagedKV& kv, const KvEncoding& enc, uint8_t* enc_base, int64_t enc_block_bytes,
                             const SealJobs& jobs, cudaStream_t stream) {
  if (!EncodeSealQuant8Check(kv, enc, enc_base, enc_block_bytes, jobs).empty()) {
    return enc.kind == EncodingKind::kKivi ? cudaErrorNotSupported : cudaErrorInvalidValue;
  }
  if (jobs.num_jobs == 0) return cudaSuccess;
  Quant8Args a{};
  SetSealCommon(kv, enc, enc_base, enc_block_bytes, jobs, &a);
  a.fp8 = enc.kind == EncodingKind::kFp8 ? 1 : 0;
  a.rows_per_scale = enc.scale_per_token ? 1 : enc.tokens_per_block;
  a.code_bytes = enc.CodeBytes();
  a.nk = enc.NumKeyParams();
  const int64_t smem = (static_cast<int64_t>(a.tpb) * a.head_dim + a.tpb) * 4;
  switch (kv.dtype) {
    case DType::kF32: return LaunchQuant8<float>(a, jobs.num_jobs, smem, stream);
    case DType::kF16: return LaunchQuant8<__half>(a, jobs.num_jobs, smem, stream);
    case DType::kBF16: return LaunchQuant8<__nv_bfloat16>(a, jobs.num_jobs, smem, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace kvlab
