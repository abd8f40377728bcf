// Room core/attention/: the attention backends behind LlamaModel::ForwardPaged,
// in one room. Includes core/cache, kernels, policies and core/base; the
// model (core/model) and the engine (core/engine) call it.
//
// AttentionBackend: per step the engine hands it the cache's StepView
// (BeginStep: page tables, windows, staging, the per-slot attention buffer,
// the read policy); per layer the model hands it the new K/V to write
// (Append) and the queries to attend (Attend), with the layer's own variant
// (scale, keys before RoPE, logit soft-capping); EndStep waits for the step
// and reports its first error. The model never reads the page table. Three
// implementations: the optimised CPU kernels and the reference kernels
// (NewHostAttention, core/attention/host_backend.cpp) and CUDA
// (core/attention/cuda_backend.h). Engine::Create chooses one; nothing else
// branches on the device. Torch-free header (at::Tensor only declared).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/cache/cache_step.h"
#include "core/cache/kv_cache.h"
#include "policies/kv_policy.h"

namespace at {
class Tensor;
}

namespace kvlab {

// What a layer's attention needs beyond its queries.
struct LayerAttention {
  int layer = 0;
  float sm_scale = 1.0f;
  // Keys stored before RoPE: the kernel rotates q and keys by slot
  // (AttentionParams::rope_inv_freq), [head_dim / 2]. Null: keys are rotated.
  const float* rope_inv_freq = nullptr;
  // > 0: scores are soft-capped, cap * tanh(score / cap), before the softmax
  // (Gemma 2's attn_logit_softcapping). The host backends compute it with
  // the reference kernel, over plain blocks; CUDA refuses such models.
  float logit_softcap = 0;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const char* Name() const = 0;  // "cpu", "reference", "cuda"
  // Whether the pools and the model's tensors live on a device (else host memory).
  virtual bool on_device() const { return false; }
  // Where the model's tensors go (LlamaModel::To): "cpu", or "cuda:N".
  virtual std::string torch_device() const { return "cpu"; }
  // The allocator of the KV pools' arenas (KVCache::Create's `device`);
  // nullptr: host memory.
  virtual const DeviceArenaAllocator* arena_allocator() const { return nullptr; }
  // Once, after the cache was created on arena_allocator(): the backend
  // keeps `cache` (and owns its device bytes, KVCache::SetDeviceOps).
  virtual Status Attach(KVCache* cache) = 0;

  // The step's view from KVCache::BeginStep; the backend reads it until
  // EndStep and adds to its slot_attention (when wanted) and reads.
  virtual Status BeginStep(StepView* view) = 0;
  // Writes layer `layer`'s new K and V, [T, H_stored, d] fp32 contiguous on
  // the model's device, into the slots the step reserved (after loading the
  // layer's offloaded blocks). An error is kept for EndStep.
  virtual void Append(int layer, const at::Tensor& k, const at::Tensor& v) = 0;
  // The attention of the layer's queries q [T, H_q, d] (fp32, contiguous, on
  // the model's device) over the cache, causal by slot and within
  // first_visible on window layers: [T, H_q, d] on the same device. Adds to
  // the view's slot_attention when it was asked for. An error is kept for EndStep
  // (the output is then zeros).
  virtual at::Tensor Attend(const LayerAttention& a, const at::Tensor& q) = 0;
  // Waits for the step's work; its first error, else OK and the view's
  // slot_attention filled.
  virtual Status EndStep() = 0;
};

// The CPU backends for a model of num_qo_heads query heads: the optimised
// kernels (PagedAttentionCpu and the encoded and KIVI paths, planned once per
// step, with `kernels`' arithmetic options), or with `reference` the
// specification kernels (which compute exactly, ignoring `kernels`).
std::unique_ptr<AttentionBackend> NewHostAttention(bool reference, const KernelOptions& kernels, int num_qo_heads);

}  // namespace kvlab
