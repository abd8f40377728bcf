// The glue from libtorch tensors to the CUDA kernels' structs (see
// cuda_backend.h). Device-generic libtorch only (at::Device, Tensor::to,
// data_ptr, from_blob): it builds against Debian's CPU-only libtorch, and
// under the CUDA emulation the same code runs with every tensor on the CPU.
//
// Attention of a step. Decode steps (one new token per sequence) are one
// PagedDecode per layer over the step's page table. Steps with several query
// rows per sequence (prefill chunks) are a loop of decode-shaped calls: row r
// is the batch of sequences with more than r new tokens, each stream cut to
// the causal length of its query r (len - q_len + r + 1 slots), so that the
// encoded (KIVI) segment and the plain one are read by the same kernel as in
// decode. The cut page tables are gathered on the device from the step's
// (per row and layer: a few small tensors, no copy of the block lists over
// the bus). Correct first; a prefill kernel would replace the loop.
//
// Streams: every kernel and libtorch op runs on the default stream (libtorch's
// current stream unless the caller changed it), so they are ordered; EndStep
// synchronises.

// libtorch first: the CUDA emulation's <cuda_runtime_api.h>, reached through
// the kernels' headers, defines macros (threadIdx...) and a global min/max
// that must not reach libtorch's headers.
#include <ATen/ATen.h>

#include "core/engine/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/append_kv.h"
#include "kernels/cuda/compact.h"
#include "kernels/cuda/paged_decode.h"

namespace kvlab {
namespace {

std::string CudaErrorText(cudaError_t e) { return std::string(cudaGetErrorString(e)); }

at::Device CurrentTorchDevice() {
#ifdef KVLAB_CUDA_EMULATION
  return at::Device(at::kCPU);
#else
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(dev));
#endif
}

// The stored name of the policy claiming concern c ("?" if none).
std::string PolicyName(const PolicyStack& stack, Concern c) {
  const KVPolicy* p = stack.For(c);
  return p != nullptr ? std::string("'") + p->Name() + "'" : std::string("?");
}

class CudaBackendImpl : public CudaBackend {
 public:
  explicit CudaBackendImpl(const CudaBackendOptions& o)
      : shape_(o.shape), num_qo_heads_(o.num_qo_heads), device_(CurrentTorchDevice()) {
#ifdef KVLAB_CUDA_EMULATION
    allocator_.device = "cuda (emulated on the CPU)";
#else
    allocator_.device = device_.str();
#endif
    allocator_.allocate = [](int64_t bytes, uint8_t** out) {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes));
      if (e != cudaSuccess) {
        cudaGetLastError();  // not sticky: clear it
        return Status::ResourceExhausted("cudaMalloc: " + CudaErrorText(e));
      }
      *out = static_cast<uint8_t*>(p);
      return Status::OK();
    };
    allocator_.release = [](uint8_t* p) { cudaFree(p); };
    sm_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape_.head_dim)));
  }
  ~CudaBackendImpl() override {
    if (workspace_ != nullptr) cudaFree(workspace_);
  }

  c10::Device torch_device() const override { return device_; }
  const DeviceArenaAllocator& arena_allocator() const override { return allocator_; }
  void Attach(KVCache* cache) override { cache_ = cache; }

  Status BeginStep(const PageTable& pt, const std::vector<int32_t>& qo_indptr,
                   const std::vector<int64_t>* slot_attn_offsets, int64_t slot_attn_total) override;
  at::Tensor Attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;
  Status EndStep(std::vector<float>* slot_attn) override;
  Status Compact(int64_t seq, int layer, int head, const std::vector<int64_t>& keep) override;
  Status FinishCompaction() override;
  Status Seal(const std::vector<int64_t>& seqs) override;

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

  template <typename T>
  at::Tensor Upload(const std::vector<T>& v, at::ScalarType type) const {
    std::vector<T> copy = v;
    if (copy.empty()) copy.push_back(T{});  // never a null data pointer
    at::Tensor host = at::from_blob(copy.data(), {static_cast<int64_t>(copy.size())}, at::TensorOptions().dtype(type));
    return host.to(device_, type, /*non_blocking=*/false, /*copy=*/true);
  }
  int32_t* I32(int64_t off) const { return full_.data_ptr<int32_t>() + off; }
  cuda::PagedDecodeShape DecodeShape(int num_seqs) const;
  // The step's full view of layer l (device pointers).
  PagedKV FullPlain(int layer) const;
  EncodedKV FullEncoded(int layer) const;
  void Fail(const std::string& what) {
    if (step_status_.ok()) step_status_ = Status::Internal("cuda engine: " + what);
  }
  // One PagedDecode; false (and the step's error set) on failure.
  bool Decode(const cuda::PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc, const float* q, float* o,
              const int64_t* slot_offsets, const int32_t* first_visible);
  const int32_t* FirstVisible(const RowLayer& rl) const { return rl.first_off < 0 ? nullptr : I32(rl.first_off); }
  Status GrowWorkspace(int64_t bytes);

  CacheShape shape_;
  int num_qo_heads_;
  at::Device device_;
  float sm_scale_ = 1.0f;
  DeviceArenaAllocator allocator_;
  KVCache* cache_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;

  // The step.
  Status step_status_;
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
};

