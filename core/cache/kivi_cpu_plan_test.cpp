// The KIVI CPU kernel run with one decode plan made for other lengths, with
// and without a window, against the same kernel planning for itself.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "core/cache/attention_encoded_test_util.h"
#include "core/cache/kv_cache.h"
#include "kernels/attention_cpu_plan.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_kivi_cpu.h"

namespace kvlab {
namespace {

// One CPU decode plan serves every layer of a step, whose lengths and
// windows may differ from those it was made with: the fused KIVI path run
// with a plan made for other lengths (half on even streams, twice on odd
// ones), 3 threads and no window, against the same kernel planning for the
// call itself, with and without a window. Only the split points differ, so
// the outputs agree to fp32 rounding; a part the run dropped or read twice
// would not.
TEST(KiviCpuPlanTest, PlanMadeForOtherLengthsServesTheLayer) {
  const int d = 128, hq = 8, hkv = 2;
  const CacheShape sh = Kivi2LayerShape(hkv, d, DType::kBF16);
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 4000, true, &c, 4000).ok());
  const std::vector<int64_t> lens = {1, 37, 1000, 4133};
  const int num_seqs = static_cast<int>(lens.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<float> k, v;
    ASSERT_TRUE(FillSequence(c.get(), i, lens[static_cast<size_t>(i)], hkv, d, &rng, &nd, &k, &v));
  }
  std::vector<int64_t> seqs(lens.size());
  std::iota(seqs.begin(), seqs.end(), 0);
  PageTable pt;
  c->BuildPageTable(seqs, &pt);
  std::vector<int32_t> qo = {0, 1, 2, 3, 8};  // the last sequence: a chunk of 5 queries
  std::vector<float> q(static_cast<size_t>(qo.back() * hq * d));
  for (auto& x : q) x = nd(rng);
  std::vector<int64_t> planned_len(static_cast<size_t>(num_seqs * hkv));
  for (int s = 0; s < num_seqs * hkv; ++s) {
    const int64_t len = lens[static_cast<size_t>(s / hkv)], q_len = qo[s / hkv + 1] - qo[s / hkv];
    planned_len[static_cast<size_t>(s)] = s % 2 == 0 ? std::max(q_len, len / 2) : 2 * len;
  }
  CpuDecodePlan plan;
  PlanCpuDecode(CpuDecodeShape{num_seqs, hq, hkv, d}, qo.data(), planned_len.data(), nullptr, 3, &plan);
  EXPECT_FALSE(plan.split_tiles.empty());
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  for (int window : {0, 300}) {
    SCOPED_TRACE("window " + std::to_string(window));
    AttentionParams p = MakeParams(num_seqs, hq, hkv, d, qo.data(), q.data());
    std::vector<int32_t> first(static_cast<size_t>(qo.back() * hkv), 0);
    for (int i = 0; window > 0 && i < num_seqs; ++i) {
      for (int j = 0; j < qo[i + 1] - qo[i]; ++j) {
        const int64_t slot = lens[static_cast<size_t>(i)] - (qo[i + 1] - qo[i]) + j;
        const int32_t f = static_cast<int32_t>(std::max<int64_t>(0, slot - window + 1));
        for (int h = 0; h < hkv; ++h) first[static_cast<size_t>((qo[i] + j) * hkv + h)] = f;
      }
    }
    if (window > 0) p.first_visible = first.data();
    ASSERT_TRUE(KiviCpuSupports(pt.Layer(0), *pt.Encoded(0), p));
    ASSERT_TRUE(CpuDecodePlanCheck(plan, p).ok()) << CpuDecodePlanCheck(plan, p).ToString();
    std::vector<float> o_own(q.size(), std::nanf("")), o_planned(q.size(), std::nanf(""));
    p.o = o_own.data();
    PagedAttentionKiviCpu(pt.Layer(0), *pt.Encoded(0), p);
    p.o = o_planned.data();
    PagedAttentionEncodedCpu(pt.Layer(0), *pt.Encoded(0), p, plan);
    int bad = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      if (!(std::abs(o_planned[i] - o_own[i]) <= 1e-5 + 1e-4 * std::abs(o_own[i])) && ++bad <= 5) {
        ADD_FAILURE() << "o[" << i << "] = " << o_planned[i] << ", planned per call " << o_own[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
  omp_set_num_threads(saved_threads);
}

}  // namespace
}  // namespace kvlab
