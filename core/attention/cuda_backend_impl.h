// The CUDA attention backend's class, shared by its two source files:
// cuda_backend.cpp (one step: page tables, AppendKv, PagedDecode) and
// cuda_backend_cache.cpp (the cache's row moves and sealing as its
// DeviceKvOps, what the kernels accept, the factory). Included by those two
// only. Device-generic libtorch only (at::Device, Tensor::to, data_ptr,
// from_blob): it builds against Debian's CPU-only libtorch, and under the CUDA
// emulation the same code runs with every tensor on the CPU.
#pragma once

// libtorch first: the CUDA emulation's <cuda_runtime_api.h>, reached through
// the kernels' headers, defines macros (threadIdx...) and a global min/max
// that must not reach libtorch's headers.
#include <ATen/ATen.h>

#include "core/attention/cuda_backend.h"

#include <string>
#include <vector>

#include "kernels/cuda/append_kv.h"
#include "kernels/cuda/compact.h"
#include "kernels/cuda/paged_decode.h"

namespace kvlab {

inline std::string CudaErrorText(cudaError_t e) { return std::string(cudaGetErrorString(e)); }

// The decode kernel's shape for `num_seqs` sequences of a cache of `sh`.
inline cuda::PagedDecodeShape DecodeShapeOf(const CacheShape& sh, int num_qo_heads, int num_seqs) {
  cuda::PagedDecodeShape ds;
  ds.num_seqs = num_seqs;
  ds.num_qo_heads = num_qo_heads;
  ds.num_kv_heads = sh.num_kv_heads;
  ds.head_dim = sh.head_dim;
  ds.dtype = sh.dtype;
  if (sh.encoded) {
    ds.enc_tokens_per_block = sh.enc.tokens_per_block;
    ds.enc_block_bytes = sh.enc.BlockBytes();
  }
  return ds;
}

class CudaBackendImpl : public AttentionBackend, public DeviceKvOps {
 public:
  explicit CudaBackendImpl(const CudaBackendOptions& o);
  ~CudaBackendImpl() override;

  // AttentionBackend (cuda_backend.cpp).
  const char* Name() const override { return "cuda"; }
  bool on_device() const override { return true; }
  const DeviceArenaAllocator* arena_allocator() const override { return &allocator_; }
  std::string torch_device() const override;
  Status Attach(KVCache* cache) override;
  Status BeginStep(StepView* view) override;
  void Append(int layer, const at::Tensor& k, const at::Tensor& v) override;
  at::Tensor Attend(const LayerAttention& a, const at::Tensor& q) override;
  Status EndStep() override;

  // DeviceKvOps (cuda_backend_cache.cpp).
  void Compacted(const std::vector<int32_t>& blocks_before, int64_t tokens_before,
                 const std::vector<int64_t>& keep) override;
  Status FinishCompaction() override;
  void Sealed(const std::vector<int32_t>& plain_before, int64_t plain_tokens_before,
              const std::vector<int32_t>& new_enc_blocks) override;
  Status FinishSeal() override;

 private:
  // Per (row, layer) of a multi-row step: where its arrays lie in meta_, and
  // the sizes of the gathered block lists.
  struct RowLayer {
    int64_t off = 0;
    int64_t plain_total = 0, enc_total = 0;
    int64_t first_off = -1;  // the row's first_visible in full_ (a window layer), else -1
  };
  struct Row {
    int num_seqs = 0;
    int64_t q_index_off = 0;  // [num_seqs] query rows (int64) in meta_
    cuda::PagedDecodePlan plan;
    std::vector<RowLayer> layers;
  };
  // The step's tables of all layers (streams g = layer * num_streams_ + s).
  struct StepTables {
    std::vector<int32_t> indptr{0}, enc_indptr{0};
    std::vector<int64_t> plain_len, enc_len;
    std::vector<int> q_len;  // new tokens per sequence
  };