cuda::PagedDecodeShape CudaBackendImpl::DecodeShape(int num_seqs) const {
  cuda::PagedDecodeShape sh;
  sh.num_seqs = num_seqs;
  sh.num_qo_heads = num_qo_heads_;
  sh.num_kv_heads = shape_.num_kv_heads;
  sh.head_dim = shape_.head_dim;
  sh.dtype = shape_.dtype;
  if (shape_.encoded) {
    sh.enc_tokens_per_block = shape_.enc.tokens_per_block;
    sh.enc_block_bytes = shape_.enc.BlockBytes();
  }
  return sh;
}

PagedKV CudaBackendImpl::FullPlain(int layer) const {
  PagedKV kv;
  kv.base = cache_->pool().device_data();
  kv.block_bytes = cache_->pool().block_bytes();
  kv.dtype = shape_.dtype;
  kv.block_size = shape_.block_size;
  kv.head_dim = shape_.head_dim;
  kv.num_streams = num_streams_;
  kv.indptr = I32(static_cast<int64_t>(layer) * num_streams_);
  kv.indices = I32(off_indices_);
  kv.last_block_len = I32(off_lbl_ + static_cast<int64_t>(layer) * num_streams_);
  return kv;
}

EncodedKV CudaBackendImpl::FullEncoded(int layer) const {
  EncodedKV e;
  e.base = cache_->encoded_pool()->device_data();
  e.block_bytes = cache_->encoded_pool()->block_bytes();
  e.enc = shape_.enc;
  e.num_streams = num_streams_;
  e.indptr = I32(off_enc_indptr_ + static_cast<int64_t>(layer) * num_streams_);
  e.indices = I32(off_enc_indices_);
  return e;
}

Status CudaBackendImpl::GrowWorkspace(int64_t bytes) {
  if (bytes <= workspace_bytes_) return Status::OK();
  if (workspace_ != nullptr) {
    cudaDeviceSynchronize();
    cudaFree(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  const cudaError_t e = cudaMalloc(&workspace_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    cudaGetLastError();
    workspace_ = nullptr;
    return Status::ResourceExhausted("cuda engine: cannot allocate a decode workspace of " + std::to_string(bytes) +
                                     " bytes: " + CudaErrorText(e));
  }
  workspace_bytes_ = bytes;
  return Status::OK();
}

Status CudaBackendImpl::BeginStep(const PageTable& pt, const std::vector<int32_t>& qo_indptr,
                                  const std::vector<int64_t>* slot_attn_offsets, int64_t slot_attn_total) {
  if (cache_ == nullptr) return Status::Internal("cuda engine: BeginStep before Attach");
  step_status_ = Status::OK();
  rows_.clear();
  const int L = shape_.num_layers, H = shape_.num_kv_heads, bs = shape_.block_size;
  const int B = pt.num_seqs();
  const int S = B * H;
  num_seqs_ = B;
  num_streams_ = S;
  total_q_ = qo_indptr.back();

  // The step's tables for all layers, one int32 upload.
  std::vector<int32_t> indptr{0}, indices, lbl, enc_indptr{0}, enc_indices;
  std::vector<int64_t> plain_len(static_cast<size_t>(L) * S), enc_len(static_cast<size_t>(L) * S, 0);
  for (int l = 0; l < L; ++l) {
    const PagedKV kv = pt.Layer(l);
    const EncodedKV* e = pt.Encoded(l);
    for (int s = 0; s < S; ++s) {
      const size_t g = static_cast<size_t>(l) * S + s;
      indices.insert(indices.end(), kv.indices + kv.indptr[s], kv.indices + kv.indptr[s + 1]);
      indptr.push_back(static_cast<int32_t>(indices.size()));
      lbl.push_back(kv.last_block_len[s]);
      plain_len[g] = kv.StreamLength(s);
      if (e != nullptr) {
        enc_indices.insert(enc_indices.end(), e->indices + e->indptr[s], e->indices + e->indptr[s + 1]);
        enc_len[g] = e->StreamTokens(s);
      }
      enc_indptr.push_back(static_cast<int32_t>(enc_indices.size()));
    }
  }
  std::vector<int32_t> full;
  full.reserve(indptr.size() + indices.size() + lbl.size() + enc_indptr.size() + enc_indices.size() + qo_indptr.size() + 2);
  full.insert(full.end(), indptr.begin(), indptr.end());
  off_indices_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), indices.begin(), indices.end());
  full.push_back(0);  // pad: a non-null pointer even when empty
  off_lbl_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), lbl.begin(), lbl.end());
  off_enc_indptr_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), enc_indptr.begin(), enc_indptr.end());
  off_enc_indices_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), enc_indices.begin(), enc_indices.end());
  full.push_back(0);
  off_qo_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), qo_indptr.begin(), qo_indptr.end());

  std::vector<int> q_len(static_cast<size_t>(B));
  int max_q = 0;
  for (int b = 0; b < B; ++b) {
    q_len[static_cast<size_t>(b)] = qo_indptr[static_cast<size_t>(b) + 1] - qo_indptr[static_cast<size_t>(b)];
    max_q = std::max(max_q, q_len[static_cast<size_t>(b)]);
  }
  decode_only_ = max_q == 1;

  // Rows: one per query index r; a multi-row step's arrays go to meta (int64),
  // window layers' first visible slots of each row's streams to full (int32).
  std::vector<int64_t> meta;
  int64_t max_ws = 0;
  for (int r = 0; r < max_q; ++r) {
    Row row;
    std::vector<int> sub;
    for (int b = 0; b < B; ++b) {
      if (q_len[static_cast<size_t>(b)] > r) sub.push_back(b);
    }
    row.num_seqs = static_cast<int>(sub.size());
    const int n = row.num_seqs * H;
    std::vector<int64_t> lens(static_cast<size_t>(n), 0);
    if (!decode_only_) {
      row.q_index_off = static_cast<int64_t>(meta.size());
      for (int b : sub) meta.push_back(qo_indptr[static_cast<size_t>(b)] + r);
    }
    for (int l = 0; l < L; ++l) {
      RowLayer rl;
      rl.off = static_cast<int64_t>(meta.size());
      if (const int32_t* fv = pt.FirstVisible(l)) {  // the cut streams keep their slot numbers
        rl.first_off = static_cast<int64_t>(full.size());
        for (int b : sub) {
          for (int h = 0; h < H; ++h) full.push_back(fv[static_cast<size_t>(qo_indptr[static_cast<size_t>(b)] + r) * H + h]);
        }
      }
      // Layout (8n + 2 entries): indptr [n+1], last_block_len [n], plain delta [n],
      // plain count [n], enc indptr [n+1], enc delta [n], enc count [n], slot offsets [n].
      if (!decode_only_) meta.resize(meta.size() + 8 * static_cast<size_t>(n) + 2, 0);
      auto cell = [&](int64_t k) -> int64_t& { return meta[static_cast<size_t>(rl.off + k)]; };
      for (int i = 0; i < n; ++i) {
        const int b = sub[static_cast<size_t>(i / H)];
        const size_t g = static_cast<size_t>(l) * S + static_cast<size_t>(b) * H + static_cast<size_t>(i % H);
        const int64_t cut = q_len[static_cast<size_t>(b)] - 1 - r;
        const int64_t plain = plain_len[g] - cut;
        if (plain < 1) {
          return Status::Internal("cuda engine: stream of sequence " + std::to_string(b) + " holds fewer slots than its new tokens");
        }
        lens[static_cast<size_t>(i)] = std::max(lens[static_cast<size_t>(i)], enc_len[g] + plain);
        if (decode_only_) continue;
        const int64_t nb = (plain + bs - 1) / bs;
        cell(i) = rl.plain_total;
        cell(n + 1 + i) = plain - (nb - 1) * bs;
        cell(2 * n + 1 + i) = indptr[g] - rl.plain_total;
        cell(3 * n + 1 + i) = nb;
        rl.plain_total += nb;
        const int64_t ne = enc_indptr[g + 1] - enc_indptr[g];
        cell(4 * n + 1 + i) = rl.enc_total;
        cell(5 * n + 2 + i) = enc_indptr[g] - rl.enc_total;
        cell(6 * n + 2 + i) = ne;
        rl.enc_total += ne;
        cell(7 * n + 2 + i) = slot_attn_offsets != nullptr ? (*slot_attn_offsets)[g] : 0;
      }
      if (!decode_only_) {
        cell(n) = rl.plain_total;
        cell(5 * n + 1) = rl.enc_total;
      }
      row.layers.push_back(rl);
    }
    const cudaError_t e = cuda::PlanPagedDecode(DecodeShape(row.num_seqs), lens.data(), {}, &row.plan);
    if (e != cudaSuccess) return Status::Internal("cuda engine: PlanPagedDecode: " + CudaErrorText(e));
    max_ws = std::max(max_ws, row.plan.workspace_bytes);
    rows_.push_back(std::move(row));
  }
  KVLAB_RETURN_IF_ERROR(GrowWorkspace(std::max<int64_t>(max_ws, 256)));
  try {
    full_ = Upload(full, at::kInt);
    meta_ = decode_only_ ? at::Tensor() : Upload(meta, at::kLong);
    if (slot_attn_offsets != nullptr) {
      slot_attn_ = at::zeros({std::max<int64_t>(slot_attn_total, 1)}, at::TensorOptions().dtype(at::kFloat).device(device_));
      slot_off_ = Upload(*slot_attn_offsets, at::kLong);
    } else {
      slot_attn_ = at::Tensor();
      slot_off_ = at::Tensor();
    }
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("cuda engine: uploading the page tables: ") + e.what_without_backtrace());
  }
  return Status::OK();
}

bool CudaBackendImpl::Decode(const cuda::PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc,
                             const float* q, float* o, const int64_t* slot_offsets,
                             const int32_t* first_visible) {
  AttentionParams p;
  p.num_seqs = plan.shape.num_seqs;
  p.num_qo_heads = num_qo_heads_;
  p.num_kv_heads = shape_.num_kv_heads;
  p.head_dim = shape_.head_dim;
  p.sm_scale = sm_scale_;
  p.q = q;
  p.o = o;
  p.first_visible = first_visible;
  if (slot_attn_.defined()) {
    p.slot_attn = slot_attn_.data_ptr<float>();
    p.slot_attn_offsets = slot_offsets;
  }
  const cudaError_t e = cuda::PagedDecode(plan, kv, enc, p, workspace_, workspace_bytes_, /*stream=*/nullptr);
  if (e == cudaSuccess) return true;
  const std::string why = cuda::PagedDecodeCheck(plan, kv, enc, p, workspace_, workspace_bytes_);
  Fail("PagedDecode: " + CudaErrorText(e) + (why.empty() ? "" : " (" + why + ")"));
  return false;
}

at::Tensor CudaBackendImpl::Attention(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!step_status_.ok()) return at::zeros_like(q);
  try {
    const PagedKV full_kv = FullPlain(layer);
    const EncodedKV full_enc = shape_.encoded ? FullEncoded(layer) : EncodedKV();
    cudaError_t e = cuda::AppendKv(full_kv, I32(off_qo_), num_seqs_, shape_.num_kv_heads, static_cast<int>(total_q_),
                                   k.data_ptr<float>(), v.data_ptr<float>(), /*stream=*/nullptr);
    if (e != cudaSuccess) {
      Fail("AppendKv: " + CudaErrorText(e));
      return at::zeros_like(q);
    }
    at::Tensor o = at::empty_like(q);
    const int64_t S = num_streams_;
    if (decode_only_) {
      const int64_t* slot = slot_off_.defined() ? slot_off_.data_ptr<int64_t>() + layer * S : nullptr;
      if (!Decode(rows_[0].plan, full_kv, shape_.encoded ? &full_enc : nullptr, q.data_ptr<float>(),
                  o.data_ptr<float>(), slot, FirstVisible(rows_[0].layers[static_cast<size_t>(layer)]))) {
        return at::zeros_like(q);
      }
      return o;
    }
    const at::TensorOptions i64 = at::TensorOptions().dtype(at::kLong).device(device_);
    for (const Row& row : rows_) {
      const RowLayer& rl = row.layers[static_cast<size_t>(layer)];
      const int64_t n = static_cast<int64_t>(row.num_seqs) * shape_.num_kv_heads;
      at::Tensor m = meta_.narrow(0, rl.off, 8 * n + 2);
      // Each stream's (cut) block list, gathered from the step's: position k
      // of stream i in the row's list is position k + delta[i] in the step's.
      at::Tensor pos = at::arange(rl.plain_total, i64) +
                       at::repeat_interleave(m.narrow(0, 2 * n + 1, n), m.narrow(0, 3 * n + 1, n), 0, rl.plain_total);
      at::Tensor plain_idx = full_.narrow(0, off_indices_, full_.size(0) - off_indices_).index_select(0, pos);
      at::Tensor row_i32 = at::cat({m.narrow(0, 0, 2 * n + 1), m.narrow(0, 4 * n + 1, n + 1)}).to(at::kInt);
      PagedKV kv = full_kv;
      kv.num_streams = static_cast<int>(n);
      kv.indptr = row_i32.data_ptr<int32_t>();
      kv.last_block_len = row_i32.data_ptr<int32_t>() + (n + 1);
      kv.indices = plain_idx.data_ptr<int32_t>();
      EncodedKV enc = full_enc;
      at::Tensor enc_idx;
      if (shape_.encoded) {
        enc.num_streams = static_cast<int>(n);
        enc.indptr = row_i32.data_ptr<int32_t>() + (2 * n + 1);
        if (rl.enc_total > 0) {
          at::Tensor epos = at::arange(rl.enc_total, i64) +
                            at::repeat_interleave(m.narrow(0, 5 * n + 2, n), m.narrow(0, 6 * n + 2, n), 0, rl.enc_total);
          enc_idx = full_.narrow(0, off_enc_indices_, full_.size(0) - off_enc_indices_).index_select(0, epos);
          enc.indices = enc_idx.data_ptr<int32_t>();
        }  // else the step's (non-null, never read)
      }
      at::Tensor q_index = meta_.narrow(0, row.q_index_off, row.num_seqs);
      at::Tensor q_row = q.index_select(0, q_index).contiguous();
      at::Tensor o_row = at::empty_like(q_row);
      const int64_t* slot = slot_off_.defined() ? m.data_ptr<int64_t>() + 7 * n + 2 : nullptr;
      if (!Decode(row.plan, kv, shape_.encoded ? &enc : nullptr, q_row.data_ptr<float>(), o_row.data_ptr<float>(),
                  slot, FirstVisible(rl))) {
        return at::zeros_like(q);
      }
      o.index_copy_(0, q_index, o_row);
    }
    return o;
  } catch (const c10::Error& e) {
    Fail(std::string("layer ") + std::to_string(layer) + ": " + e.what_without_backtrace());
    return at::zeros_like(q);
  }
}

Status CudaBackendImpl::EndStep(std::vector<float>* slot_attn) {
  Status st = step_status_;
  const cudaError_t e = cudaDeviceSynchronize();
  if (st.ok() && e != cudaSuccess) st = Status::Internal("cuda engine: a kernel of this step failed: " + CudaErrorText(e));
  if (st.ok() && slot_attn != nullptr && slot_attn_.defined()) {
    at::Tensor h = slot_attn_.to(at::kCPU).contiguous();
    const float* d = h.data_ptr<float>();
    const size_t n = std::min(slot_attn->size(), static_cast<size_t>(h.numel()));
    std::copy(d, d + n, slot_attn->begin());
  }
  full_ = meta_ = slot_attn_ = slot_off_ = at::Tensor();
  rows_.clear();
  step_status_ = Status::OK();
  return st;
}

Status CudaBackendImpl::Compact(int64_t seq, int layer, int head, const std::vector<int64_t>& keep) {
  const Stream& st = cache_->stream(seq, layer, head);
  // A sliding window's leading blocks: freed, no row moves.
  if (cache_->DropsLeadingUnits(st, keep)) return cache_->Compact(seq, layer, head, keep);
  if (st.num_encoded > 0) {
    return Status::InvalidArgument("cuda engine: compacting a stream with encoded blocks is not implemented on the device");
  }
  const std::vector<int32_t> blocks = st.blocks;  // before Compact frees the tail
  const int64_t length = st.num_tokens;
  KVLAB_RETURN_IF_ERROR(cache_->Compact(seq, layer, head, keep));
  bool moves = false;  // a kept prefix 0..k-1 stays where it is
  for (size_t i = 0; i < keep.size() && !moves; ++i) moves = keep[i] != static_cast<int64_t>(i);
  if (!moves || blocks.empty()) return Status::OK();
  cmp_indices_.insert(cmp_indices_.end(), blocks.begin(), blocks.end());
  cmp_indptr_.push_back(static_cast<int32_t>(cmp_indices_.size()));
  cmp_last_len_.push_back(static_cast<int32_t>(length - static_cast<int64_t>(blocks.size() - 1) * shape_.block_size));
  cmp_kept_off_.push_back(static_cast<int64_t>(cmp_kept_.size()));
  for (int64_t k : keep) cmp_kept_.push_back(static_cast<int32_t>(k));
  cmp_num_kept_.push_back(static_cast<int32_t>(keep.size()));
  return Status::OK();
}

// Every queued stream in one cuda::CompactStreams call (kernels/cuda/compact.h):
// it gathers all kept rows before writing any, so overlapping moves within a
// stream are safe. The host's books were done by KVCache::Compact; the
// kernel's CompactResult (the same lengths and freed blocks) is not needed.
Status CudaBackendImpl::FinishCompaction() {
  if (cmp_num_kept_.empty()) return Status::OK();
  Status st;
  try {
    const at::Tensor indptr = Upload(cmp_indptr_, at::kInt), indices = Upload(cmp_indices_, at::kInt);
    const at::Tensor last_len = Upload(cmp_last_len_, at::kInt), kept = Upload(cmp_kept_, at::kInt);
    const at::Tensor kept_off = Upload(cmp_kept_off_, at::kLong), num_kept = Upload(cmp_num_kept_, at::kInt);
    PagedKV kv;
    kv.base = static_cast<uint8_t*>(cache_->pool().device_data());
    kv.block_bytes = shape_.BlockBytes();
    kv.dtype = shape_.dtype;
    kv.block_size = shape_.block_size;
    kv.head_dim = shape_.head_dim;
    kv.num_streams = static_cast<int>(cmp_num_kept_.size());
    kv.indptr = indptr.data_ptr<int32_t>();
    kv.indices = indices.data_ptr<int32_t>();
    kv.last_block_len = last_len.data_ptr<int32_t>();
    cuda::KeptSlots ks;
    ks.slots = kept.data_ptr<int32_t>();
    ks.offsets = kept_off.data_ptr<int64_t>();
    ks.num_kept = num_kept.data_ptr<int32_t>();
    ks.capacity = static_cast<int64_t>(cmp_kept_.size());
    size_t temp_bytes = 0;
    cudaError_t e = cuda::CompactStreams(nullptr, &temp_bytes, kv, ks, nullptr, nullptr, {}, /*stream=*/nullptr);
    // The decode workspace is free between steps; the next step's kernels are queued after these.
    if (e == cudaSuccess) st = GrowWorkspace(static_cast<int64_t>(temp_bytes));
    if (e == cudaSuccess && st.ok()) {
      e = cuda::CompactStreams(workspace_, &temp_bytes, kv, ks, nullptr, nullptr, {}, /*stream=*/nullptr);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      st = Status::Internal("cuda engine: CompactStreams: " + CudaErrorText(e) + " " +
                            cuda::CompactStreamsCheck(kv, ks, nullptr, nullptr));
    }
  } catch (const c10::Error& e) {
    st = Status::Internal(std::string("cuda engine: compaction: ") + e.what_without_backtrace());
  }
  cmp_indptr_.assign(1, 0);
  for (auto* v : {&cmp_indices_, &cmp_last_len_, &cmp_kept_, &cmp_num_kept_}) v->clear();
  cmp_kept_off_.clear();
  return st;
}

Status CudaBackendImpl::Seal(const std::vector<int64_t>& seqs) {
  if (!shape_.encoded) return Status::OK();
  const int L = shape_.num_layers, H = shape_.num_kv_heads, bs = shape_.block_size;
  const int tpb = shape_.enc.tokens_per_block;
  // KVCache::Seal keeps the books; the groups it sealed are found by
  // comparing each stream before and after (new encoded blocks at the end,
  // the group's plain blocks gone from the front), then encoded on the device
  // from the old block lists. The freed plain blocks still hold their rows:
  // nothing writes them before the next step, which runs after this launch.
  std::vector<int32_t> indptr{0}, indices, lbl, job_stream, job_first, job_dst;
  for (int64_t seq : seqs) {
    std::vector<std::vector<int32_t>> before(static_cast<size_t>(L) * H);
    std::vector<size_t> enc_before(before.size());
    std::vector<int64_t> plain_before(before.size());
    for (int l = 0; l < L; ++l) {
      for (int h = 0; h < H; ++h) {
        const Stream& s = cache_->stream(seq, l, h);
        const size_t i = static_cast<size_t>(l) * H + h;
        before[i] = s.blocks;
        enc_before[i] = s.enc_blocks.size();
        plain_before[i] = s.num_plain();
      }
    }
    cache_->Seal(seq);
    for (int l = 0; l < L; ++l) {
      for (int h = 0; h < H; ++h) {
        const Stream& s = cache_->stream(seq, l, h);
        const size_t i = static_cast<size_t>(l) * H + h;
        if (s.enc_blocks.size() == enc_before[i]) continue;
        const int32_t stream = static_cast<int32_t>(indptr.size()) - 1;
        const int64_t nb = (plain_before[i] + bs - 1) / bs;
        indices.insert(indices.end(), before[i].begin(), before[i].begin() + nb);
        indptr.push_back(static_cast<int32_t>(indices.size()));
        lbl.push_back(static_cast<int32_t>(plain_before[i] - (nb - 1) * bs));
        for (size_t j = enc_before[i]; j < s.enc_blocks.size(); ++j) {
          job_stream.push_back(stream);
          job_first.push_back(static_cast<int32_t>((j - enc_before[i]) * static_cast<size_t>(tpb)));
          job_dst.push_back(s.enc_blocks[j]);
        }
      }
    }
  }
  if (job_stream.empty()) return Status::OK();
  try {
    const int64_t num_streams = static_cast<int64_t>(lbl.size()), nj = static_cast<int64_t>(job_stream.size());
    std::vector<int32_t> all = indptr;
    all.insert(all.end(), lbl.begin(), lbl.end());
    all.insert(all.end(), job_stream.begin(), job_stream.end());
    all.insert(all.end(), job_first.begin(), job_first.end());
    all.insert(all.end(), job_dst.begin(), job_dst.end());
    all.insert(all.end(), indices.begin(), indices.end());
    at::Tensor d = Upload(all, at::kInt);
    int32_t* p = d.data_ptr<int32_t>();
    PagedKV kv;
    kv.base = cache_->pool().device_data();
    kv.block_bytes = cache_->pool().block_bytes();
    kv.dtype = shape_.dtype;
    kv.block_size = bs;
    kv.head_dim = shape_.head_dim;
    kv.num_streams = static_cast<int>(num_streams);
    kv.indptr = p;
    kv.last_block_len = p + num_streams + 1;
    cuda::SealJobs jobs;
    jobs.num_jobs = static_cast<int>(nj);
    jobs.stream = p + 2 * num_streams + 1;
    jobs.first_slot = jobs.stream + nj;
    jobs.dst_block = jobs.first_slot + nj;
    kv.indices = jobs.dst_block + nj;
    uint8_t* enc_base = cache_->encoded_pool()->device_data();
    const int64_t enc_bytes = cache_->encoded_pool()->block_bytes();
    const cudaError_t e = cuda::EncodeSealKivi(kv, shape_.enc, enc_base, enc_bytes, jobs, /*stream=*/nullptr);
    if (e != cudaSuccess) {
      return Status::Internal("cuda engine: EncodeSealKivi: " + CudaErrorText(e) + " " +
                              cuda::EncodeSealKiviCheck(kv, shape_.enc, enc_base, enc_bytes, jobs));
    }
    // The upload's memory returns to libtorch's allocator when `d` dies; its
    // reuse is ordered after the launch on the same stream.
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("cuda engine: seal: ") + e.what_without_backtrace());
  }
  return Status::OK();
}

