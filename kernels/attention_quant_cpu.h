// Fused CPU attention over int8 / fp8 encoded segments (the quant policy's
// formats, kernels/kv_encoding.h: symmetric 8-bit codes times an fp16 absmax
// scale per token row or per block) plus the plain tail: the fast path behind
// PagedAttentionEncodedCpu for those formats. No libtorch here.
//
// Codes are read straight from the encoded blocks, never gathered into an
// fp32 copy of the stream. Per block and KV head, for all query vectors of
// the head's GQA group at once:
//   score_t = s_k(t) * sum_c q_c code_tc     out_c += (p_t s_v(t)) code_tc
// (the per-token key scale multiplies the tile's scores, the value scale goes
// into the softmax weights). Codes become fp32 lanes in registers: int8 by
// sign extension, fp8 e4m3 by moving its bits into an fp16 (the value times
// 2^-8 exactly, subnormals included) and F16C's conversion, so every lane
// equals DecodeKvBlock's value before the scale. Online softmax runs over
// the encoded blocks and then the plain (f32/f16/bf16) blocks, with the tile
// kernels of the plain path (attention_cpu_tiles.h); evicted slots of sealed
// blocks (EncodedKV::dead) get weight 0; long streams are split over threads
// and merged by log-sum-exp. Scalar / AVX2 / AVX-512 copies (kernels/cpu_isa.h).
#pragma once

#include "kernels/attention_cpu_plan.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// True when PagedAttentionQuantCpu handles the call: kInt8 or kFp8 (8 bits,
// any tokens_per_block, per-token or per-block scales), head_dim a multiple
// of 16, any plain dtype, any GQA group, any number of queries per sequence;
// no p.slot_attn and no p.rope_inv_freq (those take the generic path).
bool QuantCpuSupports(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);

// Same contract as PagedAttentionEncodedReference, to fp32 rounding. Plans
// the split for this call (PlanCpuDecodeLayer), then runs it.
// REQUIRES: QuantCpuSupports(kv, enc, p) and AttentionParamsCheck on the
// whole (encoded + plain) streams.
void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);
// Runs a plan made for the step, on up to plan.threads threads.
// REQUIRES as above and CpuDecodePlanCheck(plan, p).ok().
void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                            const CpuDecodePlan& plan);

}  // namespace kvlab