  template <typename T>
  at::Tensor Upload(const std::vector<T>& v, at::ScalarType type) const {
    std::vector<T> copy = v;
    if (copy.empty()) copy.push_back(T{});  // never a null data pointer
    at::Tensor host = at::from_blob(copy.data(), {static_cast<int64_t>(copy.size())}, at::TensorOptions().dtype(type));
    return host.to(device_, type, /*non_blocking=*/false, /*copy=*/true);
  }
  int32_t* I32(int64_t off) const { return full_.data_ptr<int32_t>() + off; }
  cuda::PagedDecodeShape DecodeShape(int num_seqs) const { return DecodeShapeOf(shape_, num_qo_heads_, num_seqs); }
  // The plain pool's view for `num_streams` streams, their tables not set.
  PagedKV PoolView(int num_streams) const;
  // The step's full view of layer l (device pointers).
  PagedKV FullPlain(int layer) const;
  EncodedKV FullEncoded(int layer) const;
  void Fail(const std::string& what) {
    if (step_status_.ok()) step_status_ = Status::Internal("cuda engine: " + what);
  }
  // BeginStep's parts: the int32 tables of all layers into `full`, and the
  // row of query index r (its arrays into `meta`, window bounds into `full`).
  void BuildTables(const PageTable& pt, const std::vector<int32_t>& qo_indptr, std::vector<int32_t>* full,
                   StepTables* t);
  Status PlanRow(int r, const PageTable& pt, const std::vector<int32_t>& qo_indptr, const StepTables& t,
                 std::vector<int32_t>* full, std::vector<int64_t>* meta, Row* row);
  // One PagedDecode; false (and the step's error set) on failure.
  bool Decode(const cuda::PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc, float sm_scale,
              const float* q, float* o, const int64_t* slot_offsets, const int32_t* first_visible);
  // Attend's loop of decode-shaped calls for a step with prefill rows.
  at::Tensor AttendRows(int layer, float sm_scale, const at::Tensor& q, const PagedKV& full_kv,
                        const EncodedKV& full_enc);
  const int32_t* FirstVisible(const RowLayer& rl) const { return rl.first_off < 0 ? nullptr : I32(rl.first_off); }
  Status GrowWorkspace(int64_t bytes);
  Status LaunchSeal();

  CacheShape shape_;
  int num_qo_heads_;
  at::Device device_;
  DeviceArenaAllocator allocator_;
  KVCache* cache_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;

  // The step.
  Status step_status_;
  SlotAttention* slot_attn_host_ = nullptr;  // the view's slot_attention, when wanted
  int num_seqs_ = 0, num_streams_ = 0;  // per layer: num_seqs_ * num_kv_heads
  int64_t total_q_ = 0;
  bool decode_only_ = true;
  std::vector<Row> rows_;
  at::Tensor full_;   // int32: indptr | indices | lbl | enc_indptr | enc_indices | qo_indptr
  int64_t off_indices_ = 0, off_lbl_ = 0, off_enc_indptr_ = 0, off_enc_indices_ = 0, off_qo_ = 0;
  at::Tensor meta_;   // int64: per (row, layer) arrays of multi-row steps
  at::Tensor slot_attn_, slot_off_;  // float [total], int64 [L * num_streams]

  // Queued compactions, one CompactStreams call per step: per stream, its
  // block list as it was before KVCache::Compact freed the tail (a PagedKV
  // over those lists) and its kept slots (cuda::KeptSlots).
  std::vector<int32_t> cmp_indptr_{0}, cmp_indices_, cmp_last_len_, cmp_kept_, cmp_num_kept_;
  std::vector<int64_t> cmp_kept_off_;
  // Queued seals, one EncodeSealKivi call per step: per sealed stream its old
  // plain blocks (a PagedKV over those lists), per job (encoded block) its
  // stream, first slot and destination.
  std::vector<int32_t> seal_indptr_{0}, seal_indices_, seal_lbl_, job_stream_, job_first_, job_dst_;
};

}  // namespace kvlab
