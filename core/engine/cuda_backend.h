// CudaBackend: the engine's CUDA path (EngineOptions::device = "cuda"). The
// model's projections, RoPE, MLP, norms and head run in libtorch on the
// device's tensors (LlamaModel::To); this backend holds the rest of a step on
// the device: the KV pools' arenas (cudaMalloc, handed out by BlockPool),
// the page tables (uploaded once per step), AppendKv for the new K/V,
// EncodeSealKivi for sealed KIVI blocks, PlanPagedDecode + PagedDecode for
// attention, and the rows moved by compaction. The host keeps the books
// (KVCache). Only the engine calls it; not thread-safe.
//
// Torch-free header (at::Tensor and c10::Device are only declared); the glue
// from tensors to the kernels' structs is core/engine/cuda_backend.cpp, built into
// kvlab_model when nvcc was found (KVLAB_HAVE_CUDA), and into
// cuda_engine_emu_test against the CUDA emulation (kernels/cuda/emu), where
// "device memory" is host memory and the model's tensors stay on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/block_pool.h"
#include "core/cache/kv_cache.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace at {
class Tensor;
}
namespace c10 {
struct Device;
}

namespace kvlab {

// OK when a CUDA device can run the engine here (cudaGetDeviceCount finds
// one and libtorch was built with CUDA), else why not, naming `option`.
Status CudaDeviceStatus(const std::string& option);

class CudaBackend {
 public:
  virtual ~CudaBackend() = default;

  // The torch device of the model's tensors: the current CUDA device, or
  // the CPU under the CUDA emulation.
  virtual c10::Device torch_device() const = 0;
  // The allocator of the KV pools' arenas (KVCache::Create's `device`).
  virtual const DeviceArenaAllocator& arena_allocator() const = 0;
  // Once, after the cache was created on arena_allocator().
  virtual void Attach(KVCache* cache) = 0;

  // One step: after KVCache::PlanStep, uploads the page table of all layers
  // and plans the attention calls. qo_indptr [B+1] as in PagedForward; with
  // slot_attn_offsets (per (layer, seq, head) of pt, as the CPU path's), the
  // attention each slot receives is accumulated for EndStep.
  virtual Status BeginStep(const PageTable& pt, const std::vector<int32_t>& qo_indptr,
                           const std::vector<int64_t>* slot_attn_offsets, int64_t slot_attn_total) = 0;
  // PagedForward::attention for layer `layer`. An error is kept for EndStep
  // (and the output is zeros).
  virtual at::Tensor Attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) = 0;
  // Waits for the step's kernels; the first error of the step, else OK and,
  // when asked for in BeginStep, *slot_attn (host, slot_attn_total floats).
  virtual Status EndStep(std::vector<float>* slot_attn) = 0;

  // Selection: KVCache::Compact of a stream plus the move of its kept rows
  // on the device (plain streams only; queued, run by FinishCompaction).
  virtual Status Compact(int64_t seq, int layer, int head, const std::vector<int64_t>& keep) = 0;
  virtual Status FinishCompaction() = 0;
  // KVCache::Seal of each sequence, encoding the sealed groups on the device.
  virtual Status Seal(const std::vector<int64_t>& seqs) = 0;
};

// What the CUDA path runs: refuses (InvalidArgument naming the policy or the
// shape) what it does not implement yet: key rotation at read time (sink /
// window with positions="cache"), offloading (placement policies), sealed
// encodings other than KIVI with keys per channel and values per token,
// selection together with a sealed encoding, head_dim other than 64 and 128,
// GQA groups the decode kernel does not serve.
struct CudaBackendOptions {
  const PolicyStack* policies = nullptr;
  CacheShape shape;
  int num_qo_heads = 0;
};
Status NewCudaBackend(const CudaBackendOptions& options, std::unique_ptr<CudaBackend>* out);

}  // namespace kvlab
