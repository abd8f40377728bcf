// SelectTopK: H2O's choice of the slots to keep, per stream, on the device:
// the `recent` last slots plus the `heavy` others with the highest accumulated
// attention (policies/h2o.cpp's rule). Core calls it before CompactStreams
// (compact.h). Plain structs and raw device pointers, no libtorch; returns a
// cudaError_t and never throws.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace kvlab {
namespace cuda {

// Input, per stream s of num_streams (DEVICE arrays unless said otherwise).
struct TopKInput {
  int num_streams = 0;
  // AttentionParams' layout: slot_attn + slot_attn_offsets[s] is stream s's
  // [length[s]] array of accumulated attention. slot_attn may be null (every
  // score 0, as the CPU policy treats a missing score); the offsets may not.
  const float* slot_attn = nullptr;
  const int64_t* slot_attn_offsets = nullptr;
  int64_t slot_attn_size = 0;  // HOST: entries of slot_attn; every offsets[s] + length[s] <= this
  const int32_t* length = nullptr;  // [num_streams] slots in the stream
  const int32_t* heavy = nullptr;   // [num_streams] heavy hitters to keep (negative = 0)
  const int32_t* recent = nullptr;  // [num_streams] most recent slots to keep (negative = 0)
};

// The kept slots, per stream: slots + offsets[s] holds num_kept[s] slot
// indices in ascending order. Written by SelectTopK, read by CompactStreams.
struct KeptSlots {
  int32_t* slots = nullptr;          // DEVICE
  const int64_t* offsets = nullptr;  // DEVICE [num_streams]
  int32_t* num_kept = nullptr;       // DEVICE [num_streams]
  int64_t capacity = 0;              // HOST: entries of slots; every offsets[s] + num_kept[s] <= this
};

// Host-side checks of SelectTopK's arguments (device arrays are not read):
// empty when valid, else why not.
std::string SelectTopKCheck(const TopKInput& in, const KeptSlots& out);

// For every stream, with n = length[s], budget = heavy[s] + recent[s]:
//  - n <= budget: keeps every slot 0..n-1 (the policy evicts nothing);
//  - otherwise keeps slots [n - recent, n) and the `heavy` slots of [0, n -
//    recent) with the highest score, NaN counting as -inf and -0 as +0, equal
//    scores going to the lower slot index: exactly H2OPolicy::SelectSlots.
// num_kept[s] = min(n, budget); REQUIRES capacity for it at out.offsets[s].
//
// Two phases, like CUB: with temp == nullptr only *temp_bytes is set (from
// num_streams, slot_attn_size and CUB's query, which needs the device) and
// nothing runs; then
// call again with temp of at least that many bytes (256-byte aligned, as
// cudaMalloc's). Asynchronous on `stream`.
//
// How: a kernel writes one 64-bit key per candidate slot, (~orderable(score)
// << 32) | slot, so that ascending keys are the policy's order and no two are
// equal; cub::DeviceSegmentedSort::SortKeys sorts each stream's candidates (a
// segment); a kernel (one CTA per stream) keeps a candidate when its key is at
// most the heavy-th smallest and writes kept slots in ascending order through
// a block-wide prefix sum. Under the CPU emulation (emu/) the CUB sort is
// replaced by std::sort on the host (emulated device memory is host memory);
// the two kernels are the same code in both builds.
//
// Returns cudaErrorInvalidValue (SelectTopKCheck says why, or temp_bytes too
// small), or the first CUDA error.
cudaError_t SelectTopK(void* temp, size_t* temp_bytes, const TopKInput& in, const KeptSlots& out,
                       cudaStream_t stream);

}  // namespace cuda
}  // namespace kvlab
