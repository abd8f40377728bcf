// The dense reference path, "what most research code does": one sequence's
// contiguous K/V, heads repeated for GQA (Hugging Face repeat_kv), matmul,
// mask, softmax, matmul, in plain libtorch. Used to check the paged engine and
// as the speed baseline; the only libtorch translation unit in kernels/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvlab {

// q: [Tq, Hq, d] f32; k, v: [S, Hkv, d] in f32, f16 or bf16 (converted to f32
// here, as research code does). Hq must be a multiple of Hkv and S >= Tq when
// causal. With causal, query j sees keys [0, S - Tq + j] (the queries are the
// last Tq positions). Returns [Tq, Hq, d] f32, contiguous. Bad shapes throw
// c10::Error (libtorch's own checks), as any libtorch call does. With
// window > 0 (a sliding window), query j also sees no key at or before
// position S - Tq + j - window (Hugging Face: key i visible when q - window < i).
at::Tensor DenseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double sm_scale,
                          bool causal, int64_t window = 0);

}  // namespace kvlab
