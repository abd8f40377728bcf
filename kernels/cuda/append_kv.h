// CUDA cache writers: AppendKv (a step's new K/V into the paged cache, as
// kernels/append_kv.h does on the CPU), EncodeSealKivi and EncodeSealQuant8
// (encode-on-seal: a full group of plain slots into one KIVI, or one int8 /
// fp8, block, bit-identical to EncodeKvBlock). Plain structs and raw device pointers, no libtorch; launchers
// return a cudaError_t and never throw.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {
namespace cuda {

// Host-side checks of AppendKv's arguments (device pointers are not read):
// empty when valid, else why not.
std::string AppendKvCheck(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, int total_q,
                          const float* k, const float* v);

// k and v: device fp32 [total_q, num_kv_heads, head_dim], total_q =
// qo_indptr[num_seqs] (qo_indptr is a DEVICE array, as are kv's pointers).
// Token j of sequence i goes to slot len - q_len_i + j of stream
// i * num_kv_heads + h, converted to kv.dtype with round-to-nearest-even
// (bit-identical to ConvertFromF32 for finite values).
// REQUIRES (not checked on the device): every stream of sequence i holds at
// least q_len_i plain slots, as kvlab::AppendKVCheck verifies on host copies.
// Returns cudaErrorInvalidValue (AppendKvCheck says why), cudaErrorNotSupported
// for head_dim not a multiple of 4, or the launch error. Asynchronous.
cudaError_t AppendKv(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, int total_q,
                     const float* k, const float* v, cudaStream_t stream);

// Seal jobs (DEVICE arrays of num_jobs entries): encode plain slots
// [first_slot[i], first_slot[i] + enc.tokens_per_block) of stream stream[i]
// into encoded block dst_block[i] of the encoded arena.
struct SealJobs {
  int num_jobs = 0;
  const int32_t* stream = nullptr;
  const int32_t* first_slot = nullptr;
  const int32_t* dst_block = nullptr;
};

// Host-side checks of EncodeSealKivi: empty when valid.
std::string EncodeSealKiviCheck(const PagedKV& kv, const KvEncoding& enc, const uint8_t* enc_base,
                                int64_t enc_block_bytes, const SealJobs& jobs);

// Encodes each job's slots (read from the plain cache in kv.dtype, converted
// exactly to fp32) with the KIVI format `enc` (either axis for K and V),
// writing the same bytes as EncodeKvBlock would: fp16 (round-to-nearest-even)
// zero = min and scale = (max - min) / (2^bits - 1), codes rint((x - zero) /
// scale) clamped, packed little-endian. Only KIVI (int8 / fp8, EncodeSealQuant8:
// cudaErrorNotSupported). REQUIRES: the slots exist (not checked on the device).
cudaError_t EncodeSealKivi(const PagedKV& kv, const KvEncoding& enc, uint8_t* enc_base, int64_t enc_block_bytes,
                           const SealJobs& jobs, cudaStream_t stream);

// Host-side checks of EncodeSealQuant8: empty when valid.
std::string EncodeSealQuant8Check(const PagedKV& kv, const KvEncoding& enc, const uint8_t* enc_base,
                                  int64_t enc_block_bytes, const SealJobs& jobs);

// The int8 / fp8 (e4m3) formats of `enc` (per-token or per-block scales), as
// EncodeKvBlock writes them: fp16 (round-to-nearest-even) scale = absmax /
// 127 (int8) or / 448 (fp8); codes of x / scale (IEEE division), int8 by
// rint and clamping to +-127, fp8 by the CUDA conversion with satfinite
// (round-to-nearest-even, saturating at 448); 0 when the scale is 0. Bytes
// equal EncodeKvBlock's for finite inputs (a NaN input may give another fp8
// code). KIVI: cudaErrorNotSupported. REQUIRES: the slots exist.
cudaError_t EncodeSealQuant8(const PagedKV& kv, const KvEncoding& enc, uint8_t* enc_base, int64_t enc_block_bytes,
                             const SealJobs& jobs, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvlab
