// Optimised CPU paged attention (OpenMP; AVX2/FMA/F16C, AVX-512 or portable
// loops, whichever path kernels/cpu_isa.h picks at run time). Same contract as PagedAttentionReference,
// to float rounding. Decode is memory-bound: each stored KV head is read once
// per call for its whole group of query heads, and long streams are split
// over threads (flash-decoding) and merged by log-sum-exp.
#pragma once

#include "kernels/attention_cpu_plan.h"
#include "kernels/paged_kv.h"

namespace kvlab {

// Writes p.o and, when p.slot_attn is set, adds to it (a second pass over the
// cache, so requesting it roughly doubles the cost). Uses omp_get_max_threads()
// threads; safe to call from several threads on disjoint outputs.
// With p.rope_inv_freq, rotates q and each key tile at read time (about twice
// the score cost). head_dim not a multiple of 16 (of 32 with RoPE) falls back
// to PagedAttentionReference.
// REQUIRES: AttentionParamsCheck(kv, p).ok().
// Plans the split for this call (PlanCpuDecodeLayer), then runs it.
void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p);
// Runs a plan made for the step (once, for all layers), on up to plan.threads
// threads. REQUIRES as above and CpuDecodePlanCheck(plan, p).ok().
void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan);

}  // namespace kvlab
