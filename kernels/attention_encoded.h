// Attention over streams whose oldest slots are sealed in encoded blocks
// (KIVI, int8, fp8; kernels/kv_encoding.h) followed by the plain segment
// (PagedKV). Slot t < n_enc of stream s is token t of its encoded segment;
// slot t >= n_enc is plain slot t - n_enc. Causality, GQA, slot_attn and
// rope_inv_freq as in AttentionParams, over the whole (encoded + plain) stream.
#pragma once

#include "kernels/attention_cpu_plan.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// The specification: decodes with DecodeKvBlock, double accumulation.
void PagedAttentionEncodedReference(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);
// The CPU path. KIVI with key per-channel / value per-token axes (2 or 4
// bits, no RoPE at read, no slot_attn) takes the fused path in
// kernels/attention_kivi_cpu.cpp: key scales folded into the queries, codes
// unpacked once per block for the whole query-head group, split-K over
// threads. int8 / fp8 (the quant policy's formats; head_dim a multiple of 16,
// no RoPE at read, no slot_attn) take the fused path in
// kernels/attention_quant_cpu.cpp: codes converted in registers, scales
// folded into scores and weights, split-K. Everything else takes a generic
// path that decodes each stream to fp32 once for all query heads of the group
// and all queries (the reference the fused paths are checked against).
void PagedAttentionEncodedCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);
// The same with the step's plan (CpuDecodePlanCheck(plan, p).ok()): the fused
// paths run it; the generic path has no split to plan and ignores it.
void PagedAttentionEncodedCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                              const CpuDecodePlan& plan);

// Whether PagedAttentionEncodedCpu may give int8 / fp8 segments to the fused
// kernel (true, the default) or always takes the generic path (false: the
// comparison the tests and benchmarks make). Process-wide; not to be changed
// while kernels run on other threads. ScopedQuantFusedCpu sets it for a scope.
void SetQuantFusedCpu(bool enabled);
bool QuantFusedCpu();
class ScopedQuantFusedCpu {
 public:
  explicit ScopedQuantFusedCpu(bool enabled) : saved_(QuantFusedCpu()) { SetQuantFusedCpu(enabled); }
  ~ScopedQuantFusedCpu() { SetQuantFusedCpu(saved_); }
  ScopedQuantFusedCpu(const ScopedQuantFusedCpu&) = delete;
  ScopedQuantFusedCpu& operator=(const ScopedQuantFusedCpu&) = delete;

 private:
  bool saved_;
};

}  // namespace kvlab
