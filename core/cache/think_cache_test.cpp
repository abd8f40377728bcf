// think (policies/think.cpp) through the cache: attention over streams whose
// sealed blocks keep only some key channels equals dense attention, computed
// here from the original keys, with each sealed block's lowest-energy key
// channels zeroed (the rule worked out on its own) and the recent window
// whole; both the CPU path and the reference, bf16 and fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cache/attention_encoded_test_util.h"
#include "core/cache/kv_cache.h"
#include "kernels/attention_encoded.h"

namespace kvlab {
namespace {

float Stored(DType t, float x) {
  float y;
  uint16_t h[2];
  ConvertFromF32(t, &x, h, 1);
  ConvertToF32(t, h, &y, 1);
  return t == DType::kF32 ? x : y;
}

// k of one stream [len][d] with the rule applied: in each of the first
// `sealed` slots' blocks of `tpb`, only the `kept` highest-energy channels
// (ties to the lower) stay.
void PruneLikeThink(std::vector<std::vector<double>>* k, int64_t sealed, int tpb, int kept) {
  const int d = static_cast<int>((*k)[0].size());
  for (int64_t b0 = 0; b0 < sealed; b0 += tpb) {
    std::vector<double> energy(static_cast<size_t>(d), 0.0);
    for (int64_t t = b0; t < b0 + tpb; ++t)
      for (int c = 0; c < d; ++c) energy[static_cast<size_t>(c)] += (*k)[t][c] * (*k)[t][c];
    std::vector<int> idx(static_cast<size_t>(d));
    for (int c = 0; c < d; ++c) idx[static_cast<size_t>(c)] = c;
    std::sort(idx.begin(), idx.end(), [&](int a, int b) {
      return energy[static_cast<size_t>(a)] != energy[static_cast<size_t>(b)] ? energy[static_cast<size_t>(a)] > energy[static_cast<size_t>(b)] : a < b;
    });
    for (int i = kept; i < d; ++i)
      for (int64_t t = b0; t < b0 + tpb; ++t) (*k)[t][idx[static_cast<size_t>(i)]] = 0.0;
  }
}

void DenseRow(const std::vector<std::vector<double>>& k, const std::vector<std::vector<double>>& v, const float* q,
              int64_t visible, double* out) {
  const int d = static_cast<int>(k[0].size());
  std::vector<double> sc(static_cast<size_t>(visible));
  double mx = -INFINITY, sum = 0;
  for (int64_t t = 0; t < visible; ++t) {
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += q[c] * k[t][c];
    mx = std::max(mx, sc[t] = dot / std::sqrt(double(d)));
  }
  for (double& x : sc) sum += (x = std::exp(x - mx));
  for (int c = 0; c < d; ++c) {
    out[c] = 0;
    for (int64_t t = 0; t < visible; ++t) out[c] += sc[t] / sum * v[t][c];
  }
}

class ThinkAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(ThinkAttentionTest, EqualsDenseAttentionWithThePrunedKeyChannelsZeroed) {
  const DType dtype = GetParam();
  const int d = 64, hkv = 2, hq = 8, group = hq / hkv;
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({{"think", {}, "t"}}, &stack).ok());  // ratio 0.4, recent 32
  CacheShape sh;
  ASSERT_TRUE(DeriveCacheShape(ModelKvShape{1, hkv, d, {}}, stack, 16, dtype, &sh).ok());
  ASSERT_EQ(sh.enc.key_channels, d - 25);
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 400, true, &c, 400).ok());
  const std::vector<int64_t> lens = {1, 40, 300, 517};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> ks(lens.size()), vs(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    ASSERT_TRUE(FillSequence(c.get(), static_cast<int64_t>(i), lens[i], hkv, d, &rng, &nd, &ks[i], &vs[i]));
  }
  ASSERT_EQ(c->stream(3, 0, 1).num_encoded, (517 - 32) / 16 * 16);
  ASSERT_EQ(c->stream(1, 0, 0).num_encoded, 0) << "40 tokens: fewer than recent + a block";
  // Queries: one per sequence, a 5-token chunk for the last.
  std::vector<int32_t> qo = {0, 1, 2, 3, 8};
  std::vector<float> q(static_cast<size_t>(qo.back()) * hq * d);
  for (float& x : q) x = 2.0f * nd(rng);
  std::vector<double> want(q.size()), unpruned(q.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    const int64_t len = lens[i];
    for (int h = 0; h < hkv; ++h) {
      std::vector<std::vector<double>> k(static_cast<size_t>(len), std::vector<double>(d)), v = k;
      for (int64_t t = 0; t < len; ++t) {
        for (int ch = 0; ch < d; ++ch) {
          const size_t at = static_cast<size_t>((t * hkv + h) * d + ch);
          k[t][ch] = Stored(dtype, ks[i][at]);
          v[t][ch] = Stored(dtype, vs[i][at]);
        }
      }
      const std::vector<std::vector<double>> k_full = k;
      PruneLikeThink(&k, c->stream(static_cast<int64_t>(i), 0, h).num_encoded, 16, sh.enc.key_channels);
      const int q_len = qo[i + 1] - qo[i];
      for (int j = 0; j < q_len; ++j) {
        for (int g = 0; g < group; ++g) {
          const int64_t off = (static_cast<int64_t>(qo[i] + j) * hq + h * group + g) * d;
          DenseRow(k, v, q.data() + off, len - q_len + j + 1, want.data() + off);
          DenseRow(k_full, v, q.data() + off, len - q_len + j + 1, unpruned.data() + off);
        }
      }
    }
  }
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::abs(want[i] - unpruned[i]));
  EXPECT_GT(moved, 1e-2) << "pruning changed nothing: the check below could not tell";
  PageTable pt;
  c->BuildPageTable({0, 1, 2, 3}, &pt);
  for (int run = 0; run < 2; ++run) {
    std::vector<float> o(q.size(), NAN);
    AttentionParams p = MakeParams(4, hq, hkv, d, qo.data(), q.data());
    p.o = o.data();
    run == 0 ? PagedAttentionEncodedReference(pt.Layer(0), *pt.Encoded(0), p)
             : PagedAttentionEncodedCpu(pt.Layer(0), *pt.Encoded(0), p);
    double worst = 0;
    for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(o[i] - want[i]) / (1e-5 + 1e-4 * std::abs(want[i])));
    EXPECT_LE(worst, 1.0) << (run == 0 ? "reference" : "cpu");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ThinkAttentionTest, ::testing::Values(DType::kBF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

}  // namespace
}  // namespace kvlab
