// SelectTopK: H2O's kept slots on the device (see select_topk.h).
#include "kernels/cuda/select_topk.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

#ifdef KVLAB_CUDA_EMULATION
#include <vector>  // the host-side stand-in for the CUB sort
#else
#include <cub/device/device_segmented_sort.cuh>
#endif

namespace kvlab {
namespace cuda {

namespace {

constexpr int kThreads = 256;


// One stream's selection parameters, as H2OPolicy::SelectSlots derives them.
struct StreamPlan {
  int32_t n;       // slots
  int32_t heavy;   // heavy hitters kept (when not keep_all)
  int64_t older;   // candidates for heavy hitters: slots [0, older)
  bool keep_all;   // n <= heavy + recent: nothing is evicted
};

__device__ __forceinline__ StreamPlan PlanStream(const int32_t* length, const int32_t* heavy, const int32_t* recent,
                                                 int s) {
  StreamPlan p;
  p.n = max(length[s], 0);
  p.heavy = max(heavy[s], 0);
  const int64_t r = max(recent[s], 0);
  p.keep_all = static_cast<int64_t>(p.n) <= static_cast<int64_t>(p.heavy) + r;
  p.older = p.keep_all ? 0 : p.n - r;  // > heavy when not keep_all
  return p;
}

// Ascending keys are the policy's order: higher score first (NaN as -inf, -0
// as +0), then lower slot. Slots are unique, so keys are.
__device__ __forceinline__ uint64_t SlotKey(float v, int64_t slot) {
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  const uint32_t u = __float_as_uint(v);
  const uint32_t ascending = (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(slot);
}

struct KeyArgs {
  int num_streams;
  const float* slot_attn;
  const int64_t* slot_attn_offsets;
  const int32_t* length;
  const int32_t* heavy;
  const int32_t* recent;
  uint64_t* keys;       // at slot_attn_offsets[s] + slot
  int64_t* seg_begin;   // [num_streams]: the stream's candidates, a CUB segment
  int64_t* seg_end;
};

// grid (num_streams, y): CTA (s, y) writes every gridDim.y-th chunk of stream s's keys.
__global__ void __launch_bounds__(kThreads) BuildKeysKernel(const __grid_constant__ KeyArgs a) {
  const int s = blockIdx.x;
  const StreamPlan p = PlanStream(a.length, a.heavy, a.recent, s);
  const int64_t off = a.slot_attn_offsets[s];
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    a.seg_begin[s] = off;
    a.seg_end[s] = off + p.older;
  }
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < p.older;
       i += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    a.keys[off + i] = SlotKey(a.slot_attn != nullptr ? a.slot_attn[off + i] : 0.0f, i);
  }
}

struct SelectArgs {
  const int64_t* slot_attn_offsets;
  const int32_t* length;
  const int32_t* heavy;
  const int32_t* recent;
  const uint64_t* keys;         // unsorted, as BuildKeysKernel wrote them
  const uint64_t* sorted_keys;  // each segment ascending
  int32_t* slots;
  const int64_t* out_offsets;
  int32_t* num_kept;
};

// One CTA per stream. A candidate is kept when its key is at most the
// heavy-th smallest of its stream; kept candidates are written in slot order
// through a block-wide inclusive scan of keep flags (Hillis-Steele in shared
// memory: plain __syncthreads code, so the emulation runs it too), then the
// recent slots follow.
__global__ void __launch_bounds__(kThreads) SelectKernel(const __grid_constant__ SelectArgs a) {
  const int s = blockIdx.x;
  const StreamPlan p = PlanStream(a.length, a.heavy, a.recent, s);
  int32_t* dst = a.slots + a.out_offsets[s];
  const int tid = threadIdx.x;
  if (p.keep_all) {
    for (int64_t i = tid; i < p.n; i += blockDim.x) dst[i] = static_cast<int32_t>(i);
    if (tid == 0) a.num_kept[s] = p.n;
    return;
  }
  const int64_t off = a.slot_attn_offsets[s];
  const bool any_heavy = p.heavy > 0;
  const uint64_t threshold = any_heavy ? a.sorted_keys[off + p.heavy - 1] : 0;
  int* scan = reinterpret_cast<int*>(DynamicSmem());
  int64_t base = 0;  // heavy hitters written so far (the same in every thread)
  for (int64_t c = 0; any_heavy && c < p.older; c += blockDim.x) {
    const int64_t i = c + tid;
    const bool keep = i < p.older && a.keys[off + i] <= threshold;
    scan[tid] = keep ? 1 : 0;
    __syncthreads();
    for (int d = 1; d < static_cast<int>(blockDim.x); d <<= 1) {
      const int add = tid >= d ? scan[tid - d] : 0;
      __syncthreads();
      scan[tid] += add;
      __syncthreads();
    }
    if (keep) dst[base + scan[tid] - 1] = static_cast<int32_t>(i);
    base += scan[blockDim.x - 1];
    __syncthreads();  // scan is rewritten by the next chunk
  }
  // base == heavy here: the keys are unique, so exactly `heavy` are <= the heavy-th.
  const int64_t recent = p.n - p.older;
  for (int64_t j = tid; j < recent; j += blockDim.x) dst[p.heavy + j] = static_cast<int32_t>(p.older + j);
  if (tid == 0) a.num_kept[s] = static_cast<int32_t>(p.heavy + recent);
}

struct TempLayout {
  size_t keys_in, keys_out, seg_begin, seg_end, sort, sort_bytes, total;
};

// Sorts each stream's segment of keys_in into keys_out (ascending).
cudaError_t SortSegments(void* sort_temp, size_t* sort_bytes, const uint64_t* keys_in, uint64_t* keys_out,
                         int64_t num_items, int num_streams, const int64_t* seg_begin, const int64_t* seg_end,
                         cudaStream_t stream) {
#ifdef KVLAB_CUDA_EMULATION
  // Emulated device memory is host memory and BuildKeysKernel has already run
  // (launches are synchronous in the emulation): sort on the host.
  (void)stream;
  if (sort_temp == nullptr) {
    *sort_bytes = 0;
    return cudaSuccess;
  }
  for (int s = 0; s < num_streams; ++s) {
    if (seg_begin[s] < 0 || seg_end[s] > num_items) return cudaErrorInvalidValue;
    std::copy(keys_in + seg_begin[s], keys_in + seg_end[s], keys_out + seg_begin[s]);
    std::sort(keys_out + seg_begin[s], keys_out + seg_end[s]);
  }
  return cudaSuccess;
#else
  // Segments may be non-contiguous (gaps are neither read nor written) and the
  // keys unique, so the unstable sort gives the one right order.
  return cub::DeviceSegmentedSort::SortKeys(sort_temp, *sort_bytes, keys_in, keys_out, num_items, num_streams,
                                            seg_begin, seg_end, stream);
#endif
}

cudaError_t Layout(const TopKInput& in, TempLayout* t) {
  t->keys_in = 0;
  t->keys_out = t->keys_in + TempAlignUp(static_cast<size_t>(in.slot_attn_size) * sizeof(uint64_t));
  t->seg_begin = t->keys_out + TempAlignUp(static_cast<size_t>(in.slot_attn_size) * sizeof(uint64_t));
  t->seg_end = t->seg_begin + TempAlignUp(static_cast<size_t>(in.num_streams) * sizeof(int64_t));
  t->sort = t->seg_end + TempAlignUp(static_cast<size_t>(in.num_streams) * sizeof(int64_t));
  t->sort_bytes = 0;
  const cudaError_t err = SortSegments(nullptr, &t->sort_bytes, nullptr, nullptr, in.slot_attn_size, in.num_streams,
                                       nullptr, nullptr, nullptr);
  t->total = t->sort + TempAlignUp(std::max<size_t>(t->sort_bytes, 1));
  return err;
}

}  // namespace

std::string SelectTopKCheck(const TopKInput& in, const KeptSlots& out) {
  if (in.num_streams < 0) return "select_topk: num_streams must be >= 0";
  if (in.num_streams == 0) return "";
  if (in.slot_attn_offsets == nullptr || in.length == nullptr || in.heavy == nullptr || in.recent == nullptr) {
    return "select_topk: slot_attn_offsets, length, heavy and recent must not be null";
  }
  if (in.slot_attn_size < 0) return "select_topk: slot_attn_size must be >= 0";
  if (out.slots == nullptr || out.offsets == nullptr || out.num_kept == nullptr || out.capacity < 0) {
    return "select_topk: out.slots, out.offsets and out.num_kept must not be null";
  }
  return "";
}

cudaError_t SelectTopK(void* temp, size_t* temp_bytes, const TopKInput& in, const KeptSlots& out,
                       cudaStream_t stream) {
  if (temp_bytes == nullptr || !SelectTopKCheck(in, out).empty()) return cudaErrorInvalidValue;
  if (in.num_streams == 0) {
    if (temp == nullptr) *temp_bytes = 0;
    return cudaSuccess;
  }
  TempLayout t;
  cudaError_t err = Layout(in, &t);
  if (err != cudaSuccess) return err;
  if (temp == nullptr) {
    *temp_bytes = t.total;
    return cudaSuccess;
  }
  if (*temp_bytes < t.total || !Aligned(temp, kTempAlign)) return cudaErrorInvalidValue;
  uint8_t* base = static_cast<uint8_t*>(temp);
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(base + t.keys_in);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(base + t.keys_out);
  int64_t* seg_begin = reinterpret_cast<int64_t*>(base + t.seg_begin);
  int64_t* seg_end = reinterpret_cast<int64_t*>(base + t.seg_end);

  KeyArgs k{};
  k.num_streams = in.num_streams;
  k.slot_attn = in.slot_attn;
  k.slot_attn_offsets = in.slot_attn_offsets;
  k.length = in.length;
  k.heavy = in.heavy;
  k.recent = in.recent;
  k.keys = keys_in;
  k.seg_begin = seg_begin;
  k.seg_end = seg_end;
  // About four keys per thread on average; at most 64 CTAs per stream.
  const int64_t per_stream = in.slot_attn_size / in.num_streams;
  const unsigned y = static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, per_stream / (4 * kThreads))));
  err = LaunchKernel(BuildKeysKernel, dim3(static_cast<unsigned>(in.num_streams), y), dim3(kThreads), 0, stream, k);
  if (err != cudaSuccess) return err;

  size_t sort_bytes = t.sort_bytes;
  err = SortSegments(base + t.sort, &sort_bytes, keys_in, keys_out, in.slot_attn_size, in.num_streams, seg_begin,
                     seg_end, stream);
  if (err != cudaSuccess) return err;

  SelectArgs a{};
  a.slot_attn_offsets = in.slot_attn_offsets;
  a.length = in.length;
  a.heavy = in.heavy;
  a.recent = in.recent;
  a.keys = keys_in;
  a.sorted_keys = keys_out;
  a.slots = out.slots;
  a.out_offsets = out.offsets;
  a.num_kept = out.num_kept;
  return LaunchKernel(SelectKernel, dim3(static_cast<unsigned>(in.num_streams)), dim3(kThreads),
                      kThreads * sizeof(int), stream, a);
}

}  // namespace cuda
}  // namespace kvlab
