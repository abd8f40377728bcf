// CompactStreams: kept rows to the front of each stream (see compact.h).
#include "kernels/cuda/compact.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace kvlab {
namespace cuda {

namespace {

constexpr int kThreads = 256;


struct CompactArgs : PageTableArgs<uint8_t> {
  const int32_t* last_block_len;
  int64_t row_bytes;  // head_dim * dtype bytes
  const int32_t* kept;
  const int64_t* kept_offsets;
  const int32_t* num_kept;
  float* slot_attn;  // may be null
  const int64_t* slot_attn_offsets;
  uint8_t* scratch;  // kept row r (= kept_offsets[s] + i): K at r * 2 * row_bytes, V right after
  float* scratch_attn;
  int32_t* new_last_block_len;  // may be null
  int32_t* num_freed_blocks;    // may be null
};

struct StreamView {
  int32_t num_blocks;
  int64_t len;
  int64_t num_kept;  // clamped to [0, len]
  int64_t kept_off;
};

__device__ __forceinline__ StreamView View(const CompactArgs& a, int s) {
  StreamView v;
  v.num_blocks = a.indptr[s + 1] - a.indptr[s];
  v.len = v.num_blocks == 0 ? 0 : static_cast<int64_t>(v.num_blocks - 1) * a.block_size + a.last_block_len[s];
  const int64_t n = a.num_kept[s];
  v.num_kept = n < 0 ? 0 : (n > v.len ? v.len : n);
  v.kept_off = a.kept_offsets[s];
  return v;
}

// Row `which` (0 = K, 1 = V) of slot `slot` of stream s.
__device__ __forceinline__ uint8_t* RowPtr(const CompactArgs& a, int s, int64_t slot, int which) {
  const int32_t b = a.indices[a.indptr[s] + static_cast<int32_t>(slot / a.block_size)];
  return a.base + static_cast<int64_t>(b) * a.block_bytes +
         (static_cast<int64_t>(which) * a.block_size + slot % a.block_size) * a.row_bytes;
}

// grid (num_streams, y). W: the widest word that divides the row and the
// alignments (uint4, uint32_t or uint8_t); one thread per word of K or V.
template <typename W, bool kToScratch>
__global__ void __launch_bounds__(kThreads) CompactKernel(const __grid_constant__ CompactArgs a) {
  const int s = blockIdx.x;
  const StreamView v = View(a, s);
  const int64_t words = a.row_bytes / static_cast<int64_t>(sizeof(W));
  const int64_t total = v.num_kept * 2 * words;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  for (int64_t e = first; e < total; e += stride) {
    const int64_t i = e / (2 * words);
    const int which = static_cast<int>((e / words) & 1);
    const int64_t w = e % words;
    const int64_t slot = a.kept[v.kept_off + i];
    if (slot < 0 || slot >= v.len) continue;  // REQUIRES violated: skip, never read outside the stream
    W* row = reinterpret_cast<W*>(kToScratch ? RowPtr(a, s, slot, which) : RowPtr(a, s, i, which));
    W* tmp = reinterpret_cast<W*>(a.scratch + ((v.kept_off + i) * 2 + which) * a.row_bytes);
    if (kToScratch) {
      tmp[w] = row[w];
    } else {
      row[w] = tmp[w];
    }
  }
  if (a.slot_attn != nullptr) {
    float* attn = a.slot_attn + a.slot_attn_offsets[s];
    // Gather the kept entries; write them back and zero the rest of the old length.
    for (int64_t i = first; i < (kToScratch ? v.num_kept : v.len); i += stride) {
      const int64_t slot = i < v.num_kept ? a.kept[v.kept_off + i] : -1;
      const bool valid = slot >= 0 && slot < v.len;
      if (kToScratch) {
        if (valid) a.scratch_attn[v.kept_off + i] = attn[slot];
      } else if (i >= v.num_kept) {
        attn[i] = 0.0f;
      } else if (valid) {
        attn[i] = a.scratch_attn[v.kept_off + i];
      }
    }
  }
  if (!kToScratch && blockIdx.y == 0 && threadIdx.x == 0) {
    const int64_t blocks_kept = (v.num_kept + a.block_size - 1) / a.block_size;
    if (a.new_last_block_len != nullptr) {
      a.new_last_block_len[s] = v.num_kept == 0 ? 0 : static_cast<int32_t>((v.num_kept - 1) % a.block_size + 1);
    }
    if (a.num_freed_blocks != nullptr) a.num_freed_blocks[s] = v.num_blocks - static_cast<int32_t>(blocks_kept);
  }
}

template <typename W>
cudaError_t LaunchBoth(const CompactArgs& a, int num_streams, unsigned y, cudaStream_t stream) {
  // Two launches: every old row is read (gathered) before any is overwritten.
  const dim3 grid(static_cast<unsigned>(num_streams), y);
  const cudaError_t err = LaunchKernel(CompactKernel<W, true>, grid, dim3(kThreads), 0, stream, a);
  if (err != cudaSuccess) return err;
  return LaunchKernel(CompactKernel<W, false>, grid, dim3(kThreads), 0, stream, a);
}


}  // namespace

std::string CompactStreamsCheck(const PagedKV& kv, const KeptSlots& kept, const float* slot_attn,
                                const int64_t* slot_attn_offsets) {
  if (kv.num_streams < 0) return "compact: num_streams must be >= 0";
  if (kv.num_streams == 0) return "";
  if (kv.block_size <= 0 || kv.head_dim <= 0) return "compact: block_size and head_dim must be positive";
  if (kv.block_bytes < 2LL * kv.block_size * kv.head_dim * DTypeBytes(kv.dtype)) {
    return "compact: block_bytes must be >= 2 * block_size * head_dim * dtype bytes";
  }
  if (kv.base == nullptr || kv.indptr == nullptr || kv.indices == nullptr || kv.last_block_len == nullptr) {
    return "compact: a pointer of the page table is null";
  }
  if (kept.slots == nullptr || kept.offsets == nullptr || kept.num_kept == nullptr || kept.capacity < 0) {
    return "compact: kept.slots, kept.offsets and kept.num_kept must not be null (and capacity >= 0)";
  }
  if (slot_attn != nullptr && slot_attn_offsets == nullptr) return "compact: slot_attn needs slot_attn_offsets";
  return "";
}

cudaError_t CompactStreams(void* temp, size_t* temp_bytes, const PagedKV& kv, const KeptSlots& kept, float* slot_attn,
                           const int64_t* slot_attn_offsets, const CompactResult& result, cudaStream_t stream) {
  if (temp_bytes == nullptr || !CompactStreamsCheck(kv, kept, slot_attn, slot_attn_offsets).empty()) {
    return cudaErrorInvalidValue;
  }
  if (kv.num_streams == 0) {
    if (temp == nullptr) *temp_bytes = 0;
    return cudaSuccess;
  }
  const int64_t row_bytes = static_cast<int64_t>(kv.head_dim) * DTypeBytes(kv.dtype);
  const size_t rows_bytes = TempAlignUp(static_cast<size_t>(kept.capacity) * 2 * static_cast<size_t>(row_bytes));
  const size_t need = rows_bytes + TempAlignUp(std::max<size_t>(static_cast<size_t>(kept.capacity) * sizeof(float), 1));
  if (temp == nullptr) {
    *temp_bytes = need;
    return cudaSuccess;
  }
  if (*temp_bytes < need || !Aligned(temp, kTempAlign)) return cudaErrorInvalidValue;

  CompactArgs a{};
  SetPageTable(kv, &a);
  a.last_block_len = kv.last_block_len;
  a.row_bytes = row_bytes;
  a.kept = kept.slots;
  a.kept_offsets = kept.offsets;
  a.num_kept = kept.num_kept;
  a.slot_attn = slot_attn;
  a.slot_attn_offsets = slot_attn_offsets;
  a.scratch = static_cast<uint8_t*>(temp);
  a.scratch_attn = reinterpret_cast<float*>(static_cast<uint8_t*>(temp) + rows_bytes);
  a.new_last_block_len = result.new_last_block_len;
  a.num_freed_blocks = result.num_freed_blocks;

  // About four words per thread on average over the kept rows; at most 64 CTAs per stream.
  const int64_t per_stream_words = kept.capacity * 2 * (row_bytes / 4) / kv.num_streams;
  const unsigned y =
      static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, per_stream_words / (4 * kThreads))));
  if (row_bytes % 16 == 0 && kv.block_bytes % 16 == 0 && Aligned(kv.base, 16)) {
    return LaunchBoth<uint4>(a, kv.num_streams, y, stream);
  }
  if (row_bytes % 4 == 0 && kv.block_bytes % 4 == 0 && Aligned(kv.base, 4)) {
    return LaunchBoth<uint32_t>(a, kv.num_streams, y, stream);
  }
  return LaunchBoth<uint8_t>(a, kv.num_streams, y, stream);
}

}  // namespace cuda
}  // namespace kvlab
