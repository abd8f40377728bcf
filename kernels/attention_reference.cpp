#include "kernels/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kvlab {

namespace {

Status Invalid(const std::string& msg) { return Status::InvalidArgument("attention: " + msg); }

// Hugging Face rotate_half RoPE of x[d] by position pos, in place.
void RotateHalf(double* x, int d, int64_t pos, const float* inv_freq) {
  for (int i = 0; i < d / 2; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle), x1 = x[i], x2 = x[i + d / 2];
    x[i] = x1 * c - x2 * s;
    x[i + d / 2] = x2 * c + x1 * s;
  }
}

}  // namespace

Status AttentionParamsCheck(const PagedKV& kv, const AttentionParams& p) {
  if (p.num_seqs < 0) return Invalid("num_seqs must be >= 0, got " + std::to_string(p.num_seqs));
  if (p.num_kv_heads <= 0 || p.num_qo_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0) {
    return Invalid("num_qo_heads (" + std::to_string(p.num_qo_heads) + ") must be a positive multiple of num_kv_heads (" +
                   std::to_string(p.num_kv_heads) + ")");
  }
  if (p.head_dim <= 0 || p.head_dim != kv.head_dim) {
    return Invalid("head_dim " + std::to_string(p.head_dim) + " does not match the cache's " +
                   std::to_string(kv.head_dim));
  }
  if (kv.num_streams != p.num_seqs * p.num_kv_heads) {
    return Invalid("cache has " + std::to_string(kv.num_streams) + " streams, expected num_seqs * num_kv_heads = " +
                   std::to_string(p.num_seqs * p.num_kv_heads));
  }
  if (kv.block_size <= 0) return Invalid("block_size must be positive, got " + std::to_string(kv.block_size));
  const int64_t min_block_bytes = 2LL * kv.block_size * kv.head_dim * DTypeBytes(kv.dtype);
  if (kv.block_bytes < min_block_bytes) {
    return Invalid("block_bytes " + std::to_string(kv.block_bytes) + " is below 2 * block_size * head_dim * " +
                   DTypeName(kv.dtype) + " bytes = " + std::to_string(min_block_bytes));
  }
  if (p.qo_indptr == nullptr) return Invalid("qo_indptr is null");
  if (p.num_seqs > 0 && (kv.indptr == nullptr || kv.last_block_len == nullptr)) {
    return Invalid("cache indptr or last_block_len is null");
  }
  if (p.qo_indptr[0] != 0) return Invalid("qo_indptr[0] must be 0, got " + std::to_string(p.qo_indptr[0]));
  for (int i = 0; i < p.num_seqs; ++i) {
    const int q_len = p.qo_indptr[i + 1] - p.qo_indptr[i];
    if (q_len < 0) return Invalid("qo_indptr decreases at sequence " + std::to_string(i));
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const int s = i * p.num_kv_heads + h;
      const int nb = kv.indptr[s + 1] - kv.indptr[s];
      if (nb < 0) return Invalid("cache indptr decreases at stream " + std::to_string(s));
      if (nb > 0 && (kv.last_block_len[s] < 1 || kv.last_block_len[s] > kv.block_size)) {
        return Invalid("last_block_len[" + std::to_string(s) + "] = " + std::to_string(kv.last_block_len[s]) +
                       " is outside [1, block_size]");
      }
      if (nb > 0 && (kv.indices == nullptr || kv.base == nullptr)) return Invalid("cache indices or base is null");
      for (int b = kv.indptr[s]; b < kv.indptr[s + 1]; ++b) {
        if (kv.indices[b] < 0) return Invalid("negative block id at indices[" + std::to_string(b) + "]");
      }
      if (kv.StreamLength(s) < q_len) {
        return Invalid("stream " + std::to_string(s) + " holds " + std::to_string(kv.StreamLength(s)) +
                       " slots but its sequence has " + std::to_string(q_len) +
                       " queries (append their K/V before attention)");
      }
      if (p.first_visible != nullptr) {
        int32_t prev = 0;
        for (int j = 0; j < q_len; ++j) {
          const int32_t first = p.first_visible[(p.qo_indptr[i] + j) * p.num_kv_heads + h];
          const int64_t last = kv.StreamLength(s) - q_len + j;
          if (first < prev || first > last) {
            return Invalid("first_visible of query " + std::to_string(j) + " of sequence " + std::to_string(i) +
                           ", stream " + std::to_string(s) + " is " + std::to_string(first) +
                           ": must be non-decreasing and in [0, " + std::to_string(last) + "]");
          }
          prev = first;
        }
      }
    }
  }
  if (p.num_seqs > 0 && p.qo_indptr[p.num_seqs] > 0 && (p.q == nullptr || p.o == nullptr)) {
    return Invalid("q or o is null");
  }
  if (p.rope_inv_freq != nullptr && p.head_dim % 2 != 0) return Invalid("rope_inv_freq needs an even head_dim");
  if (!(p.logit_softcap >= 0)) return Invalid("logit_softcap must be >= 0 (0: none), got " + std::to_string(p.logit_softcap));
  if (p.slot_attn != nullptr && p.slot_attn_offsets == nullptr) {
    return Invalid("slot_attn is set but slot_attn_offsets is null");
  }
  return Status::OK();
}

void PagedAttentionReference(const PagedKV& kv, const AttentionParams& p) {
  const int d = p.head_dim;
  const int group = p.num_qo_heads / p.num_kv_heads;
  std::vector<float> row(static_cast<size_t>(d));
  std::vector<double> scores, acc(static_cast<size_t>(d)), q(static_cast<size_t>(d)), key(static_cast<size_t>(d));
  for (int i = 0; i < p.num_seqs; ++i) {
    const int q0 = p.qo_indptr[i];
    const int q_len = p.qo_indptr[i + 1] - q0;
    for (int hq = 0; hq < p.num_qo_heads; ++hq) {
      const int s = i * p.num_kv_heads + hq / group;
      const int64_t len = kv.StreamLength(s);
      for (int j = 0; j < q_len; ++j) {
        const int64_t num_visible = len - q_len + j + 1;
        const int64_t first =
            p.first_visible == nullptr ? 0 : p.first_visible[(q0 + j) * p.num_kv_heads + hq / group];
        const int64_t qo_off = (static_cast<int64_t>(q0 + j) * p.num_qo_heads + hq) * d;
        std::copy(p.q + qo_off, p.q + qo_off + d, q.begin());
        if (p.rope_inv_freq != nullptr) RotateHalf(q.data(), d, num_visible - 1, p.rope_inv_freq);
        scores.assign(static_cast<size_t>(num_visible), -INFINITY);
        double max_score = -INFINITY;
        for (int64_t t = first; t < num_visible; ++t) {
          ConvertToF32(kv.dtype, kv.KeyPtr(s, t), row.data(), d);
          std::copy(row.begin(), row.end(), key.begin());
          if (p.rope_inv_freq != nullptr) RotateHalf(key.data(), d, t, p.rope_inv_freq);
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += q[c] * key[c];
          scores[t] = dot * p.sm_scale;
          if (p.logit_softcap > 0) scores[t] = p.logit_softcap * std::tanh(scores[t] / p.logit_softcap);
          max_score = std::max(max_score, scores[t]);
        }
        double sum = 0.0;
        for (double& x : scores) {
          x = std::exp(x - max_score);
          sum += x;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = first; t < num_visible; ++t) {
          ConvertToF32(kv.dtype, kv.ValuePtr(s, t), row.data(), d);
          const double w = scores[t] / sum;
          for (int c = 0; c < d; ++c) acc[c] += w * row[c];
          if (p.slot_attn != nullptr && (p.slot_attn_last_queries <= 0 || j >= q_len - p.slot_attn_last_queries)) {
            p.slot_attn[p.slot_attn_offsets[s] + t] += static_cast<float>(w);
          }
        }
        for (int c = 0; c < d; ++c) p.o[qo_off + c] = static_cast<float>(acc[c]);
      }
    }
  }
}

}  // namespace kvlab
