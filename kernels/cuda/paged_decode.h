// CUDA paged decode attention (flash-decoding over the PagedKV page table, with
// the stream's encoded segment -- KIVI, int8 or fp8 -- dequantised in
// registers). Plain structs and raw device pointers only, no libtorch: the
// tensor glue lives with the caller.
// Host functions here never throw or exit; launchers return a cudaError_t.
//
// Use: PlanPagedDecode once per step (host lengths, like FlashInfer's plan),
// then PagedDecode once per layer on a stream with a workspace of
// plan.workspace_bytes. See docs/kernels.md for the grid, splits and combine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {
namespace cuda {

// The fixed shape of a decode call (what does not change between layers).
struct PagedDecodeShape {
  int num_seqs = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  DType dtype = DType::kBF16;
  // Encoded segments: 0 when the cache has none, else the encoding's kind,
  // tokens_per_block and BlockBytes() (the split size becomes a multiple of
  // tokens_per_block).
  int enc_tokens_per_block = 0;
  int64_t enc_block_bytes = 0;
  EncodingKind enc_kind = EncodingKind::kKivi;
};

struct PagedDecodeOptions {
  int num_sms = 0;           // 0: read from the current device
  int ctas_per_sm = 0;       // 0: the kernel's occupancy on the current device
  int force_chunk_tokens = 0;  // > 0: use this split size (rounded up to the granule); tests
  // Launch shape overrides (tuning, tests); 0: the default. heads_per_thread
  // must be 1, 2 or 4 and divide the GQA group; stages is the cp.async
  // pipeline depth, 2 to 4.
  int heads_per_thread = 0;
  int stages = 0;
  // The tensor-core kernel (bf16 / fp16 caches without an encoded segment,
  // GQA groups 2 to 8, sm_80 and up): 0 the default (where it applies when
  // kPagedDecodeTensorCoresByDefault, else never), -1 never (the CUDA-core
  // kernel), 1 required (cudaErrorNotSupported where it does not apply).
  int tensor_cores = 0;
};

// Off until the tensor-core kernel has passed paged_decode_test on a GPU: it
// is checked on the CUDA emulation only (docs/kernels.md, "Tensor cores").
constexpr bool kPagedDecodeTensorCoresByDefault = false;

// The default pipeline depth.
constexpr int kPagedDecodeDefaultStages = 2;

// The launch configuration of one step. Plain data; cheap to copy.
struct PagedDecodePlan {
  PagedDecodeShape shape;
  int heads_per_thread = 1;  // query heads one thread accumulates (1, 2 or 4)
  int head_slices = 1;       // group / heads_per_thread: thread slices of a CTA
  int threads = 128;         // CTA size
  int tile_tokens = 32;      // plain tokens per pipeline stage
  int enc_tile_blocks = 1;   // encoded blocks per pipeline stage (KIVI: 1; int8 / fp8: enough to fill a stage)
  int stages = kPagedDecodeDefaultStages;  // cp.async pipeline depth (tiles in shared memory)
  int64_t smem_bytes = 0;    // dynamic shared memory of the decode kernel
  int ctas_per_sm = 0;       // the occupancy the split size was planned for (0 with force_chunk_tokens)
  // The attention pass on tensor cores (PagedDecodeTcKernel: 128 threads,
  // 64-token tiles, tc_smem_bytes); the slot_attn pass and everything the
  // fields above describe stay the CUDA-core kernel's.
  bool tensor_cores = false;
  int64_t tc_smem_bytes = 0;
  int chunk_tokens = 0;      // tokens per split (the last split also takes any excess)
  int max_splits = 1;        // splits per stream (grid = num_streams * max_splits)
  int64_t workspace_bytes = 0;
};

// Empty when `shape` is supported, else why not (names the field).
std::string PagedDecodeShapeCheck(const PagedDecodeShape& shape);

// Chooses the split size (flash-decoding) so that the CTAs fill the GPU: the
// split count of the longest stream minimising waves * (chunk + a fixed cost),
// where a wave is num_sms * ctas_per_sm CTAs; chunks are multiples of
// max(64, enc_tokens_per_block) and at least 128 tokens. stream_len[s] (host)
// is each stream's total length, encoded plus plain, s in [0, num_seqs *
// num_kv_heads). Returns cudaErrorInvalidValue / cudaErrorNotSupported for a
// bad shape, or the error of the device query when options leave num_sms or
// ctas_per_sm 0.
cudaError_t PlanPagedDecode(const PagedDecodeShape& shape, const int64_t* stream_len,
                            const PagedDecodeOptions& options, PagedDecodePlan* plan);

// Host-side checks of a call against its plan: empty when valid. Reads only
// host fields (never dereferences device pointers).
std::string PagedDecodeCheck(const PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc,
                             const AttentionParams& p, const void* workspace, int64_t workspace_bytes);

// Decode attention for one layer: one query token per sequence.
// kv, *enc (may be null) and p hold DEVICE pointers (the structs themselves
// are host values): kv.base/indptr/indices/last_block_len, enc->base/indptr/
// indices, p.q/p.o ([num_seqs, num_qo_heads, head_dim] fp32) and, when set,
// p.slot_attn/p.slot_attn_offsets. p.qo_indptr is ignored (decode: sequence i
// owns query row i). Stream s's slots are enc first (enc->StreamTokens(s))
// then plain (kv.StreamLength(s)); the query attends to all of them, or,
// when p.first_visible (a DEVICE pointer) is set, to slots
// [p.first_visible[s], len) (decode: query i of head h is entry i * hkv + h = s).
// p.slot_attn, when set, is ADDED to (summed over the group's query heads) by a
// second pass that re-reads the keys.
// p.rope_inv_freq must be null (cudaErrorNotSupported otherwise).
// workspace: device memory of at least plan.workspace_bytes, 256-byte aligned.
// Returns cudaSuccess, cudaErrorInvalidValue / cudaErrorNotSupported (checked
// before anything is launched; PagedDecodeCheck says why) or a launch error.
// Asynchronous on `stream`.
cudaError_t PagedDecode(const PagedDecodePlan& plan, const PagedKV& kv, const EncodedKV* enc,
                        const AttentionParams& p, void* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvlab
