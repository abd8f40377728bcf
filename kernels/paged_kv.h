// Room kernels/: attention and cache kernels (reference, CPU, CUDA) on plain structs.
// Called by core/cache, core/model and core/engine; includes only core/base.
//
// The paged KV cache as kernels see it: a plain, non-owning view passed by
// value (FlashInfer's paged_kv_t). Core builds one per step for all layers;
// each layer's kernels get the slice for that layer. No libtorch here.
#pragma once

#include <cstdint>

#include "core/base/dtype.h"

namespace kvlab {

// Block layout inside the pool arena (one block = one stream's block_size
// token slots): K[block_size][head_dim] then V[block_size][head_dim], both in
// `dtype`. block_bytes = 2 * block_size * head_dim * DTypeBytes(dtype).
//
// Streams of one layer are numbered seq * num_kv_heads + kv_head. Stream s owns
// blocks indices[indptr[s] .. indptr[s+1]) in order; its last block holds
// last_block_len[s] slots (1..block_size), every other block is full. A stream
// with no blocks has indptr[s] == indptr[s+1] and length 0.
struct PagedKV {
  uint8_t* base = nullptr;        // pool arena; block b starts at base + b * block_bytes
  int64_t block_bytes = 0;
  DType dtype = DType::kBF16;
  int block_size = 16;
  int head_dim = 0;
  int num_streams = 0;            // num_seqs * num_kv_heads
  const int32_t* indptr = nullptr;          // [num_streams + 1]
  const int32_t* indices = nullptr;         // block ids
  const int32_t* last_block_len = nullptr;  // [num_streams]

  int64_t StreamLength(int s) const {
    const int nb = indptr[s + 1] - indptr[s];
    return nb == 0 ? 0 : static_cast<int64_t>(nb - 1) * block_size + last_block_len[s];
  }
  // Address of the key (value) vector at slot `slot` of stream s.
  uint8_t* KeyPtr(int s, int64_t slot) const {
    const int32_t b = indices[indptr[s] + static_cast<int32_t>(slot / block_size)];
    return base + b * block_bytes + (slot % block_size) * head_dim * DTypeBytes(dtype);
  }
  uint8_t* ValuePtr(int s, int64_t slot) const {
    const int32_t b = indices[indptr[s] + static_cast<int32_t>(slot / block_size)];
    return base + b * block_bytes +
           (block_size + slot % block_size) * static_cast<int64_t>(head_dim) * DTypeBytes(dtype);
  }
};

// One batched attention call over the paged cache: prefill chunks and decode
// tokens of many sequences at once (ragged, FlashInfer's qo_indptr).
//
// Sequence i contributes q_len_i = qo_indptr[i+1] - qo_indptr[i] query tokens
// (1 for decode). Their K/V are already written as the LAST q_len_i slots of
// each of the sequence's streams. Query j of sequence i attends, causally, to
// slots [0, len_s - q_len_i + j] of stream s = i * num_kv_heads + h / group,
// where group = num_qo_heads / num_kv_heads.
struct AttentionParams {
  int num_seqs = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;                // stored KV heads (streams per sequence per layer)
  int head_dim = 0;
  float sm_scale = 1.0f;               // usually 1/sqrt(head_dim)
  const int32_t* qo_indptr = nullptr;  // [num_seqs + 1]
  const float* q = nullptr;            // [total_q, num_qo_heads, head_dim], fp32
  float* o = nullptr;                  // [total_q, num_qo_heads, head_dim], fp32 (written)
  // Optional: if non-null, receives for every stream the attention probability
  // each slot received in this call, summed over the query heads of the stream
  // and over the call's queries. Layout: slot_attn + slot_attn_offsets[s] is
  // stream s's [StreamLength(s)] array (ADDED to, not overwritten).
  float* slot_attn = nullptr;
  const int64_t* slot_attn_offsets = nullptr;  // [num_streams]
  // > 0: only the last slot_attn_last_queries queries of each sequence add
  // to slot_attn (an observation window, as SnapKV's); 0: all of them.
  int slot_attn_last_queries = 0;
  // Optional: if non-null, keys in the cache and q are BEFORE RoPE, and the
  // kernel rotates them by positions within the cache (StreamingLLM): the key
  // at slot t by angle t * rope_inv_freq[i], query j of a sequence with q_len
  // new tokens by (len_s - q_len + j) * rope_inv_freq[i], for i < head_dim/2,
  // in Hugging Face's rotate_half convention (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)
  // where x1 = x[:d/2], x2 = x[d/2:].
  const float* rope_inv_freq = nullptr;  // [head_dim / 2]
  // Optional: if non-null, a sliding window (or any lower bound) on what each
  // query sees: query j of sequence i attends to the slots
  // [first_visible[(qo_indptr[i] + j) * num_kv_heads + h], len_s - q_len_i + j]
  // of stream s = i * num_kv_heads + h, where h is the query head's KV head.
  // REQUIRES: each entry is in [0, len_s - q_len_i + j] (the query's own slot
  // stays visible), and non-decreasing in j. It is by slot, so the caller
  // turns a window in positions into slots (KVCache::BuildWindows does, by
  // binary search on the stream's sorted slot positions, so it stays right
  // when a selection policy has evicted slots). Slots below it may be
  // anything (kernels may skip their blocks); slot_attn gets 0 for them.
  const int32_t* first_visible = nullptr;  // [total_q * num_kv_heads]
  // KIVI-encoded segments on the CPU (kernels/attention_kivi_cpu.h): scores
  // with int8 queries and value sums with 8-bit weights where the encoding has
  // the int8 kernel's shape (KvEncoding::Int8AttentionShape); approximate (the
  // kivi policy's attention = "int8", KernelOptions). Every other kernel, and
  // any other shape, ignores it and computes exactly.
  bool int8_attention = false;
  // > 0: each score (after sm_scale) becomes logit_softcap * tanh(score /
  // logit_softcap) before the softmax (Gemma 2's attn_logit_softcapping).
  // Only PagedAttentionReference computes it; every other kernel REQUIRES 0
  // (the host backend sends soft-capped layers to the reference kernel).
  float logit_softcap = 0;
};

}  // namespace kvlab
