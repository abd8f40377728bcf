// CompactStreams: the cache side of an eviction on the device. Moves each
// stream's kept K/V rows (KeptSlots: the selection policy's keep lists) to the
// front of its page table, in order, and compacts the slot_attn accumulator
// the same way; the blocks left empty at the tail are reported for the host to
// free. Called by the CUDA engine (core/attention/cuda_backend_cache.cpp,
// FinishCompaction) after KVCache::Compact has done the books. Plain structs
// and raw device pointers, no libtorch; returns a cudaError_t and never throws.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/paged_kv.h"

namespace kvlab {
namespace cuda {

// The kept slots, per stream: slots + offsets[s] holds num_kept[s] slot
// indices in ascending order.
struct KeptSlots {
  int32_t* slots = nullptr;          // DEVICE
  const int64_t* offsets = nullptr;  // DEVICE [num_streams]
  int32_t* num_kept = nullptr;       // DEVICE [num_streams]
  int64_t capacity = 0;              // HOST: entries of slots; every offsets[s] + num_kept[s] <= this
};

// What the host needs to shrink its page tables (DEVICE arrays
// [num_streams], each optional). After the call stream s has length
// num_kept[s] and keeps the first ceil(num_kept[s] / block_size) of its
// blocks; the other num_freed_blocks[s] blocks, the tail of its indices list,
// hold nothing and are the caller's to free.
struct CompactResult {
  int32_t* new_last_block_len = nullptr;  // 0 for a stream left empty
  int32_t* num_freed_blocks = nullptr;
};

// Host-side checks of CompactStreams' arguments: empty when valid.
std::string CompactStreamsCheck(const PagedKV& kv, const KeptSlots& kept, const float* slot_attn,
                                const int64_t* slot_attn_offsets);

// For every stream s of kv (plain slots only; kv's arrays are DEVICE arrays
// and are not modified): K and V of slot kept.slots[kept.offsets[s] + i] move
// to slot i, for i < num_kept[s]; rows past num_kept[s] are left as they
// were. With slot_attn (AttentionParams' layout, may be null) the same gather
// is applied to slot_attn + slot_attn_offsets[s], and its entries
// [num_kept[s], old length) are set to 0 so that slots appended later start
// from nothing. Any storage dtype: rows are copied as bytes.
// REQUIRES (not checked on the device): each stream's kept slots ascending,
// in [0, length); num_kept[s] <= length. Out-of-range entries are skipped.
//
// Not in place: kept rows are gathered into `temp` first, then written back
// (two kernels, so every read of the old rows happens before any write). In
// place would be safe only one row at a time in ascending order (kept[i] >= i,
// so row i may still be the source of an earlier destination), which
// serialises the copy. Two phases like CUB: temp == nullptr sets *temp_bytes
// (kept.capacity * (2 * head_dim * dtype bytes + 4), rounded up) and runs
// nothing. Asynchronous on `stream`.
//
// Returns cudaErrorInvalidValue (CompactStreamsCheck says why, or temp_bytes
// too small), or the first CUDA error.
cudaError_t CompactStreams(void* temp, size_t* temp_bytes, const PagedKV& kv, const KeptSlots& kept, float* slot_attn,
                           const int64_t* slot_attn_offsets, const CompactResult& result, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvlab
