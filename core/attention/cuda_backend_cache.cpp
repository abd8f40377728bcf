// The CUDA backend's side of the cache (see cuda_backend.h): as the cache's
// DeviceKvOps it moves the kept rows of compacted streams and encodes the
// groups KVCache::Seal sealed, each batch in one kernel call; and what the
// kernels accept, asked before a backend is made.
#include "core/attention/cuda_backend_impl.h"

#include <algorithm>

namespace kvlab {
namespace {

// The stored name of the policy claiming concern c ("?" if none).
std::string PolicyName(const PolicyStack& stack, Concern c) {
  const KVPolicy* p = stack.For(c);
  return p != nullptr ? std::string("'") + p->Name() + "'" : std::string("?");
}

// What the kernels accept, asked of their own host-side checks with a
// one-sequence call (pointers are never dereferenced by the checks).
Status CheckKernelsAccept(const CudaBackendOptions& o, const std::string& stack) {
  const CacheShape& sh = o.shape;
  const cuda::PagedDecodeShape ds = DecodeShapeOf(sh, o.num_qo_heads, /*num_seqs=*/1);
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

void CudaBackendImpl::Compacted(const std::vector<int32_t>& blocks, int64_t length, const std::vector<int64_t>& keep) {
  cmp_indices_.insert(cmp_indices_.end(), blocks.begin(), blocks.end());
  cmp_indptr_.push_back(static_cast<int32_t>(cmp_indices_.size()));
  cmp_last_len_.push_back(static_cast<int32_t>(length - static_cast<int64_t>(blocks.size() - 1) * shape_.block_size));
  cmp_kept_off_.push_back(static_cast<int64_t>(cmp_kept_.size()));
  for (int64_t k : keep) cmp_kept_.push_back(static_cast<int32_t>(k));
  cmp_num_kept_.push_back(static_cast<int32_t>(keep.size()));
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
    PagedKV kv = PoolView(static_cast<int>(cmp_num_kept_.size()));
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

// KVCache::Seal keeps the books and tells which groups it sealed; they are
// encoded on the device from the old block lists. The freed plain blocks
// still hold their rows: nothing writes them before the next step, which
// runs after this launch.
void CudaBackendImpl::Sealed(const std::vector<int32_t>& before, int64_t plain_before,
                             const std::vector<int32_t>& new_enc_blocks) {
  const int bs = shape_.block_size, tpb = shape_.enc.tokens_per_block;
  const int32_t stream = static_cast<int32_t>(seal_indptr_.size()) - 1;
  const int64_t nb = (plain_before + bs - 1) / bs;
  seal_indices_.insert(seal_indices_.end(), before.begin(), before.begin() + nb);
  seal_indptr_.push_back(static_cast<int32_t>(seal_indices_.size()));
  seal_lbl_.push_back(static_cast<int32_t>(plain_before - (nb - 1) * bs));
  for (size_t j = 0; j < new_enc_blocks.size(); ++j) {
    job_stream_.push_back(stream);
    job_first_.push_back(static_cast<int32_t>(j * static_cast<size_t>(tpb)));
    job_dst_.push_back(new_enc_blocks[j]);
  }
}

// The queued seals in one cuda::EncodeSealKivi call.
Status CudaBackendImpl::LaunchSeal() {
  if (job_stream_.empty()) return Status::OK();
  try {
    const int64_t num_streams = static_cast<int64_t>(seal_lbl_.size()), nj = static_cast<int64_t>(job_stream_.size());
    std::vector<int32_t> all = seal_indptr_;
    all.insert(all.end(), seal_lbl_.begin(), seal_lbl_.end());
    all.insert(all.end(), job_stream_.begin(), job_stream_.end());
    all.insert(all.end(), job_first_.begin(), job_first_.end());
    all.insert(all.end(), job_dst_.begin(), job_dst_.end());
    all.insert(all.end(), seal_indices_.begin(), seal_indices_.end());
    at::Tensor d = Upload(all, at::kInt);
    int32_t* p = d.data_ptr<int32_t>();
    PagedKV kv = PoolView(static_cast<int>(num_streams));
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

Status CudaBackendImpl::FinishSeal() {
  Status st = LaunchSeal();
  seal_indptr_.assign(1, 0);
  for (auto* v : {&seal_indices_, &seal_lbl_, &job_stream_, &job_first_, &job_dst_}) v->clear();
  return st;
}

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

Status NewCudaBackend(const CudaBackendOptions& o, std::unique_ptr<AttentionBackend>* out) {
  if (o.policies == nullptr) return Status::InvalidArgument("NewCudaBackend: no policy stack");
  const PolicyStack& stack = *o.policies;
  const std::string stack_name = "'" + stack.Describe() + "'";
  const std::string not_yet = " is not supported on device \"cuda\" yet";
  if (const KVPolicy* read = stack.ReadPolicy()) {
    return Status::InvalidArgument("policy '" + std::string(read->Name()) + "' (read: attention over a chosen subset of "
                                   "blocks)" + not_yet + ": cuda::PagedDecode reads every block of a stream and no "
                                   "device kernel ranks blocks by their key bounds; use device \"cpu\"");
  }
  if (stack.KeysBeforeRope()) {
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernSelection) +
                                   " stores keys before RoPE and rotates them at read time (positions=\"cache\"), which" +
                                   not_yet + " (cuda::PagedDecode does not rotate keys): use positions=\"original\" or "
                                   "device \"cpu\"");
  }
  if (const KVPolicy* sel = stack.For(kConcernSelection);
      sel != nullptr &&
      (sel->ObservationWindow() > 0 || sel->NeedsKeyNorms() || sel->NeedsKeyValues() || sel->SelectsPerLayer() ||
       sel->PerHeadSplit())) {
    const std::string need = sel->ObservationWindow() > 0 ? "the attention of an observation window (its last queries only)"
                             : sel->NeedsKeyNorms()       ? "key norms read from the cache's blocks"
                             : sel->NeedsKeyValues()      ? "the slots' keys and values read on the host"
                             : sel->SelectsPerLayer()     ? "all KV heads of a layer selected jointly"
                                                          : "a per-(layer, head) split (heads of a layer as long as their "
                                                            "rule, full or windowed)";
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernSelection) + " (selection) needs " + need + "," +
                                   not_yet + ": the CUDA kernels and device compaction are not wired for it; use device "
                                   "\"cpu\"");
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
  if (o.shape.encoded && o.shape.enc.kind != EncodingKind::kKivi && o.shape.enc.kind != EncodingKind::kInt8 &&
      o.shape.enc.kind != EncodingKind::kFp8) {
    return Status::InvalidArgument("policy " + PolicyName(stack, kConcernRepresentation) + " (" +
                                   o.shape.enc.Describe() + ")" + not_yet +
                                   ": cuda::PagedDecode and the device seal encoders read kivi, int8 and fp8 blocks "
                                   "only; use device \"cpu\"");
  }
  if (o.shape.encoded) {
    Status s = CheckKernelsAccept(o, stack_name);
    if (!s.ok()) {
      return Status::InvalidArgument("policy " + PolicyName(stack, kConcernRepresentation) + " (" +
                                     o.shape.enc.Describe() + ")" + not_yet + ": " + s.message());
    }
  }
  KVLAB_RETURN_IF_ERROR(CheckKernelsAccept(o, stack_name));
  if (o.prefix_caching && stack.For(kConcernSelection) != nullptr) {
    return Status::InvalidArgument("prefix caching with the selection policy '" +
                                   std::string(stack.For(kConcernSelection)->Name()) +
                                   "' is not supported yet (copy-on-write of shared blocks on the device)");
  }
  out->reset(new CudaBackendImpl(o));
  return Status::OK();
}

}  // namespace kvlab
