// Asynchronous block moves device <-> pinned host (see offload.h). Host code
// only: every move is a cudaMemcpyAsync on the engine's stream.
#include "kernels/cuda/offload.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace kvlab {
namespace cuda {

namespace {

// Checks a move list and queues one copy per coalesced run (dst <- src).
cudaError_t QueueRuns(const CopyEngine& engine, const uint8_t* src_base, uint8_t* dst_base, int64_t block_bytes,
                      const int32_t* src_blocks, const int32_t* dst_blocks, int n, cudaMemcpyKind kind,
                      int* num_copies) {
  if (num_copies != nullptr) *num_copies = 0;
  if (engine.stream == nullptr || n < 0 || block_bytes <= 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (src_base == nullptr || dst_base == nullptr || src_blocks == nullptr || dst_blocks == nullptr) {
    return cudaErrorInvalidValue;
  }
  for (int i = 0; i < n; ++i) {
    if (src_blocks[i] < 0 || dst_blocks[i] < 0) return cudaErrorInvalidValue;
  }
  const std::vector<BlockRun> runs = CoalesceBlockRuns(src_blocks, dst_blocks, n);
  for (const BlockRun& r : runs) {
    const cudaError_t err = cudaMemcpyAsync(dst_base + r.dst * block_bytes, src_base + r.src * block_bytes,
                                            static_cast<size_t>(r.count * block_bytes), kind, engine.stream);
    if (err != cudaSuccess) return err;
    if (num_copies != nullptr) ++*num_copies;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t CreateCopyEngine(int num_layers, CopyEngine* engine) {
  if (engine == nullptr || num_layers < 0) return cudaErrorInvalidValue;
  *engine = CopyEngine();
  cudaError_t err = cudaStreamCreateWithFlags(&engine->stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&engine->compute_done, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    engine->layer_ready.assign(static_cast<size_t>(num_layers), nullptr);
    for (cudaEvent_t& e : engine->layer_ready) {
      err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (err != cudaSuccess) break;
    }
  }
  if (err != cudaSuccess) DestroyCopyEngine(engine);
  return err;
}

cudaError_t DestroyCopyEngine(CopyEngine* engine) {
  if (engine == nullptr) return cudaErrorInvalidValue;
  cudaError_t first = cudaSuccess;
  auto note = [&first](cudaError_t err) {
    if (first == cudaSuccess) first = err;
  };
  if (engine->stream != nullptr) note(cudaStreamSynchronize(engine->stream));
  for (cudaEvent_t e : engine->layer_ready) {
    if (e != nullptr) note(cudaEventDestroy(e));
  }
  if (engine->compute_done != nullptr) note(cudaEventDestroy(engine->compute_done));
  if (engine->stream != nullptr) note(cudaStreamDestroy(engine->stream));
  *engine = CopyEngine();
  return first;
}

cudaError_t AllocPinned(int64_t bytes, uint8_t** out) {
  if (out == nullptr || bytes < 0) return cudaErrorInvalidValue;
  *out = nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1), cudaHostAllocDefault);
  if (err == cudaSuccess) *out = static_cast<uint8_t*>(p);
  return err;
}

cudaError_t FreePinned(uint8_t* p) { return p == nullptr ? cudaSuccess : cudaFreeHost(p); }

std::vector<BlockRun> CoalesceBlockRuns(const int32_t* src, const int32_t* dst, int n) {
  std::vector<BlockRun> runs;
  for (int i = 0; i < n; ++i) {
    if (!runs.empty()) {
      BlockRun& r = runs.back();
      if (static_cast<int64_t>(src[i]) == static_cast<int64_t>(r.src) + r.count &&
          static_cast<int64_t>(dst[i]) == static_cast<int64_t>(r.dst) + r.count) {
        ++r.count;
        continue;
      }
    }
    BlockRun r;
    r.src = src[i];
    r.dst = dst[i];
    r.count = 1;
    runs.push_back(r);
  }
  return runs;
}

cudaError_t OffloadBlocks(const CopyEngine& engine, const uint8_t* device_base, uint8_t* host_base,
                          int64_t block_bytes, const BlockMoves& moves, int* num_copies) {
  return QueueRuns(engine, device_base, host_base, block_bytes, moves.device_blocks, moves.host_blocks,
                   moves.num_blocks, cudaMemcpyDeviceToHost, num_copies);
}

cudaError_t PrefetchBlocks(const CopyEngine& engine, const uint8_t* host_base, uint8_t* device_base,
                           int64_t block_bytes, const BlockMoves& moves, int* num_copies) {
  return QueueRuns(engine, host_base, device_base, block_bytes, moves.host_blocks, moves.device_blocks,
                   moves.num_blocks, cudaMemcpyHostToDevice, num_copies);
}

cudaError_t CopyAfter(const CopyEngine& engine, cudaStream_t compute) {
  if (engine.stream == nullptr || engine.compute_done == nullptr) return cudaErrorInvalidValue;
  const cudaError_t err = cudaEventRecord(engine.compute_done, compute);
  if (err != cudaSuccess) return err;
  return cudaStreamWaitEvent(engine.stream, engine.compute_done, 0);
}

cudaError_t MarkLayerReady(const CopyEngine& engine, int layer) {
  if (engine.stream == nullptr || layer < 0 || static_cast<size_t>(layer) >= engine.layer_ready.size()) {
    return cudaErrorInvalidValue;
  }
  return cudaEventRecord(engine.layer_ready[static_cast<size_t>(layer)], engine.stream);
}

cudaError_t WaitLayerReady(const CopyEngine& engine, int layer, cudaStream_t compute) {
  if (layer < 0 || static_cast<size_t>(layer) >= engine.layer_ready.size()) return cudaErrorInvalidValue;
  return cudaStreamWaitEvent(compute, engine.layer_ready[static_cast<size_t>(layer)], 0);
}

cudaError_t SyncCopies(const CopyEngine& engine) {
  if (engine.stream == nullptr) return cudaErrorInvalidValue;
  return cudaStreamSynchronize(engine.stream);
}

}  // namespace cuda
}  // namespace kvlab
