// AttentionBackend: the one interface behind LlamaModel::ForwardPaged's
// attention. Per step the engine hands it the page table (BeginStep); per
// layer the model hands it the new K/V to write (Append) and the queries to
// attend (Attend); EndStep waits for the step and reports its first error.
// Three implementations: the optimised CPU kernels and the reference kernels
// (NewHostAttention, core/model/paged_attention_cpu.cpp) and CUDA
// (core/engine/cuda_backend.h). Engine::Create chooses one; nothing else
// branches on the device. Torch-free header (at::Tensor only declared).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "policies/kv_policy.h"

namespace at {
class Tensor;
}

namespace kvlab {

class LlamaModel;

// One step, after KVCache::Reserve and KVCache::PlanStep.
struct AttentionStep {
  const PageTable* page_table = nullptr;
  const std::vector<int32_t>* qo_indptr = nullptr;  // [B+1] new tokens per sequence
  // Offloaded blocks the step reads, to be loaded into their staging blocks
  // before each layer reads them (null or empty: none).
  const StagingPlan* staging = nullptr;
  // Per-slot attention wanted (a policy ranks by it): sized by
  // SlotAttention::Reset for page_table, filled by EndStep. Null: not wanted.
  SlotAttention* slot_attn = nullptr;
  // The stack's read policy (KVPolicy::SelectReadBlocks): each layer's decode
  // streams read only the blocks it picks. Null: every block.
  const KVPolicy* read_policy = nullptr;
  // Receives the K/V bytes the step's decode attention read (added to), and
  // what a dense read would have. Null: not counted.
  ReadStats* read_stats = nullptr;
};

// What a layer's attention needs beyond its queries.
struct LayerAttention {
  int layer = 0;
  float sm_scale = 1.0f;
  // Keys stored before RoPE: the kernel rotates q and keys by slot
  // (AttentionParams::rope_inv_freq), [head_dim / 2]. Null: keys are rotated.
  const float* rope_inv_freq = nullptr;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const char* Name() const = 0;  // "cpu", "reference", "cuda"
  // Whether the pools and the model's tensors live on a device (else host
  // memory, where the model can also read the page table's blocks itself).
  virtual bool on_device() const { return false; }
  // The allocator of the KV pools' arenas (KVCache::Create's `device`);
  // nullptr: host memory.
  virtual const DeviceArenaAllocator* arena_allocator() const { return nullptr; }
  // Once, after the cache was created on arena_allocator(): the backend
  // keeps `cache` (and owns its device bytes, KVCache::SetDeviceOps) and
  // moves `model` where it computes (LlamaModel::To).
  virtual Status Attach(KVCache* cache, LlamaModel* model) = 0;

  virtual Status BeginStep(const AttentionStep& step) = 0;
  // Writes layer `layer`'s new K and V, [T, H_stored, d] fp32 contiguous on
  // the model's device, into the slots the step reserved (after loading the
  // layer's offloaded blocks). An error is kept for EndStep.
  virtual void Append(int layer, const at::Tensor& k, const at::Tensor& v) = 0;
  // The attention of the layer's queries q [T, H_q, d] (fp32, contiguous, on
  // the model's device) over the cache, causal by slot and within
  // first_visible on window layers: [T, H_q, d] on the same device. Adds to
  // the step's slot_attn when it was asked for. An error is kept for EndStep
  // (the output is then zeros).
  virtual at::Tensor Attend(const LayerAttention& a, const at::Tensor& q) = 0;
  // Waits for the step's work; its first error, else OK and the step's
  // slot_attn filled.
  virtual Status EndStep() = 0;
};

// The CPU backends for a model of num_qo_heads query heads: the optimised
// kernels (PagedAttentionCpu and the encoded and KIVI paths, planned once per
// step, with `kernels`' arithmetic options), or with `reference` the
// specification kernels (which compute exactly, ignoring `kernels`).
std::unique_ptr<AttentionBackend> NewHostAttention(bool reference, const KernelOptions& kernels, int num_qo_heads);

}  // namespace kvlab
