// Attention over caches with sealed encoded segments (KIVI, int8, fp8) and
// with keys stored before RoPE: the CPU path and the reference against an
// independent dense computation on K/V gathered slot by slot from the cache.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "core/kv_cache.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_reference.h"

namespace kvlab {
namespace {

struct Case {
  std::string name;
  EncodingKind kind;  // kKivi, kInt8, kFp8; or plain (encoded = false) with rope
  bool encoded;
  int bits;
  int group;  // kivi tokens per block
  bool rope;
  int hq, hkv;
};

// Dense attention in double over gathered (decoded) K/V: the independent check.
void Dense(const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v, const float* q, int d,
           int64_t visible, const float* inv_freq, float* out) {
  auto rot = [&](std::vector<double>& x, int64_t pos) {
    for (int i = 0; i < d / 2; ++i) {
      const double a = pos * static_cast<double>(inv_freq[i]), c = std::cos(a), s = std::sin(a);
      const double x1 = x[i], x2 = x[i + d / 2];
      x[i] = x1 * c - x2 * s;
      x[i + d / 2] = x2 * c + x1 * s;
    }
  };
  std::vector<double> qq(q, q + d), sc(static_cast<size_t>(visible));
  if (inv_freq) rot(qq, visible - 1);
  double mx = -INFINITY;
  for (int64_t t = 0; t < visible; ++t) {
    std::vector<double> kk(k[t].begin(), k[t].end());
    if (inv_freq) rot(kk, t);
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += qq[c] * kk[c];
    sc[t] = dot / std::sqrt(double(d));
    mx = std::max(mx, sc[t]);
  }
  double sum = 0;
  for (double& x : sc) sum += (x = std::exp(x - mx));
  for (int c = 0; c < d; ++c) {
    double a = 0;
    for (int64_t t = 0; t < visible; ++t) a += sc[t] / sum * v[t][c];
    out[c] = static_cast<float>(a);
  }
}

class EncodedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(EncodedAttentionTest, CpuAndReferenceMatchDenseOnGatheredKV) {
  const Case cs = GetParam();
  const int d = 64;
  CacheShape sh;
  sh.num_layers = 1;
  sh.num_kv_heads = cs.hkv;
  sh.head_dim = d;
  sh.block_size = 16;
  sh.dtype = DType::kBF16;
  sh.encoded = cs.encoded;
  sh.enc.kind = cs.kind;
  sh.enc.bits = cs.bits;
  sh.enc.head_dim = d;
  sh.enc.group = cs.group;
  sh.enc.tokens_per_block = cs.kind == EncodingKind::kKivi ? cs.group : 16;
  sh.residual = 24;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 4000, true, &c, 4000).ok());
  const std::vector<int64_t> lens = {1, 37, 300, 1000};  // different lengths, one a single slot
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < lens.size(); ++i) {
    ASSERT_TRUE(c->AddSequence(static_cast<int64_t>(i)).ok());
    std::vector<int32_t> pos(static_cast<size_t>(lens[i]));
    std::iota(pos.begin(), pos.end(), 0);
    ASSERT_TRUE(c->Reserve(static_cast<int64_t>(i), lens[i], pos.data()).ok());
    PageTable pt;
    c->BuildPageTable({static_cast<int64_t>(i)}, &pt);
    std::vector<float> k(static_cast<size_t>(lens[i] * cs.hkv * d)), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    const int32_t qo[2] = {0, static_cast<int32_t>(lens[i])};
    AppendKV(pt.Layer(0), qo, 1, cs.hkv, k.data(), v.data());
    c->Seal(static_cast<int64_t>(i));
  }
  if (cs.encoded) {
    ASSERT_GT(c->stream(3, 0, 0).num_encoded, 0);
  }
  std::vector<int64_t> seqs = {0, 1, 2, 3};
  PageTable pt;
  c->BuildPageTable(seqs, &pt);
  // Decode for sequences 0..2, a 5-query chunk (the last 5 slots) for sequence 3.
  std::vector<int32_t> qo = {0, 1, 2, 3, 8};
  const int total_q = 8;
  std::vector<float> q(static_cast<size_t>(total_q * cs.hq * d));
  for (auto& x : q) x = nd(rng);
  std::vector<float> inv(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) inv[static_cast<size_t>(i)] = static_cast<float>(std::pow(10000.0, -2.0 * i / d));
  AttentionParams p;
  p.num_seqs = 4;
  p.num_qo_heads = cs.hq;
  p.num_kv_heads = cs.hkv;
  p.head_dim = d;
  p.sm_scale = 1.0f / std::sqrt(float(d));
  p.qo_indptr = qo.data();
  p.q = q.data();
  p.rope_inv_freq = cs.rope ? inv.data() : nullptr;
  std::vector<float> o_ref(q.size()), o_cpu(q.size()), o_dense(q.size());
  p.o = o_ref.data();
  if (cs.encoded) {
    PagedAttentionEncodedReference(pt.Layer(0), *pt.Encoded(0), p);
  } else {
    PagedAttentionReference(pt.Layer(0), p);
  }
  p.o = o_cpu.data();
  if (cs.encoded) {
    PagedAttentionEncodedCpu(pt.Layer(0), *pt.Encoded(0), p);
  } else {
    PagedAttentionCpu(pt.Layer(0), p);
  }
  const int group = cs.hq / cs.hkv;
  for (int i = 0; i < 4; ++i) {
    for (int h = 0; h < cs.hkv; ++h) {
      const int64_t len = c->stream(i, 0, h).num_tokens;
      std::vector<std::vector<float>> k(static_cast<size_t>(len), std::vector<float>(d)), v = k;
      for (int64_t t = 0; t < len; ++t) c->ReadSlot(i, 0, h, t, k[t].data(), v[t].data());
      const int q_len = qo[i + 1] - qo[i];
      for (int j = 0; j < q_len; ++j) {
        for (int g = 0; g < group; ++g) {
          const int64_t off = (static_cast<int64_t>(qo[i] + j) * cs.hq + h * group + g) * d;
          Dense(k, v, q.data() + off, d, len - q_len + j + 1, p.rope_inv_freq, o_dense.data() + off);
        }
      }
    }
  }
  double worst_ref = 0, worst_cpu = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const double tol = 1e-5 + 1e-4 * std::abs(o_dense[i]);
    worst_ref = std::max(worst_ref, std::abs(o_ref[i] - o_dense[i]) / tol);
    worst_cpu = std::max(worst_cpu, std::abs(o_cpu[i] - o_dense[i]) / tol);
  }
  EXPECT_LE(worst_ref, 1.0);
  EXPECT_LE(worst_cpu, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, EncodedAttentionTest,
    ::testing::Values(Case{"kivi2_gqa4", EncodingKind::kKivi, true, 2, 32, false, 8, 2},
                      Case{"kivi4_mha", EncodingKind::kKivi, true, 4, 32, false, 2, 2},
                      Case{"kivi2_rope_gqa8", EncodingKind::kKivi, true, 2, 64, true, 8, 1},
                      Case{"int8_gqa4", EncodingKind::kInt8, true, 8, 16, false, 8, 2},
                      Case{"fp8_gqa4", EncodingKind::kFp8, true, 8, 16, false, 8, 2},
                      Case{"plain_rope_gqa4", EncodingKind::kKivi, false, 2, 32, true, 8, 2}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvlab
