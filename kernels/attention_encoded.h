// Attention over streams whose oldest slots are sealed in encoded blocks
// (KIVI, int8, fp8; kernels/kv_encoding.h) followed by the plain segment
// (PagedKV). Slot t < n_enc of stream s is token t of its encoded segment;
// slot t >= n_enc is plain slot t - n_enc. Causality, GQA, slot_attn and
// rope_inv_freq as in AttentionParams, over the whole (encoded + plain) stream.
#pragma once

#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// The specification: decodes with DecodeKvBlock, double accumulation.
void PagedAttentionEncodedReference(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);
// The CPU path: OpenMP over (sequence, KV head); each block (encoded or
// plain) is decoded once for all query heads of the group and all queries.
void PagedAttentionEncodedCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);

}  // namespace kvlab
