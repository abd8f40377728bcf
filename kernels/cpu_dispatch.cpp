// The public entry points of the CPU kernels that are compiled once per path
// (kernels/cpu_isa.h): each calls the copy for ActiveCpuIsa(). Built for
// baseline x86-64. Also KiviCpuSupports and QuantCpuSupports, which are shape
// logic (one copy).
#include <cstdint>

#include "kernels/attention_cpu.h"
#include "kernels/attention_kivi_cpu.h"
#include "kernels/attention_quant_cpu.h"
#include "kernels/cpu_isa.h"
#include "kernels/linear_bf16.h"
#include "kernels/page_bounds.h"

namespace kvlab {

// The copies' entry points (defined in attention_cpu.cpp, attention_kivi_cpu.cpp,
// attention_quant_cpu.cpp, linear_bf16.cpp and page_bounds_cpu.cpp, compiled into namespace `ns`
// for each path).
#define KVLAB_DECLARE_CPU_KERNELS(ns)                                                                            \
  namespace ns {                                                                                                 \
  void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p);                                           \
  void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan);                \
  void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);                 \
  void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,                  \
                             const CpuDecodePlan& plan);                                                         \
  void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p);                \
  void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,                 \
                              const CpuDecodePlan& plan);                                                        \
  void LinearBf16(const float* x, int64_t rows, int64_t k, const uint16_t* w, int64_t n, float* y);              \
  void WidenBf16(const uint16_t* src, int64_t count, float* dst);                                                \
  void PageBoundScores(const PageBoundsArgs& a, float* scores);                                                  \
  }
KVLAB_DECLARE_CPU_KERNELS(isa_scalar)
KVLAB_DECLARE_CPU_KERNELS(isa_avx2)
KVLAB_DECLARE_CPU_KERNELS(isa_avx512)
#undef KVLAB_DECLARE_CPU_KERNELS

// Calls fn(args...) in the active path's namespace.
#define KVLAB_DISPATCH(fn, ...)                                    \
  switch (ActiveCpuIsa()) {                                        \
    case CpuIsa::kAvx512: return isa_avx512::fn(__VA_ARGS__);      \
    case CpuIsa::kAvx2: return isa_avx2::fn(__VA_ARGS__);          \
    case CpuIsa::kScalar: break;                                   \
  }                                                                \
  return isa_scalar::fn(__VA_ARGS__)

void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p) { KVLAB_DISPATCH(PagedAttentionCpu, kv, p); }

void PagedAttentionCpu(const PagedKV& kv, const AttentionParams& p, const CpuDecodePlan& plan) {
  KVLAB_DISPATCH(PagedAttentionCpu, kv, p, plan);
}

void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  KVLAB_DISPATCH(PagedAttentionKiviCpu, kv, enc, p);
}

void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                           const CpuDecodePlan& plan) {
  KVLAB_DISPATCH(PagedAttentionKiviCpu, kv, enc, p, plan);
}

void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  KVLAB_DISPATCH(PagedAttentionQuantCpu, kv, enc, p);
}

void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                            const CpuDecodePlan& plan) {
  KVLAB_DISPATCH(PagedAttentionQuantCpu, kv, enc, p, plan);
}

void LinearBf16(const float* x, int64_t rows, int64_t k, const uint16_t* w, int64_t n, float* y) {
  KVLAB_DISPATCH(LinearBf16, x, rows, k, w, n, y);
}

void WidenBf16(const uint16_t* src, int64_t count, float* dst) { KVLAB_DISPATCH(WidenBf16, src, count, dst); }

void PageBoundScores(const PageBoundsArgs& a, float* scores) { KVLAB_DISPATCH(PageBoundScores, a, scores); }

#undef KVLAB_DISPATCH

bool KiviCpuSupports(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  const KvEncoding& e = enc.enc;
  if (e.kind != EncodingKind::kKivi || e.key_axis != QuantAxis::kChannel || e.value_axis != QuantAxis::kToken) {
    return false;
  }
  if (e.bits != 2 && e.bits != 4) return false;
  if (p.slot_attn != nullptr || p.rope_inv_freq != nullptr) return false;
  const int d = p.head_dim;
  if (d <= 0 || d % 16 != 0 || e.head_dim != d || kv.head_dim != d) return false;
  if (e.tokens_per_block != e.group || e.group <= 0 || e.group % 16 != 0 || d % e.group != 0) return false;
  const int ng = d / e.group;  // value groups per token
  if ((ng & (ng - 1)) != 0) return false;
  if (enc.block_bytes < e.BlockBytes()) return false;
  if (p.num_kv_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0) return false;
  return true;
}

bool QuantCpuSupports(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  const KvEncoding& e = enc.enc;
  if ((e.kind != EncodingKind::kInt8 && e.kind != EncodingKind::kFp8) || e.bits != 8) return false;
  if (p.slot_attn != nullptr || p.rope_inv_freq != nullptr) return false;
  const int d = p.head_dim;
  if (d <= 0 || d % 16 != 0 || e.head_dim != d || kv.head_dim != d) return false;
  if (e.tokens_per_block <= 0 || enc.block_bytes < e.BlockBytes()) return false;
  if (p.num_kv_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0) return false;
  return true;
}

}  // namespace kvlab
