// The CUDA attention backend (EngineOptions::device = "cuda"): the
// AttentionBackend (core/attention/backend.h) whose pools are device
// memory. The model's projections, RoPE, MLP, norms and head run in libtorch
// on the device's tensors (Attach moves the model there, LlamaModel::To);
// this backend holds the rest of a step on the device: the KV pools' arenas
// (cudaMalloc, handed out by BlockPool), the page tables (uploaded once per
// step), AppendKv for the new K/V, PlanPagedDecode + PagedDecode for
// attention, and, as the cache's DeviceKvOps, the rows moved by compaction and
// EncodeSealKivi for sealed KIVI blocks. The host keeps the books (KVCache).
// Only Engine::Create makes one; not thread-safe.
//
// Torch-free header. The glue from tensors to the kernels' structs is
// core/attention/cuda_backend.cpp (the step) and cuda_backend_cache.cpp (the
// cache's moves, what the kernels accept), built into kvlab_attention when nvcc
// was found (KVLAB_HAVE_CUDA), and into cuda_engine_emu_test against the CUDA
// emulation (kernels/cuda/emu), where "device memory" is host memory and the
// model's tensors stay on the CPU.
#pragma once

#include <memory>
#include <string>

#include "core/base/status.h"
#include "core/cache/cache_shape.h"
#include "core/attention/backend.h"
#include "policies/kv_policy.h"

namespace kvlab {

// OK when a CUDA device can run the engine here (cudaGetDeviceCount finds
// one and libtorch was built with CUDA), else why not, naming `option`.
Status CudaDeviceStatus(const std::string& option);

// What the CUDA path runs: refuses (InvalidArgument naming the policy or the
// shape) what it does not implement yet: key rotation at read time (sink /
// window with positions="cache"), offloading (placement policies), sealed
// encodings other than KIVI with keys per channel and values per token,
// selection together with a sealed encoding or with prefix caching,
// head_dim other than 64 and 128, GQA groups the decode kernel does not serve.
// The kernels compute exactly (KernelOptions are for the CPU kernels).
struct CudaBackendOptions {
  const PolicyStack* policies = nullptr;
  CacheShape shape;
  int num_qo_heads = 0;
  bool prefix_caching = false;
};
Status NewCudaBackend(const CudaBackendOptions& options, std::unique_ptr<AttentionBackend>* out);

}  // namespace kvlab