// What the kernels accept, asked of their own host-side checks with a
// one-sequence call (pointers are never dereferenced by the checks).
Status CheckKernelsAccept(const CudaBackendOptions& o, const std::string& stack) {
  const CacheShape& sh = o.shape;
  cuda::PagedDecodeShape ds;
  ds.num_seqs = 1;
  ds.num_qo_heads = o.num_qo_heads;
  ds.num_kv_heads = sh.num_kv_heads;
  ds.head_dim = sh.head_dim;
  ds.dtype = sh.dtype;
  if (sh.encoded) {
    ds.enc_tokens_per_block = sh.enc.tokens_per_block;
    ds.enc_block_bytes = sh.enc.BlockBytes();
  }
  const std::string where = "model shape (head_dim " + std::to_string(sh.head_dim) + ", " +
                            std::to_string(o.num_qo_heads) + " query heads over " + std::to_string(sh.num_kv_heads) +
                            " stored KV heads, stack " + stack + "): ";
  std::string why = cuda::PagedDecodeShapeCheck(ds);
  if (!why.empty()) return Status::InvalidArgument(where + why);
  cuda::PagedDecodeOptions po;
  po.num_sms = 1;
  po.ctas_per_sm = 1;
  const int64_t len = 1;
  cuda::PagedDecodePlan plan;
  if (cuda::PlanPagedDecode(ds, &len, po, &plan) != cudaSuccess) {
    return Status::InvalidArgument(where + "PlanPagedDecode refused it");
  }
  alignas(256) static uint8_t dummy[256];
  const int32_t* ip = reinterpret_cast<const int32_t*>(dummy);
  PagedKV kv;
  kv.base = dummy;
  kv.block_bytes = sh.BlockBytes();
  kv.dtype = sh.dtype;
  kv.block_size = sh.block_size;
  kv.head_dim = sh.head_dim;
  kv.num_streams = sh.num_kv_heads;
  kv.indptr = kv.indices = kv.last_block_len = ip;
  EncodedKV enc;
  enc.base = dummy;
  enc.block_bytes = sh.encoded ? sh.enc.BlockBytes() : 0;
  enc.enc = sh.enc;
  enc.num_streams = kv.num_streams;
  enc.indptr = enc.indices = ip;
  AttentionParams p;
  p.num_seqs = 1;
  p.num_qo_heads = o.num_qo_heads;
  p.num_kv_heads = sh.num_kv_heads;
  p.head_dim = sh.head_dim;
  p.sm_scale = 1.0f;
  p.q = reinterpret_cast<const float*>(dummy);
  p.o = reinterpret_cast<float*>(dummy);
  why = cuda::PagedDecodeCheck(plan, kv, sh.encoded ? &enc : nullptr, p, dummy, plan.workspace_bytes);
  if (!why.empty()) return Status::InvalidArgument(where + why);
  why = cuda::AppendKvCheck(kv, ip, 1, sh.num_kv_heads, 1, p.q, p.q);
  if (!why.empty()) return Status::InvalidArgument(where + why);
  if (sh.encoded) {
    cuda::SealJobs jobs;
    jobs.num_jobs = 1;
    jobs.stream = jobs.first_slot = jobs.dst_block = ip;
    why = cuda::EncodeSealKiviCheck(kv, sh.enc, dummy, sh.enc.BlockBytes(), jobs);
    if (!why.empty()) return Status::InvalidArgument(where + why);
  }
  return Status::OK();
}

}  // namespace

Status CudaDeviceStatus(const std::string& option) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    return Status::InvalidArgument(option + ": no CUDA device here (cudaGetDeviceCount: " +
                                   (e != cudaSuccess ? CudaErrorText(e) : std::string("0 devices")) + ")");
  }
#ifndef KVLAB_CUDA_EMULATION
  if (!at::hasCUDA()) {
    return Status::InvalidArgument(option + ": this libtorch is a CPU-only build (as Debian's is), and the model's "
                                   "projections and MLP run on libtorch's CUDA tensors; build kvlab against a CUDA "
                                   "libtorch (CMAKE_PREFIX_PATH)");
  }
#endif
  return Status::OK();
}

Status NewCudaBackend(const CudaBackendOptions& o, std::unique_ptr<CudaBackend>* out) {
  if (o.policies == nullptr) return Status::InvalidArgument("NewCudaBackend: no policy stack");
  const PolicyStack& stack = *o.policies;
  const std::string stack_name = "'" + stack.Describe() + "'";
  const std::string not_yet = " is not supported on device \"cuda\" yet";
  if (stack.KeysBeforeRope()) {
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernSelection) +
                                   " stores keys before RoPE and rotates them at read time (positions=\"cache\"), which" +
                                   not_yet + " (cuda::PagedDecode does not rotate keys): use positions=\"original\" or "
                                   "device \"cpu\"");
  }
  PlacementOptions placement;
  if (stack.Placement(&placement)) {
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernPlacement) +
                                   " (placement: offloading blocks to host memory or disk)" + not_yet +
                                   ": the CUDA path keeps every block in device memory");
  }
  if (o.shape.encoded && stack.For(kConcernSelection) != nullptr) {
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernSelection) + " (selection) stacked with " +
                                   PolicyName(stack, kConcernRepresentation) + " (sealed encoding)" + not_yet +
                                   ": compacting encoded blocks on the device is not implemented");
  }
  if (o.shape.encoded) {
    Status s = CheckKernelsAccept(o, stack_name);
    if (!s.ok()) {
      return Status::InvalidArgument("policy " + PolicyName(stack, kConcernRepresentation) + " (" +
                                     o.shape.enc.Describe() + ")" + not_yet + ": " + s.message());
    }
  }
  KVLAB_RETURN_IF_ERROR(CheckKernelsAccept(o, stack_name));
  out->reset(new CudaBackendImpl(o));
  return Status::OK();
}

}  // namespace kvlab
