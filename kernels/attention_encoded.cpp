#include "kernels/attention_encoded.h"

#include "kernels/attention_kivi_cpu.h"
#include "kernels/attention_quant_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace kvlab {

namespace {

// RoPE (Hugging Face rotate_half) of x[d] by position pos, in place.
template <typename T>
void Rotate(T* x, int d, int64_t pos, const float* inv_freq) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(pos) * inv_freq[i];
    const T c = static_cast<T>(std::cos(a)), s = static_cast<T>(std::sin(a));
    const T x1 = x[i], x2 = x[i + d / 2];
    x[i] = x1 * c - x2 * s;
    x[i + d / 2] = x2 * c + x1 * s;
  }
}

// Fills k and v [n][d] with the whole stream s (encoded then plain) as fp32.
void GatherStream(const PagedKV& kv, const EncodedKV& enc, int s, std::vector<float>* k, std::vector<float>* v) {
  const int d = kv.head_dim;
  const int64_t ne = enc.StreamTokens(s), np = kv.StreamLength(s);
  const int tpb = enc.enc.tokens_per_block;
  k->resize(static_cast<size_t>((ne + np) * d));
  v->resize(k->size());
  for (int64_t b = 0; b < ne / tpb; ++b) {
    DecodeKvBlock(enc.enc, enc.Block(s, b), k->data() + b * tpb * d, v->data() + b * tpb * d);
  }
  for (int64_t t = 0; t < np; ++t) {
    ConvertToF32(kv.dtype, kv.KeyPtr(s, t), k->data() + (ne + t) * d, d);
    ConvertToF32(kv.dtype, kv.ValuePtr(s, t), v->data() + (ne + t) * d, d);
  }
}

// RoPE at read rotates by position within the cache: a slot's index among
// the live ones (evicted slots of sealed groups hold places, not positions).
// live[t] for every slot of a stream of `len` slots; returns the dead count.
int64_t LiveIndex(const EncodedKV& enc, int s, int64_t len, std::vector<int64_t>* live) {
  live->resize(static_cast<size_t>(len));
  int64_t n_dead = 0;
  for (int64_t t = 0; t < len; ++t) {
    (*live)[static_cast<size_t>(t)] = t - n_dead;
    if (enc.SlotDead(s, t)) ++n_dead;
  }
  return n_dead;
}

}  // namespace

void PagedAttentionEncodedReference(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  const int d = p.head_dim;
  const int group = p.num_qo_heads / p.num_kv_heads;
  std::vector<float> k, v;
  std::vector<double> q(static_cast<size_t>(d)), key(static_cast<size_t>(d)), acc(static_cast<size_t>(d)), scores;
  for (int i = 0; i < p.num_seqs; ++i) {
    const int q0 = p.qo_indptr[i], q_len = p.qo_indptr[i + 1] - q0;
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const int s = i * p.num_kv_heads + h;
      GatherStream(kv, enc, s, &k, &v);
      const int64_t len = static_cast<int64_t>(k.size()) / d;
      std::vector<int64_t> live;
      const int64_t n_dead = LiveIndex(enc, s, len, &live);
      for (int g = 0; g < group; ++g) {
        const int hq = h * group + g;
        for (int j = 0; j < q_len; ++j) {
          const int64_t visible = len - q_len + j + 1;
          const int64_t first = p.first_visible == nullptr ? 0 : p.first_visible[(q0 + j) * p.num_kv_heads + h];
          const int64_t off = (static_cast<int64_t>(q0 + j) * p.num_qo_heads + hq) * d;
          std::copy(p.q + off, p.q + off + d, q.begin());
          if (p.rope_inv_freq != nullptr) Rotate(q.data(), d, visible - 1 - n_dead, p.rope_inv_freq);
          scores.assign(static_cast<size_t>(visible), -INFINITY);
          double mx = -INFINITY;
          for (int64_t t = first; t < visible; ++t) {
            if (enc.SlotDead(s, t)) continue;  // an evicted slot: weight 0
            std::copy(k.begin() + t * d, k.begin() + (t + 1) * d, key.begin());
            if (p.rope_inv_freq != nullptr) Rotate(key.data(), d, live[static_cast<size_t>(t)], p.rope_inv_freq);
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += q[c] * key[c];
            scores[t] = dot * p.sm_scale;
            mx = std::max(mx, scores[t]);
          }
          double sum = 0;
          for (double& x : scores) sum += (x = std::exp(x - mx));
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t t = first; t < visible; ++t) {
            const double w = scores[t] / sum;
            for (int c = 0; c < d; ++c) acc[c] += w * v[t * d + c];
            if (p.slot_attn != nullptr && (p.slot_attn_last_queries <= 0 || j >= q_len - p.slot_attn_last_queries)) {
              p.slot_attn[p.slot_attn_offsets[s] + t] += static_cast<float>(w);
            }
          }
          for (int c = 0; c < d; ++c) p.o[off + c] = static_cast<float>(acc[c]);
        }
      }
    }
  }
}

// The generic CPU path: whole streams decoded to fp32 (any encoding, RoPE at
// read, slot_attn). KIVI with its own axes and int8 / fp8 without RoPE or
// slot_attn take the fused paths instead.
static void EncodedAttentionGeneric(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  const int d = p.head_dim;
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int n_work = p.num_seqs * p.num_kv_heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int w = 0; w < n_work; ++w) {
    const int i = w / p.num_kv_heads, h = w % p.num_kv_heads, s = w;
    const int q0 = p.qo_indptr[i], q_len = p.qo_indptr[i + 1] - q0;
    std::vector<float> k, v;
    GatherStream(kv, enc, s, &k, &v);
    const int64_t len = static_cast<int64_t>(k.size()) / d;
    std::vector<int64_t> live;
    const int64_t n_dead = p.rope_inv_freq != nullptr ? LiveIndex(enc, s, len, &live) : 0;
    if (p.rope_inv_freq != nullptr) {
      for (int64_t t = 0; t < len; ++t) Rotate(k.data() + t * d, d, live[static_cast<size_t>(t)], p.rope_inv_freq);
    }
    // Rows of the group's queries; each K/V row is read once for all of them.
    const int rows = group * q_len;
    std::vector<float> q(static_cast<size_t>(rows) * d), acc(q.size(), 0.0f), m(static_cast<size_t>(rows), -INFINITY),
        l(static_cast<size_t>(rows), 0.0f), sc(static_cast<size_t>(rows));
    std::vector<int64_t> visible(static_cast<size_t>(rows)), first(static_cast<size_t>(rows), 0);
    for (int j = 0; j < q_len; ++j) {
      for (int g = 0; g < group; ++g) {
        const int r = j * group + g;
        const int64_t off = (static_cast<int64_t>(q0 + j) * p.num_qo_heads + h * group + g) * d;
        std::copy(p.q + off, p.q + off + d, q.begin() + static_cast<int64_t>(r) * d);
        visible[static_cast<size_t>(r)] = len - q_len + j + 1;
        if (p.first_visible != nullptr) first[static_cast<size_t>(r)] = p.first_visible[(q0 + j) * p.num_kv_heads + h];
        if (p.rope_inv_freq != nullptr) {
          Rotate(q.data() + static_cast<int64_t>(r) * d, d, visible[static_cast<size_t>(r)] - 1 - n_dead, p.rope_inv_freq);
        }
      }
    }
    for (int64_t t = 0; t < len; ++t) {
      if (enc.SlotDead(s, t)) continue;
      const float* kt = k.data() + t * d;
      const float* vt = v.data() + t * d;
      for (int r = 0; r < rows; ++r) {
        if (t >= visible[static_cast<size_t>(r)] || t < first[static_cast<size_t>(r)]) continue;
        const float* qr = q.data() + static_cast<int64_t>(r) * d;
        float dot = 0;
        for (int c = 0; c < d; ++c) dot += qr[c] * kt[c];
        const float x = dot * p.sm_scale;
        float* ar = acc.data() + static_cast<int64_t>(r) * d;
        float& mr = m[static_cast<size_t>(r)];
        if (x > mr) {
          const float scale = std::exp(mr - x);
          l[static_cast<size_t>(r)] *= scale;
          for (int c = 0; c < d; ++c) ar[c] *= scale;
          mr = x;
        }
        const float e = std::exp(x - mr);
        l[static_cast<size_t>(r)] += e;
        for (int c = 0; c < d; ++c) ar[c] += e * vt[c];
      }
    }
    for (int j = 0; j < q_len; ++j) {
      for (int g = 0; g < group; ++g) {
        const int r = j * group + g;
        const int64_t off = (static_cast<int64_t>(q0 + j) * p.num_qo_heads + h * group + g) * d;
        const float inv = 1.0f / l[static_cast<size_t>(r)];
        for (int c = 0; c < d; ++c) p.o[off + c] = acc[static_cast<size_t>(r) * d + c] * inv;
      }
    }
    if (p.slot_attn != nullptr) {
      // A second pass gives each slot its final probability under each row's softmax.
      float* out = p.slot_attn + p.slot_attn_offsets[s];
      const int first_row = p.slot_attn_last_queries > 0 ? std::max(0, q_len - p.slot_attn_last_queries) * group : 0;
      for (int r = first_row; r < rows; ++r) {
        const float* qr = q.data() + static_cast<int64_t>(r) * d;
        for (int64_t t = first[static_cast<size_t>(r)]; t < visible[static_cast<size_t>(r)]; ++t) {
          if (enc.SlotDead(s, t)) continue;
          float dot = 0;
          for (int c = 0; c < d; ++c) dot += qr[c] * k[t * d + c];
          out[t] += std::exp(dot * p.sm_scale - m[static_cast<size_t>(r)]) / l[static_cast<size_t>(r)];
        }
      }
    }
  }
}

namespace {
std::atomic<bool>& QuantFused() {
  static std::atomic<bool> fused{true};
  return fused;
}
}  // namespace

void SetQuantFusedCpu(bool enabled) { QuantFused().store(enabled, std::memory_order_relaxed); }
bool QuantFusedCpu() { return QuantFused().load(std::memory_order_relaxed); }

void PagedAttentionEncodedCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  if (KiviCpuSupports(kv, enc, p)) {
    PagedAttentionKiviCpu(kv, enc, p);
  } else if (QuantFusedCpu() && QuantCpuSupports(kv, enc, p)) {
    PagedAttentionQuantCpu(kv, enc, p);
  } else {
    EncodedAttentionGeneric(kv, enc, p);
  }
}

void PagedAttentionEncodedCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                              const CpuDecodePlan& plan) {
  if (KiviCpuSupports(kv, enc, p)) {
    PagedAttentionKiviCpu(kv, enc, p, plan);
  } else if (QuantFusedCpu() && QuantCpuSupports(kv, enc, p)) {
    PagedAttentionQuantCpu(kv, enc, p, plan);
  } else {
    EncodedAttentionGeneric(kv, enc, p);
  }
}

}  // namespace kvlab
