// Host side of the CUDA paged decode: planning (split size), argument checks,
// and the launches of the decode kernel (paged_decode_kernel.cuh), the split
// merge and the slot_attn pass.
#include "kernels/cuda/paged_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/paged_decode_kernel.cuh"
#include "kernels/cuda/paged_decode_tc.cuh"

namespace kvlab {
namespace cuda {

namespace {

using detail::DecodeArgs;
using detail::DecodeKernelFn;
using detail::kChunkGranule;
using detail::kLog2e;
using detail::kMaxThreads;
using detail::kMinChunkTokens;

constexpr int64_t kSplitCostTokens = 128;     // a CTA's fixed cost (pipeline fill, merge) in tokens
constexpr int64_t kMaxSplitCandidates = 1024;
using detail::kRowsPerThread;
using detail::kTargetSliceThreads;

// Merges the splits of each query row: one warp per row, lanes over channels.
struct MergeArgs {
  const float* tmp_o;
  const float* tmp_lse;
  int num_rows, max_splits, head_dim;
  float* o;
  float* lse;
};

__global__ void MergeSplitsKernel(const __grid_constant__ MergeArgs a) {
  const float* tmp_o = a.tmp_o;
  const float* tmp_lse = a.tmp_lse;
  const int num_rows = a.num_rows, max_splits = a.max_splits, head_dim = a.head_dim;
  float* o = a.o;
  float* lse = a.lse;
  const int warps = blockDim.x / 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= num_rows) return;  // whole warps leave together
  const float* lrow = tmp_lse + row * max_splits;
  float M = -INFINITY;
  for (int i = lane; i < max_splits; i += 32) M = fmaxf(M, lrow[i]);
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  if (M == -INFINITY) {
    for (int d = lane; d < head_dim; d += 32) o[row * head_dim + d] = 0.0f;
    if (lane == 0) lse[row] = -INFINITY;
    return;
  }
  float L = 0.0f;
  for (int i = lane; i < max_splits; i += 32) {
    if (lrow[i] != -INFINITY) L += exp2f(lrow[i] - M);
  }
  for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
  for (int d = lane; d < head_dim; d += 32) {
    float acc = 0.0f;
    for (int i = 0; i < max_splits; ++i) {
      if (lrow[i] == -INFINITY) continue;  // empty split: its tmp_o was never written
      acc = fmaf(exp2f(lrow[i] - M), tmp_o[(row * max_splits + i) * head_dim + d], acc);
    }
    o[row * head_dim + d] = acc / L;
  }
  if (lane == 0) lse[row] = M + log2f(L);
}

// The kernel for a storage dtype and an encoded segment's kind (KIVI and
// none share one; int8 and fp8 share another).
DecodeKernelFn SelectKernel(DType dtype, int d, int gpt, EncodingKind enc_kind) {
  const bool q8 = enc_kind == EncodingKind::kInt8 || enc_kind == EncodingKind::kFp8;
  switch (dtype) {
    case DType::kF32: return q8 ? detail::SelectDecodeKernelQ8F32(d, gpt) : detail::SelectDecodeKernelF32(d, gpt);
    case DType::kF16: return q8 ? detail::SelectDecodeKernelQ8F16(d, gpt) : detail::SelectDecodeKernelF16(d, gpt);
    case DType::kBF16: return q8 ? detail::SelectDecodeKernelQ8BF16(d, gpt) : detail::SelectDecodeKernelBF16(d, gpt);
  }
  return nullptr;
}

// The tensor-core kernel for a plain 16-bit cache, or nullptr.
DecodeKernelFn SelectTcKernel(DType dtype, int d) {
  switch (dtype) {
    case DType::kBF16: return detail::SelectDecodeKernelTcBF16(d);
    case DType::kF16: return detail::SelectDecodeKernelTcF16(d);
    case DType::kF32: return nullptr;
  }
  return nullptr;
}

bool TcApplies(const PagedDecodeShape& sh) {
  const int group = sh.num_qo_heads / sh.num_kv_heads;
  return (sh.dtype == DType::kBF16 || sh.dtype == DType::kF16) && sh.enc_tokens_per_block == 0 && group >= 2 &&
         group <= detail::kTcMaxGroup && SelectTcKernel(sh.dtype, sh.head_dim) != nullptr;
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The tensor-core kernel's dynamic shared memory: its stages, or its merge.
int64_t TcSmemBytes(int head_dim, int stages) {
  return RoundUp(std::max(stages * detail::TcStageBytes(head_dim), detail::TcMergeBytes(head_dim)), 16);
}

bool IsQuant8(EncodingKind k) { return k == EncodingKind::kInt8 || k == EncodingKind::kFp8; }
bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// Shared-memory bytes between the blocks of an encoded tile (each block starts
// 16-byte aligned).
int64_t EncSmemStride(const PagedDecodeShape& sh) { return RoundUp(sh.enc_block_bytes, 16); }

// Encoded blocks per tile. KIVI: one. int8 / fp8 blocks are small (a
// 16-token block is 4 KB at head_dim 128, a quarter of a bf16 plain tile), so
// a tile takes the fewest power-of-two count of consecutive blocks that fills
// a plain stage (at most kMaxEncTileTokens tokens): as many bytes in flight
// per CTA as a plain tile, and whole passes of the row groups.
int EncTileBlocks(const PagedDecodeShape& sh, int64_t plain_stage) {
  if (sh.enc_tokens_per_block <= 0 || !IsQuant8(sh.enc_kind)) return 1;
  int nb = 1;
  while (nb * EncSmemStride(sh) < plain_stage && 2LL * nb * sh.enc_tokens_per_block <= detail::kMaxEncTileTokens) {
    nb *= 2;
  }
  return nb;
}

int64_t PlainStageBytes(const PagedDecodeShape& sh, int tile_tokens) {
  return static_cast<int64_t>(tile_tokens) * 2 * sh.head_dim * DTypeBytes(sh.dtype);
}
int64_t StageBytes(const PagedDecodeShape& sh, int tile_tokens, int enc_tile_blocks) {
  const int64_t enc = sh.enc_tokens_per_block > 0 ? enc_tile_blocks * EncSmemStride(sh) : 0;
  return RoundUp(std::max(PlainStageBytes(sh, tile_tokens), enc), 16);
}

// Sets the kernel's dynamic shared-memory limit when it needs more than the
// default 48 KB.
cudaError_t AllowSmem(DecodeKernelFn fn, int64_t smem_bytes) {
  if (smem_bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes));
}

// Layout of the workspace: final lse, then (with splits) partial lse and o.
struct Workspace {
  int64_t lse_off = 0, tmp_lse_off = 0, tmp_o_off = 0, bytes = 0;
};
Workspace WorkspaceLayout(int64_t num_rows, int max_splits, int head_dim) {
  Workspace w;
  w.lse_off = 0;
  w.bytes = RoundUp(num_rows * 4, 256);
  if (max_splits > 1) {
    w.tmp_lse_off = w.bytes;
    w.bytes += RoundUp(num_rows * max_splits * 4, 256);
    w.tmp_o_off = w.bytes;
    w.bytes += RoundUp(num_rows * max_splits * head_dim * 4, 256);
  }
  return w;
}


// (code, message) of the host-side checks; code is cudaSuccess when valid.
struct CheckResult {
  cudaError_t code = cudaSuccess;
  std::string why;
};
CheckResult Invalid(std::string why) { return {cudaErrorInvalidValue, "paged_decode: " + std::move(why)}; }
CheckResult Unsupported(std::string why) { return {cudaErrorNotSupported, "paged_decode: " + std::move(why)}; }

CheckResult CheckShape(const PagedDecodeShape& sh) {
  if (sh.num_seqs < 0) return Invalid("num_seqs must be >= 0");
  if (sh.num_kv_heads <= 0 || sh.num_qo_heads <= 0 || sh.num_qo_heads % sh.num_kv_heads != 0) {
    return Invalid("num_qo_heads (" + std::to_string(sh.num_qo_heads) + ") must be a positive multiple of num_kv_heads (" +
                   std::to_string(sh.num_kv_heads) + ")");
  }
  if (sh.head_dim != 64 && sh.head_dim != 128) {
    return Unsupported("head_dim " + std::to_string(sh.head_dim) + " (supported: 64, 128)");
  }
  const int group = sh.num_qo_heads / sh.num_kv_heads;
  const int gpt = group % 4 == 0 ? 4 : (group % 2 == 0 ? 2 : 1);
  const int slices = group / gpt;
  const int slice_threads = std::max(32, kTargetSliceThreads / slices / 32 * 32);
  if (slices * slice_threads > kMaxThreads) {
    return Unsupported("GQA group " + std::to_string(group) + " (needs group <= 8, or even <= 16, or a multiple of 4 <= 32)");
  }
  if (sh.enc_tokens_per_block < 0) return Invalid("enc_tokens_per_block must be >= 0");
  if (sh.enc_tokens_per_block > 0) {
    if (sh.enc_block_bytes <= 0 || sh.enc_block_bytes % 4 != 0) {
      return Unsupported("encoded block bytes " + std::to_string(sh.enc_block_bytes) + " must be a positive multiple of 4");
    }
    if (IsQuant8(sh.enc_kind) && !IsPowerOfTwo(sh.enc_tokens_per_block)) {
      return Unsupported("int8 / fp8 tokens_per_block " + std::to_string(sh.enc_tokens_per_block) +
                         " (must be a power of two)");
    }
  }
  return {};
}

}  // namespace

std::string PagedDecodeShapeCheck(const PagedDecodeShape& shape) { return CheckShape(shape).why; }

cudaError_t PlanPagedDecode(const PagedDecodeShape& shape, const int64_t* stream_len, const PagedDecodeOptions& options,
                            PagedDecodePlan* plan) {
  if (plan == nullptr) return cudaErrorInvalidValue;
  const CheckResult sc = CheckShape(shape);
  if (sc.code != cudaSuccess) return sc.code;
  const int num_streams = shape.num_seqs * shape.num_kv_heads;
  if (num_streams > 0 && stream_len == nullptr) return cudaErrorInvalidValue;

  PagedDecodePlan pl;
  pl.shape = shape;
  const int es = DTypeBytes(shape.dtype);
  const int vec = 16 / es;
  const int tpr = shape.head_dim / vec;
  const int group = shape.num_qo_heads / shape.num_kv_heads;
  pl.heads_per_thread = group % 4 == 0 ? 4 : (group % 2 == 0 ? 2 : 1);
  if (options.heads_per_thread != 0) {
    const int h = options.heads_per_thread;
    if ((h != 1 && h != 2 && h != 4) || group % h != 0) return cudaErrorInvalidValue;
    pl.heads_per_thread = h;
  }
  pl.head_slices = group / pl.heads_per_thread;
  const int slice_threads = std::max(32, kTargetSliceThreads / pl.head_slices / 32 * 32);
  pl.threads = pl.head_slices * slice_threads;
  if (pl.threads > kMaxThreads) return cudaErrorNotSupported;
  if (options.stages != 0) {
    if (options.stages < 2 || options.stages > detail::kMaxStages) return cudaErrorInvalidValue;
    pl.stages = options.stages;
  }
  const int rows = slice_threads / tpr;
  pl.tile_tokens = rows * kRowsPerThread;
  pl.enc_tile_blocks = EncTileBlocks(shape, PlainStageBytes(shape, pl.tile_tokens));
  const int64_t stage = StageBytes(shape, pl.tile_tokens, pl.enc_tile_blocks);
  const int64_t part = static_cast<int64_t>(pl.head_slices) *
                       std::max(pl.tile_tokens, pl.enc_tile_blocks * shape.enc_tokens_per_block) * 4;
  const int64_t merge = static_cast<int64_t>(pl.threads / tpr) * pl.heads_per_thread * (shape.head_dim + 2) * 4;
  pl.smem_bytes = RoundUp(std::max(pl.stages * stage + part, merge), 16);
  if (options.tensor_cores < -1 || options.tensor_cores > 1) return cudaErrorInvalidValue;
  bool tc_device = true;  // the current GPU has mma.sync for bf16 / fp16 (sm_80+); assumed when none answers
  const bool tc_wanted = options.tensor_cores == 1 || (options.tensor_cores == 0 && kPagedDecodeTensorCoresByDefault);
  if (options.tensor_cores == 0 && kPagedDecodeTensorCoresByDefault) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess) {
      tc_device = major >= 8;
    } else {
      (void)cudaGetLastError();  // no device here: planning only (tests)
    }
  }
  if (tc_wanted && tc_device && TcApplies(shape)) {
    pl.tensor_cores = true;
    pl.tc_smem_bytes = TcSmemBytes(shape.head_dim, pl.stages);
  } else if (options.tensor_cores == 1) {
    return cudaErrorNotSupported;
  }

  // Split size.
  int64_t max_len = 0;
  for (int s = 0; s < num_streams; ++s) {
    if (stream_len[s] < 0) return cudaErrorInvalidValue;
    max_len = std::max(max_len, stream_len[s]);
  }
  const int64_t granule = std::max<int64_t>(kChunkGranule, shape.enc_tokens_per_block);
  auto ctas_for = [&](int64_t chunk) {
    int64_t n = 0;
    for (int s = 0; s < num_streams; ++s) n += std::max<int64_t>(1, (stream_len[s] + chunk - 1) / chunk);
    return n;
  };
  int64_t chunk = RoundUp(std::max<int64_t>(max_len, 1), granule);
  if (options.force_chunk_tokens > 0) {
    chunk = std::min(chunk, RoundUp(options.force_chunk_tokens, granule));
  } else if (num_streams > 0) {
    int num_sms = options.num_sms, per_sm = options.ctas_per_sm;
    if (num_sms <= 0 || per_sm <= 0) {
      int dev = 0;
      cudaError_t err = cudaGetDevice(&dev);
      if (err != cudaSuccess) return err;
      if (num_sms <= 0) {
        err = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
        if (err != cudaSuccess) return err;
      }
      if (per_sm <= 0) {
        const DecodeKernelFn fn = pl.tensor_cores
                                      ? SelectTcKernel(shape.dtype, shape.head_dim)
                                      : SelectKernel(shape.dtype, shape.head_dim, pl.heads_per_thread, shape.enc_kind);
        if (fn == nullptr) return cudaErrorNotSupported;
        const int64_t smem = pl.tensor_cores ? pl.tc_smem_bytes : pl.smem_bytes;
        err = AllowSmem(fn, smem);
        if (err != cudaSuccess) return err;
        const int threads = pl.tensor_cores ? detail::kTcThreads : pl.threads;
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, static_cast<size_t>(smem));
        if (err != cudaSuccess) return err;
        if (per_sm <= 0) return cudaErrorNotSupported;  // does not fit on an SM
      }
    }
    pl.ctas_per_sm = per_sm;
    const int64_t slots = static_cast<int64_t>(num_sms) * per_sm;  // CTAs resident at once: one wave
    if (max_len > kMinChunkTokens) {
      // Model: CTAs of one wave run side by side and a CTA's time is its
      // tokens plus a fixed cost, so a split size costs waves * (chunk +
      // kSplitCostTokens). Candidates: each split count of the longest
      // stream (up to kMaxSplitCandidates); ties go to fewer splits. This
      // splits short batches over the whole GPU and also splits a large
      // batch whose CTAs would leave most of a last wave idle.
      const int64_t min_chunk = RoundUp(kMinChunkTokens, granule);
      int64_t best_cost = INT64_MAX, prev_chunk = -1;
      for (int64_t splits = 1; splits <= kMaxSplitCandidates; ++splits) {
        const int64_t c = std::max(min_chunk, RoundUp((max_len + splits - 1) / splits, granule));
        if (c == prev_chunk) continue;
        prev_chunk = c;
        const int64_t waves = (ctas_for(c) + slots - 1) / slots;
        const int64_t cost = waves * (std::min(c, max_len) + kSplitCostTokens);
        if (cost < best_cost) {
          best_cost = cost;
          chunk = c;
        }
        if (c == min_chunk) break;
      }
    }
  }
  if (chunk > INT32_MAX) return cudaErrorNotSupported;
  pl.chunk_tokens = static_cast<int>(chunk);
  const int64_t splits = std::max<int64_t>(1, (max_len + chunk - 1) / chunk);
  if (splits * std::max(1, num_streams) > INT32_MAX) return cudaErrorNotSupported;
  pl.max_splits = static_cast<int>(splits);
  pl.workspace_bytes = WorkspaceLayout(static_cast<int64_t>(shape.num_seqs) * shape.num_qo_heads, pl.max_splits,
                                       shape.head_dim).bytes;
  *plan = pl;
  return cudaSuccess;
}

