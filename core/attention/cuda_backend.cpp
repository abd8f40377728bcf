// The CUDA backend's step (see cuda_backend.h): the page tables uploaded once
// per step, AppendKv for each layer's new K/V, and PagedDecode for attention.
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
#include "core/attention/cuda_backend_impl.h"

#include <algorithm>

namespace kvlab {
namespace {

at::Device CurrentTorchDevice() {
#ifdef KVLAB_CUDA_EMULATION
  return at::Device(at::kCPU);
#else
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(dev));
#endif
}

}  // namespace

CudaBackendImpl::CudaBackendImpl(const CudaBackendOptions& o)
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
}

CudaBackendImpl::~CudaBackendImpl() {
  if (workspace_ != nullptr) cudaFree(workspace_);
}

Status CudaBackendImpl::Attach(KVCache* cache) {
  cache_ = cache;
  cache->SetDeviceOps(this);
  return Status::OK();
}

std::string CudaBackendImpl::torch_device() const { return device_.str(); }

PagedKV CudaBackendImpl::PoolView(int num_streams) const {
  PagedKV kv;
  kv.base = cache_->pool().device_data();
  kv.block_bytes = cache_->pool().block_bytes();
  kv.dtype = shape_.dtype;
  kv.block_size = shape_.block_size;
  kv.head_dim = shape_.head_dim;
  kv.num_streams = num_streams;
  return kv;
}

PagedKV CudaBackendImpl::FullPlain(int layer) const {
  PagedKV kv = PoolView(num_streams_);
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

void CudaBackendImpl::BuildTables(const PageTable& pt, const std::vector<int32_t>& qo_indptr,
                                  std::vector<int32_t>* full_out, StepTables* t) {
  const int L = shape_.num_layers, S = num_streams_;
  std::vector<int32_t> indices, lbl, enc_indices;
  t->plain_len.assign(static_cast<size_t>(L) * S, 0);
  t->enc_len.assign(static_cast<size_t>(L) * S, 0);
  for (int l = 0; l < L; ++l) {
    const PagedKV kv = pt.Layer(l);
    const EncodedKV* e = pt.Encoded(l);
    for (int s = 0; s < S; ++s) {
      const size_t g = static_cast<size_t>(l) * S + s;
      indices.insert(indices.end(), kv.indices + kv.indptr[s], kv.indices + kv.indptr[s + 1]);
      t->indptr.push_back(static_cast<int32_t>(indices.size()));
      lbl.push_back(kv.last_block_len[s]);
      t->plain_len[g] = kv.StreamLength(s);
      if (e != nullptr) {
        enc_indices.insert(enc_indices.end(), e->indices + e->indptr[s], e->indices + e->indptr[s + 1]);
        t->enc_len[g] = e->StreamTokens(s);
      }
      t->enc_indptr.push_back(static_cast<int32_t>(enc_indices.size()));
    }
  }
  std::vector<int32_t>& full = *full_out;
  full.reserve(t->indptr.size() + indices.size() + lbl.size() + t->enc_indptr.size() + enc_indices.size() +
               qo_indptr.size() + 2);
  full.insert(full.end(), t->indptr.begin(), t->indptr.end());
  off_indices_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), indices.begin(), indices.end());
  full.push_back(0);  // pad: a non-null pointer even when empty
  off_lbl_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), lbl.begin(), lbl.end());
  off_enc_indptr_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), t->enc_indptr.begin(), t->enc_indptr.end());
  off_enc_indices_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), enc_indices.begin(), enc_indices.end());
  full.push_back(0);
  off_qo_ = static_cast<int64_t>(full.size());
  full.insert(full.end(), qo_indptr.begin(), qo_indptr.end());
  t->q_len.resize(static_cast<size_t>(num_seqs_));
  for (int b = 0; b < num_seqs_; ++b) {
    t->q_len[static_cast<size_t>(b)] = qo_indptr[static_cast<size_t>(b) + 1] - qo_indptr[static_cast<size_t>(b)];
  }
}

Status CudaBackendImpl::PlanRow(int r, const PageTable& pt, const std::vector<int32_t>& qo_indptr, const StepTables& t,
                                std::vector<int32_t>* full, std::vector<int64_t>* meta_out, Row* row) {
  const int L = shape_.num_layers, H = shape_.num_kv_heads, bs = shape_.block_size, S = num_streams_;
  std::vector<int64_t>& meta = *meta_out;
  const std::vector<int64_t>* slot_attn_offsets = slot_attn_host_ != nullptr ? &slot_attn_host_->offsets : nullptr;
  std::vector<int> sub;
  for (int b = 0; b < num_seqs_; ++b) {
    if (t.q_len[static_cast<size_t>(b)] > r) sub.push_back(b);
  }
  row->num_seqs = static_cast<int>(sub.size());
  const int n = row->num_seqs * H;
  std::vector<int64_t> lens(static_cast<size_t>(n), 0);
  if (!decode_only_) {
    row->q_index_off = static_cast<int64_t>(meta.size());
    for (int b : sub) meta.push_back(qo_indptr[static_cast<size_t>(b)] + r);
  }
  for (int l = 0; l < L; ++l) {
    RowLayer rl;
    rl.off = static_cast<int64_t>(meta.size());
    if (const int32_t* fv = pt.FirstVisible(l)) {  // the cut streams keep their slot numbers
      rl.first_off = static_cast<int64_t>(full->size());
      for (int b : sub) {
        for (int h = 0; h < H; ++h) full->push_back(fv[static_cast<size_t>(qo_indptr[static_cast<size_t>(b)] + r) * H + h]);
      }
    }
    // Layout (8n + 2 entries): indptr [n+1], last_block_len [n], plain delta [n],
    // plain count [n], enc indptr [n+1], enc delta [n], enc count [n], slot offsets [n].
    if (!decode_only_) meta.resize(meta.size() + 8 * static_cast<size_t>(n) + 2, 0);
    auto cell = [&](int64_t k) -> int64_t& { return meta[static_cast<size_t>(rl.off + k)]; };
    for (int i = 0; i < n; ++i) {
      const int b = sub[static_cast<size_t>(i / H)];
      const size_t g = static_cast<size_t>(l) * S + static_cast<size_t>(b) * H + static_cast<size_t>(i % H);
      const int64_t cut = t.q_len[static_cast<size_t>(b)] - 1 - r;
      const int64_t plain = t.plain_len[g] - cut;
      if (plain < 1) {
        return Status::Internal("cuda engine: stream of sequence " + std::to_string(b) + " holds fewer slots than its new tokens");
      }
      lens[static_cast<size_t>(i)] = std::max(lens[static_cast<size_t>(i)], t.enc_len[g] + plain);
      if (decode_only_) continue;
      const int64_t nb = (plain + bs - 1) / bs;
      cell(i) = rl.plain_total;
      cell(n + 1 + i) = plain - (nb - 1) * bs;
      cell(2 * n + 1 + i) = t.indptr[g] - rl.plain_total;
      cell(3 * n + 1 + i) = nb;
      rl.plain_total += nb;
      const int64_t ne = t.enc_indptr[g + 1] - t.enc_indptr[g];
      cell(4 * n + 1 + i) = rl.enc_total;
      cell(5 * n + 2 + i) = t.enc_indptr[g] - rl.enc_total;
      cell(6 * n + 2 + i) = ne;
      rl.enc_total += ne;
      cell(7 * n + 2 + i) = slot_attn_offsets != nullptr ? (*slot_attn_offsets)[g] : 0;
    }
    if (!decode_only_) {
      cell(n) = rl.plain_total;
      cell(5 * n + 1) = rl.enc_total;
    }
    row->layers.push_back(rl);
  }
  const cudaError_t e = cuda::PlanPagedDecode(DecodeShape(row->num_seqs), lens.data(), {}, &row->plan);
  if (e != cudaSuccess) return Status::Internal("cuda engine: PlanPagedDecode: " + CudaErrorText(e));
  return Status::OK();
}

