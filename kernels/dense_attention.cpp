#include "kernels/dense_attention.h"

#include <torch/torch.h>

#include <limits>

namespace kvlab {

at::Tensor DenseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double sm_scale,
                          bool causal, int64_t window) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "DenseAttention: q, k, v must be [T, H, d]");
  TORCH_CHECK(k.sizes() == v.sizes(), "DenseAttention: k and v shapes differ");
  const int64_t tq = q.size(0), hq = q.size(1), s = k.size(0), hkv = k.size(1);
  TORCH_CHECK(hkv > 0 && hq % hkv == 0, "DenseAttention: Hq must be a multiple of Hkv");
  TORCH_CHECK(q.size(2) == k.size(2), "DenseAttention: head_dim of q and k differ");
  TORCH_CHECK(!causal || s >= tq, "DenseAttention: causal needs at least Tq keys");
  const int64_t group = hq / hkv;
  // repeat_kv: [S, Hkv, d] -> [Hq, S, d], each KV head serving `group` query heads.
  auto repeat_kv = [&](const at::Tensor& x) {
    return x.to(torch::kFloat32).transpose(0, 1).unsqueeze(1).expand({hkv, group, s, x.size(2)}).reshape(
        {hq, s, x.size(2)});
  };
  const at::Tensor keys = repeat_kv(k), values = repeat_kv(v);
  at::Tensor scores = torch::matmul(q.to(torch::kFloat32).transpose(0, 1), keys.transpose(1, 2)) * sm_scale;
  if (causal) {
    const at::Tensor future = torch::ones({tq, s}, torch::kBool).triu(s - tq + 1);
    scores.masked_fill_(future, -std::numeric_limits<float>::infinity());
  }
  if (window > 0) {  // query j at position s - tq + j sees keys after position s - tq + j - window
    const at::Tensor past = torch::ones({tq, s}, torch::kBool).tril(s - tq - window);
    scores.masked_fill_(past, -std::numeric_limits<float>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), values).transpose(0, 1).contiguous();
}

}  // namespace kvlab