namespace {

CheckResult CheckCall(const PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc, const AttentionParams& p,
                      const void* workspace, int64_t workspace_bytes) {
  const PagedDecodeShape& sh = plan.shape;
  CheckResult r = CheckShape(sh);
  if (r.code != cudaSuccess) return r;
  if (p.num_seqs != sh.num_seqs || p.num_qo_heads != sh.num_qo_heads || p.num_kv_heads != sh.num_kv_heads ||
      p.head_dim != sh.head_dim) {
    return Invalid("params (num_seqs, num_qo_heads, num_kv_heads, head_dim) differ from the plan's");
  }
  if (kv.dtype != sh.dtype || kv.head_dim != sh.head_dim) return Invalid("cache dtype or head_dim differs from the plan's");
  if (kv.num_streams != sh.num_seqs * sh.num_kv_heads) {
    return Invalid("cache has " + std::to_string(kv.num_streams) + " streams, expected num_seqs * num_kv_heads = " +
                   std::to_string(sh.num_seqs * sh.num_kv_heads));
  }
  if (p.rope_inv_freq != nullptr) return Unsupported("rotation at read time (rope_inv_freq) is not implemented on CUDA");
  if (enc != nullptr && enc->dead != nullptr) {
    return Unsupported("evicted slots inside sealed groups (EncodedKV::dead) are not implemented on CUDA");
  }
  if (!(p.sm_scale > 0.0f) || !std::isfinite(p.sm_scale)) return Invalid("sm_scale must be positive and finite");
  if (sh.num_seqs == 0) return {};
  if (kv.block_size <= 0) return Invalid("block_size must be positive");
  const int64_t row_bytes = static_cast<int64_t>(sh.head_dim) * DTypeBytes(sh.dtype);
  if (kv.block_bytes < 2 * kv.block_size * row_bytes || kv.block_bytes % 16 != 0) {
    return Invalid("block_bytes " + std::to_string(kv.block_bytes) + " must be >= 2 * block_size * head_dim * " +
                   DTypeName(sh.dtype) + " bytes and a multiple of 16");
  }
  if (kv.base == nullptr || kv.indptr == nullptr || kv.indices == nullptr || kv.last_block_len == nullptr) {
    return Invalid("cache base, indptr, indices or last_block_len is null");
  }
  if (!Aligned(kv.base, 16)) return Invalid("cache base must be 16-byte aligned");
  if (p.q == nullptr || p.o == nullptr || !Aligned(p.q, 16) || !Aligned(p.o, 16)) {
    return Invalid("q and o must be non-null and 16-byte aligned");
  }
  if (p.slot_attn != nullptr && p.slot_attn_offsets == nullptr) {
    return Invalid("slot_attn is set but slot_attn_offsets is null");
  }
  const bool has_enc = enc != nullptr;
  if (has_enc != (sh.enc_tokens_per_block > 0)) {
    return Invalid(has_enc ? "an encoded segment was passed but the plan has none (enc_tokens_per_block = 0)"
                           : "the plan expects an encoded segment but enc is null");
  }
  if (has_enc) {
    const KvEncoding& e = enc->enc;
    const std::string v = e.Validate();
    if (!v.empty()) return Invalid(v);
    if (e.kind != sh.enc_kind) return Invalid("encoded kind " + e.Describe() + " differs from the plan's enc_kind");
    if (e.kind == EncodingKind::kKivi) {
      if (e.key_axis != QuantAxis::kChannel || e.value_axis != QuantAxis::kToken) {
        return Unsupported("KIVI axes of " + e.Describe() + " (only keys per channel, values per token)");
      }
      if (!IsPowerOfTwo(e.group)) return Unsupported("KIVI group must be a power of two");
    }
    if (e.head_dim != sh.head_dim) return Invalid("encoding head_dim differs from the cache's");
    if (e.tokens_per_block != sh.enc_tokens_per_block || e.BlockBytes() != sh.enc_block_bytes) {
      return Invalid("encoding differs from the plan's (tokens_per_block, BlockBytes)");
    }
    if (plan.chunk_tokens % e.tokens_per_block != 0) return Invalid("plan chunk is not a multiple of tokens_per_block");
    if (plan.enc_tile_blocks != EncTileBlocks(sh, PlainStageBytes(sh, plan.tile_tokens))) {
      return Invalid("plan enc_tile_blocks was not made by PlanPagedDecode");
    }
    if (enc->block_bytes < e.BlockBytes() || enc->block_bytes % 4 != 0) {
      return Invalid("encoded block_bytes must be >= BlockBytes() (" + std::to_string(e.BlockBytes()) +
                     ") and a multiple of 4");
    }
    if (enc->num_streams != kv.num_streams) return Invalid("encoded view has a different number of streams");
    if (enc->base == nullptr || enc->indptr == nullptr || enc->indices == nullptr || !Aligned(enc->base, 16)) {
      return Invalid("encoded base, indptr or indices null, or base not 16-byte aligned");
    }
  } else if (plan.enc_tile_blocks != 1) {
    return Invalid("plan enc_tile_blocks was not made by PlanPagedDecode");
  }
  if (plan.chunk_tokens <= 0 || plan.max_splits <= 0) return Invalid("plan was not made by PlanPagedDecode");
  if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && workspace == nullptr) ||
      !Aligned(workspace, 256)) {
    return Invalid("workspace must hold plan.workspace_bytes = " + std::to_string(plan.workspace_bytes) +
                   " bytes, 256-byte aligned");
  }
  return {};
}