Status CudaBackendImpl::BeginStep(StepView* view) {
  if (cache_ == nullptr) return Status::Internal("cuda engine: BeginStep before Attach");
  const PageTable& pt = view->page_table;
  const std::vector<int32_t>& qo_indptr = view->qo_indptr;
  step_status_ = Status::OK();
  slot_attn_host_ = view->wants_slot_attention ? &view->slot_attention : nullptr;
  rows_.clear();
  num_seqs_ = pt.num_seqs();
  num_streams_ = num_seqs_ * shape_.num_kv_heads;
  total_q_ = qo_indptr.back();

  // The step's tables for all layers, one int32 upload.
  std::vector<int32_t> full;
  StepTables tables;
  BuildTables(pt, qo_indptr, &full, &tables);
  const int max_q = tables.q_len.empty() ? 0 : *std::max_element(tables.q_len.begin(), tables.q_len.end());
  decode_only_ = max_q == 1;

  // Rows: one per query index r; a multi-row step's arrays go to meta (int64),
  // window layers' first visible slots of each row's streams to full (int32).
  std::vector<int64_t> meta;
  int64_t max_ws = 0;
  for (int r = 0; r < max_q; ++r) {
    Row row;
    KVLAB_RETURN_IF_ERROR(PlanRow(r, pt, qo_indptr, tables, &full, &meta, &row));
    max_ws = std::max(max_ws, row.plan.workspace_bytes);
    rows_.push_back(std::move(row));
  }
  KVLAB_RETURN_IF_ERROR(GrowWorkspace(std::max<int64_t>(max_ws, 256)));
  try {
    full_ = Upload(full, at::kInt);
    meta_ = decode_only_ ? at::Tensor() : Upload(meta, at::kLong);
    if (slot_attn_host_ != nullptr) {
      const int64_t total = static_cast<int64_t>(slot_attn_host_->values.size());
      slot_attn_ = at::zeros({std::max<int64_t>(total, 1)}, at::TensorOptions().dtype(at::kFloat).device(device_));
      slot_off_ = Upload(slot_attn_host_->offsets, at::kLong);
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
                             float sm_scale, const float* q, float* o, const int64_t* slot_offsets,
                             const int32_t* first_visible) {
  AttentionParams p;
  p.num_seqs = plan.shape.num_seqs;
  p.num_qo_heads = num_qo_heads_;
  p.num_kv_heads = shape_.num_kv_heads;
  p.head_dim = shape_.head_dim;
  p.sm_scale = sm_scale;
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

void CudaBackendImpl::Append(int layer, const at::Tensor& k, const at::Tensor& v) {
  if (!step_status_.ok()) return;
  const cudaError_t e = cuda::AppendKv(FullPlain(layer), I32(off_qo_), num_seqs_, shape_.num_kv_heads,
                                       static_cast<int>(total_q_), k.data_ptr<float>(), v.data_ptr<float>(),
                                       /*stream=*/nullptr);
  if (e != cudaSuccess) Fail("AppendKv: " + CudaErrorText(e));
}

// a.rope_inv_freq is never set here: NewCudaBackend refuses keys stored before RoPE.
at::Tensor CudaBackendImpl::Attend(const LayerAttention& a, const at::Tensor& q) {
  if (!step_status_.ok()) return at::zeros_like(q);
  const int layer = a.layer;
  if (a.logit_softcap > 0) {  // LlamaModel::CheckPagedSupport refuses such models on the device
    Fail("layer " + std::to_string(layer) + ": the CUDA kernels do not soft-cap scores (logit_softcap)");
    return at::zeros_like(q);
  }
  try {
    const PagedKV full_kv = FullPlain(layer);
    const EncodedKV full_enc = shape_.encoded ? FullEncoded(layer) : EncodedKV();
    if (!decode_only_) return AttendRows(layer, a.sm_scale, q, full_kv, full_enc);
    at::Tensor o = at::empty_like(q);
    const int64_t* slot = slot_off_.defined() ? slot_off_.data_ptr<int64_t>() + layer * num_streams_ : nullptr;
    if (!Decode(rows_[0].plan, full_kv, shape_.encoded ? &full_enc : nullptr, a.sm_scale, q.data_ptr<float>(),
                o.data_ptr<float>(), slot, FirstVisible(rows_[0].layers[static_cast<size_t>(layer)]))) {
      return at::zeros_like(q);
    }
    return o;
  } catch (const c10::Error& e) {
    Fail(std::string("layer ") + std::to_string(layer) + ": " + e.what_without_backtrace());
    return at::zeros_like(q);
  }
}

at::Tensor CudaBackendImpl::AttendRows(int layer, float sm_scale, const at::Tensor& q, const PagedKV& full_kv,
                                       const EncodedKV& full_enc) {
  at::Tensor o = at::empty_like(q);
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
    if (!Decode(row.plan, kv, shape_.encoded ? &enc : nullptr, sm_scale, q_row.data_ptr<float>(),
                o_row.data_ptr<float>(), slot, FirstVisible(rl))) {
      return at::zeros_like(q);
    }
    o.index_copy_(0, q_index, o_row);
  }
  return o;
}

Status CudaBackendImpl::EndStep() {
  Status st = step_status_;
  const cudaError_t e = cudaDeviceSynchronize();
  if (st.ok() && e != cudaSuccess) st = Status::Internal("cuda engine: a kernel of this step failed: " + CudaErrorText(e));
  if (st.ok() && slot_attn_host_ != nullptr && slot_attn_.defined()) {
    std::vector<float>& host = slot_attn_host_->values;
    at::Tensor h = slot_attn_.to(at::kCPU).contiguous();
    const float* d = h.data_ptr<float>();
    const size_t n = std::min(host.size(), static_cast<size_t>(h.numel()));
    std::copy(d, d + n, host.begin());
  }
  full_ = meta_ = slot_attn_ = slot_off_ = at::Tensor();
  rows_.clear();
  step_status_ = Status::OK();
  slot_attn_host_ = nullptr;
  return st;
}

}  // namespace kvlab
