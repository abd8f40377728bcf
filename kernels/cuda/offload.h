// Asynchronous block moves between the device pool and pinned host memory,
// the device side of core/offload_store.* (whose host tier is a BlockPool in
// host memory): a CopyEngine owns a copy stream and one event per layer, so
// that layer l+1's blocks are brought back while layer l computes and layer
// l's attention waits for its own blocks only. Plain structs, no libtorch;
// functions return a cudaError_t and never throw. One engine per device
// thread of control: its functions are not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace kvlab {
namespace cuda {

// A dedicated copy stream (non-blocking: it does not synchronise with the
// legacy default stream) and its events. Made by CreateCopyEngine, released
// by DestroyCopyEngine; copying the struct copies handles, not streams.
struct CopyEngine {
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;     // CopyAfter's event, on the compute stream
  std::vector<cudaEvent_t> layer_ready;   // one per layer, recorded on `stream`
};

cudaError_t CreateCopyEngine(int num_layers, CopyEngine* engine);
// Waits for the engine's copies, then destroys its stream and events (also
// after a partial CreateCopyEngine). The engine is left empty.
cudaError_t DestroyCopyEngine(CopyEngine* engine);

// Page-locked host memory for the host tier (cudaHostAlloc /
// cudaFreeHost): cudaMemcpyAsync from or to pageable memory is not
// asynchronous with respect to the host.
cudaError_t AllocPinned(int64_t bytes, uint8_t** out);
cudaError_t FreePinned(uint8_t* p);

// A list of block moves (HOST arrays): block device_blocks[i] of the device
// pool <-> block host_blocks[i] of the pinned host arena.
struct BlockMoves {
  const int32_t* device_blocks = nullptr;
  const int32_t* host_blocks = nullptr;
  int num_blocks = 0;
};

// A run of `count` blocks, src..src+count-1 -> dst..dst+count-1: one copy.
struct BlockRun {
  int32_t src = 0;
  int32_t dst = 0;
  int32_t count = 0;
};
// Joins consecutive pairs (src[i], dst[i]) whose src and dst both follow the
// previous pair's by one; keeps the list's order.
std::vector<BlockRun> CoalesceBlockRuns(const int32_t* src, const int32_t* dst, int n);

// Queues the copies (one cudaMemcpyAsync per coalesced run) on the engine's
// stream and returns at once; *num_copies (optional) receives the number of
// copies queued. Block b of a side starts at base + b * block_bytes. Returns
// cudaErrorInvalidValue, before queueing anything, for a null pointer, a
// negative block id or block_bytes <= 0.
// The copies are ordered after earlier work on the engine's stream only: call
// CopyAfter first when the compute stream still writes (offload) or reads
// (prefetch into reused blocks) them, and SyncCopies before the host reads
// the host copies or reuses pinned blocks.
cudaError_t OffloadBlocks(const CopyEngine& engine, const uint8_t* device_base, uint8_t* host_base,
                          int64_t block_bytes, const BlockMoves& moves, int* num_copies);
cudaError_t PrefetchBlocks(const CopyEngine& engine, const uint8_t* host_base, uint8_t* device_base,
                           int64_t block_bytes, const BlockMoves& moves, int* num_copies);

// The engine's stream waits for everything queued on `compute` so far.
cudaError_t CopyAfter(const CopyEngine& engine, cudaStream_t compute);

// Per-layer handshake: MarkLayerReady(layer) after queueing that layer's
// prefetches records layer_ready[layer] on the engine's stream;
// WaitLayerReady(layer, compute) makes `compute` wait for it (on the device,
// the host does not block) before the layer's attention. Queueing every
// layer's prefetch + mark up front and then, per layer, wait + attention
// overlaps layer l+1's copies with layer l's compute. A layer out of range is
// cudaErrorInvalidValue. Waiting on a layer never marked does not wait.
cudaError_t MarkLayerReady(const CopyEngine& engine, int layer);
cudaError_t WaitLayerReady(const CopyEngine& engine, int layer, cudaStream_t compute);

// Blocks the host until every copy queued on the engine has finished.
cudaError_t SyncCopies(const CopyEngine& engine);

}  // namespace cuda
}  // namespace kvlab