int Log2Exact(int x) {
  int n = 0;
  while ((1 << n) < x) ++n;
  return n;
}

}  // namespace

std::string PagedDecodeCheck(const PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc,
                             const AttentionParams& p, const void* workspace, int64_t workspace_bytes) {
  return CheckCall(plan, kv, enc, p, workspace, workspace_bytes).why;
}

cudaError_t PagedDecode(const PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc, const AttentionParams& p,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  const CheckResult check = CheckCall(plan, kv, enc, p, workspace, workspace_bytes);
  if (check.code != cudaSuccess) return check.code;
  const PagedDecodeShape& sh = plan.shape;
  if (sh.num_seqs == 0) return cudaSuccess;
  const DecodeKernelFn fn = SelectKernel(sh.dtype, sh.head_dim, plan.heads_per_thread, sh.enc_kind);
  if (fn == nullptr) return cudaErrorNotSupported;

  const int64_t num_rows = static_cast<int64_t>(sh.num_seqs) * sh.num_qo_heads;
  const Workspace ws = WorkspaceLayout(num_rows, plan.max_splits, sh.head_dim);
  uint8_t* wsb = static_cast<uint8_t*>(workspace);
  const int tpr = sh.head_dim / (16 / DTypeBytes(sh.dtype));

  DecodeArgs a{};
  SetPageTable(kv, &a);
  a.last_block_len = kv.last_block_len;
  if (enc != nullptr) {
    const KvEncoding& e = enc->enc;
    a.enc_base = enc->base;
    a.enc_block_bytes = enc->block_bytes;
    a.enc_indptr = enc->indptr;
    a.enc_indices = enc->indices;
    a.enc_tpb = e.tokens_per_block;
    a.enc_bits = e.bits;
    a.enc_kind = static_cast<int>(e.kind);
    a.enc_copy_bytes = static_cast<int>(e.BlockBytes());
    a.enc_copy16 = e.BlockBytes() % 16 == 0 && enc->block_bytes % 16 == 0 ? 1 : 0;
    a.enc_tile_blocks = plan.enc_tile_blocks;
    a.enc_smem_stride = static_cast<int>(EncSmemStride(sh));
    a.enc_code_bytes = e.CodeBytes();
    const int64_t nk = e.NumKeyParams(), nv = e.NumValueParams();
    a.enc_kscale_off = 2 * e.CodeBytes();
    if (e.kind == EncodingKind::kKivi) {  // K scales, K zeros, V scales, V zeros
      a.enc_vgroup_shift = Log2Exact(e.group);
      a.enc_kzero_off = a.enc_kscale_off + 2 * nk;
      a.enc_vscale_off = a.enc_kzero_off + 2 * nk;
      a.enc_vzero_off = a.enc_vscale_off + 2 * nv;
    } else {  // K scales, V scales
      a.enc_tpb_shift = Log2Exact(e.tokens_per_block);
      a.enc_scale_mask = e.scale_per_token ? e.tokens_per_block - 1 : 0;
      a.enc_vscale_off = a.enc_kscale_off + 2 * nk;
    }
  } else {
    a.enc_tile_blocks = 1;
  }
  a.q = p.q;
  a.o = p.o;
  a.lse = reinterpret_cast<float*>(wsb + ws.lse_off);
  if (plan.max_splits > 1) {
    a.tmp_lse = reinterpret_cast<float*>(wsb + ws.tmp_lse_off);
    a.tmp_o = reinterpret_cast<float*>(wsb + ws.tmp_o_off);
  }
  a.slot_attn = p.slot_attn;
  a.slot_offsets = p.slot_attn_offsets;
  a.first_visible = p.first_visible;
  a.num_kv_heads = sh.num_kv_heads;
  a.num_qo_heads = sh.num_qo_heads;
  a.group = sh.num_qo_heads / sh.num_kv_heads;
  a.head_slices = plan.head_slices;
  a.rows = plan.threads / plan.head_slices / tpr;
  a.tile = plan.tile_tokens;
  a.chunk = plan.chunk_tokens;
  a.max_splits = plan.max_splits;
  a.stage_bytes = StageBytes(sh, plan.tile_tokens, plan.enc_tile_blocks);
  a.stages = plan.stages;
  a.part_stride = std::max(plan.tile_tokens, plan.enc_tile_blocks * sh.enc_tokens_per_block);
  a.scale_log2 = p.sm_scale * kLog2e;
  a.slot_pass = 0;
  if (a.rows * kRowsPerThread != a.tile || a.rows <= 0 || a.stages < 2 || a.stages > detail::kMaxStages ||
      a.stages * a.stage_bytes + a.head_slices * a.part_stride * 4 > plan.smem_bytes) {
    return cudaErrorInvalidValue;  // the plan was edited by hand
  }

  cudaError_t err = AllowSmem(fn, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  const unsigned grid = static_cast<unsigned>(static_cast<int64_t>(kv.num_streams) * plan.max_splits);
  if (plan.tensor_cores) {
    const DecodeKernelFn tc = TcApplies(sh) ? SelectTcKernel(sh.dtype, sh.head_dim) : nullptr;
    if (tc == nullptr || enc != nullptr || plan.tc_smem_bytes < TcSmemBytes(sh.head_dim, plan.stages)) {
      return cudaErrorInvalidValue;  // the plan was edited by hand
    }
    err = AllowSmem(tc, plan.tc_smem_bytes);
    if (err != cudaSuccess) return err;
    DecodeArgs at = a;
    at.stage_bytes = detail::TcStageBytes(sh.head_dim);
    at.tile = detail::kTcTile;  // the shared TileLoader's rows a tile
    err = LaunchKernel(tc, dim3(grid), dim3(detail::kTcThreads), static_cast<size_t>(plan.tc_smem_bytes), stream, at);
  } else {
    err = LaunchKernel(fn, dim3(grid), dim3(plan.threads), static_cast<size_t>(plan.smem_bytes), stream, a);
  }
  if (err != cudaSuccess) return err;
  if (plan.max_splits > 1) {
    constexpr int kMergeWarps = 4;
    const unsigned mgrid = static_cast<unsigned>((num_rows + kMergeWarps - 1) / kMergeWarps);
    const MergeArgs m{a.tmp_o, a.tmp_lse, static_cast<int>(num_rows), plan.max_splits, sh.head_dim, p.o, a.lse};
    err = LaunchKernel(MergeSplitsKernel, dim3(mgrid), dim3(kMergeWarps * 32), 0, stream, m);
    if (err != cudaSuccess) return err;
  }
  if (p.slot_attn != nullptr) {
    a.slot_pass = 1;
    err = LaunchKernel(fn, dim3(grid), dim3(plan.threads), static_cast<size_t>(plan.smem_bytes), stream, a);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace kvlab
