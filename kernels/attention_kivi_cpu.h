// Fused CPU attention over KIVI-encoded segments (kernels/kv_encoding.h) plus
// the plain tail: the fast path behind PagedAttentionEncodedCpu for KIVI's
// own axes (per-channel keys, per-token values). No libtorch here.
//
// Codes are never decoded to a K/V row. Per encoded block (G tokens) and KV
// head, for all query vectors of the head's GQA group at once:
//   score_t = sum_c q_c (code_tc s_c + z_c) = sum_c (q_c s_c) code_tc + sum_c q_c z_c
// (the per-channel key scale is folded into the query once per block and the
// zero point becomes one constant per block), and
//   out_c += sum_t p_t (code_tc sv_tg + zv_tg)
//          = sum_t (p_t sv_tg) code_tc + sum_t p_t zv_tg
// (the weights absorb the per-token value scale; the zero-point term is one
// running sum per channel group). Codes are unpacked with masks straight into
// fp32 lanes; each tile's value sum is centred (code - (2^bits - 1) / 2, the
// zero points shifted to match) before it joins the running sum, so that no
// running sum grows with the context (fp32 error stays that of the plain
// path). All arithmetic is fp32 FMA (AVX2 or AVX-512 encodings, or portable
// loops: the path kernels/cpu_isa.h picks at run time). Online softmax runs over the encoded blocks
// and then the plain (f32/f16/bf16) blocks; long streams are split over
// threads (flash-decoding) and merged by log-sum-exp.
#pragma once

#include "kernels/attention_cpu_plan.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// True when PagedAttentionKiviCpu handles the call: KIVI with key_axis =
// channel and value_axis = token, 2 or 4 bits, head_dim a multiple of 16,
// group a multiple of 16 with head_dim / group a power of two, no
// p.slot_attn and no p.rope_inv_freq. Any number of queries per sequence
// (decode and prefill chunks), any GQA group.
bool KiviCpuSupports(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);

// Same contract as PagedAttentionEncodedReference, to fp32 rounding. Uses
// omp_get_max_threads() threads; per-thread scratch is kept between calls.
// Plans the split for this call (PlanCpuDecodeLayer), then runs it.
// REQUIRES: KiviCpuSupports(kv, enc, p) and AttentionParamsCheck on the
// whole (encoded + plain) streams.
void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);
// Runs a plan made for the step (once, for all layers), on up to plan.threads
// threads. REQUIRES as above and CpuDecodePlanCheck(plan, p).ok().
void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                           const CpuDecodePlan& plan);

}  // namespace kvlab
