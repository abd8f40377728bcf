// quest's page selection on hand-built streams: the blocks it reads are
// exactly the recent page plus the top k - 1 pages by the min/max bound of
// q.k, per KV head with the group's bounds maxed (or summed); bad parameters
// and stacks the read concern cannot take are errors naming quest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu_isa.h"
#include "kernels/page_bounds.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

std::unique_ptr<KVPolicy> Quest(std::map<std::string, std::string> params) {
  std::unique_ptr<KVPolicy> p;
  const Status s = PolicyRegistry::Global().Create(PolicySpec{"quest", std::move(params), "t"}, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

// A stream of num_blocks blocks whose keys are given; the bounds as the cache keeps them.
struct HandStream {
  int d, bs;
  std::vector<float> keys;  // [num_blocks * bs][d]
  std::vector<float> lo, hi, q;
  StreamReadState state;
  HandStream(int d_, int bs_, int64_t num_blocks, std::vector<float> keys_, std::vector<float> queries, int group)
      : d(d_), bs(bs_), keys(std::move(keys_)), q(std::move(queries)) {
    for (int64_t b = 0; b + 1 < num_blocks; ++b) {
      for (int c = 0; c < d; ++c) {
        float mn = keys[static_cast<size_t>(b * bs * d + c)], mx = mn;
        for (int t = 1; t < bs; ++t) {
          mn = std::min(mn, keys[static_cast<size_t>((b * bs + t) * d + c)]);
          mx = std::max(mx, keys[static_cast<size_t>((b * bs + t) * d + c)]);
        }
        lo.push_back(mn);
        hi.push_back(mx);
      }
    }
    state.layer = 3;
    state.num_layers = 8;
    state.block_size = bs;
    state.head_dim = d;
    state.num_blocks = num_blocks;
    state.key_min = lo.data();
    state.key_max = hi.data();
    state.queries = q.data();
    state.num_queries = group;
  }
};

// Four-token pages of 2-channel keys, one query (1, -1): the bounds
// max(q.min, q.max) per channel are by hand
//   page 0: x in [0, 1], y in [0, 1] -> 1 + 0   = 1
//   page 1: x in [2, 3], y in [-1, 0] -> 3 + 1  = 4
//   page 2: x in [-1, 0], y in [2, 5] -> 0 - 2  = -2
//   page 3: x in [1, 2], y in [-3, 1] -> 2 + 3  = 5
//   page 4: x in [0, 4], y in [1, 1]  -> 4 - 1  = 3
// so with 3 pages it reads the last page (5) and pages 3 and 1.
TEST(QuestPolicyTest, ReadsTheTopPagesByTheMinMaxBoundAndTheRecentPage) {
  const std::vector<std::vector<float>> pages = {
      {0, 0, 1, 1, 0.5f, 0.5f, 0, 1},  {2, -1, 3, 0, 2, 0, 3, -1},  {-1, 2, 0, 5, 0, 3, -1, 2},
      {1, -3, 2, 1, 1, 0, 2, -3},      {0, 1, 4, 1, 2, 1, 1, 1},    {9, -9, 0, 0, 0, 0, 0, 0}};
  std::vector<float> keys;
  for (const auto& p : pages) keys.insert(keys.end(), p.begin(), p.end());
  HandStream s(2, 4, 6, keys, {1, -1}, 1);
  auto quest = Quest({{"token_budget", "12"}});
  std::vector<int32_t> blocks = {7, 7};
  ASSERT_TRUE(quest->SelectReadBlocks(s.state, &blocks));
  EXPECT_EQ(blocks, (std::vector<int32_t>{1, 3, 5}));
  // A budget of 2 pages: the best one and the recent page; of 1 page: the recent page alone.
  ASSERT_TRUE(Quest({{"token_budget", "8"}})->SelectReadBlocks(s.state, &blocks));
  EXPECT_EQ(blocks, (std::vector<int32_t>{3, 5}));
  ASSERT_TRUE(Quest({{"token_budget", "7"}})->SelectReadBlocks(s.state, &blocks));
  EXPECT_EQ(blocks, (std::vector<int32_t>{5}));
  // A budget of every page, or more: everything is read (no subset).
  EXPECT_FALSE(Quest({{"token_budget", "24"}})->SelectReadBlocks(s.state, &blocks));
  EXPECT_FALSE(Quest({{"token_budget", "1000"}})->SelectReadBlocks(s.state, &blocks));
  // The first dense_layers layers read everything.
  s.state.layer = 1;
  EXPECT_FALSE(quest->SelectReadBlocks(s.state, &blocks));
  s.state.layer = 2;
  EXPECT_TRUE(quest->SelectReadBlocks(s.state, &blocks));
  EXPECT_FALSE(Quest({{"token_budget", "12"}, {"dense_layers", "3"}})->SelectReadBlocks(s.state, &blocks));
}

// The selection the paper's rule gives, by brute force: every page's bound
// from its keys, per query head, combined over the group; the top k - 1
// (ties to the earlier page) plus the recent page. The bound is a true upper
// bound of q.k over the page's keys.
std::vector<int32_t> BruteForce(const HandStream& s, int group, int64_t pages, bool sum) {
  const int64_t cand = s.state.num_blocks - 1;
  std::vector<std::pair<float, int32_t>> ranked;
  for (int64_t b = 0; b < cand; ++b) {
    float score = 0;
    for (int h = 0; h < group; ++h) {
      float bound = 0, best_dot = -1e30f;
      for (int c = 0; c < s.d; ++c) {
        const float qc = s.q[static_cast<size_t>(h * s.d + c)];
        bound += std::max(qc * s.lo[static_cast<size_t>(b * s.d + c)], qc * s.hi[static_cast<size_t>(b * s.d + c)]);
      }
      for (int t = 0; t < s.bs; ++t) {
        float dot = 0;
        for (int c = 0; c < s.d; ++c) dot += s.q[static_cast<size_t>(h * s.d + c)] * s.keys[static_cast<size_t>((b * s.bs + t) * s.d + c)];
        best_dot = std::max(best_dot, dot);
      }
      EXPECT_LE(best_dot, bound + 1e-4f) << "page " << b << " head " << h;
      score = h == 0 ? bound : (sum ? score + bound : std::max(score, bound));
    }
    ranked.push_back({-score, static_cast<int32_t>(b)});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < pages - 1; ++i) out.push_back(ranked[static_cast<size_t>(i)].second);
  std::sort(out.begin(), out.end());
  out.push_back(static_cast<int32_t>(cand));
  return out;
}

TEST(QuestPolicyTest, GqaGroupsMaxOrSumTheirHeadsBounds) {
  const int d = 16, bs = 16, group = 4;
  const int64_t nb = 40;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(nb * bs * d)), q(static_cast<size_t>(group * d));
  for (int64_t b = 0; b < nb; ++b) {
    const float shift = g(rng);  // pages differ in their mean, so the ranking is not flat
    for (int i = 0; i < bs * d; ++i) keys[static_cast<size_t>(b * bs * d + i)] = g(rng) + shift;
  }
  for (float& x : q) x = g(rng);
  HandStream s(d, bs, nb, keys, q, group);
  std::vector<int32_t> by_max, by_sum;
  ASSERT_TRUE(Quest({{"token_budget", "160"}})->SelectReadBlocks(s.state, &by_max));
  ASSERT_TRUE(Quest({{"token_budget", "160"}, {"gqa", "sum"}})->SelectReadBlocks(s.state, &by_sum));
  EXPECT_EQ(by_max, BruteForce(s, group, 10, false));
  EXPECT_EQ(by_sum, BruteForce(s, group, 10, true));
  EXPECT_EQ(by_max.size(), 10u);
  EXPECT_NE(by_max, by_sum) << "the two rules should differ on this stream";
  // Deterministic, and `blocks` overwritten.
  std::vector<int32_t> again = {1, 2, 3};
  ASSERT_TRUE(Quest({{"token_budget", "160"}})->SelectReadBlocks(s.state, &again));
  EXPECT_EQ(again, by_max);
}

// Random bounds in `t` for `cand` pages drawn from a few source pages (so
// many pages tie exactly), some channels of zero bounds and of zero queries.
struct TiedStream {
  std::vector<uint8_t> lo, hi;
  std::vector<float> q;
  StreamReadState state;
  TiedStream(DType t, int d, int group, int64_t cand, int sources, std::mt19937* rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> src_lo(static_cast<size_t>(sources * d)), src_hi(src_lo.size());
    for (size_t i = 0; i < src_lo.size(); ++i) {
      const float a = g(*rng), b = g(*rng);
      src_lo[i] = i % 7 == 3 ? 0.0f : std::min(a, b);
      src_hi[i] = i % 7 == 3 ? 0.0f : std::max(a, b);
    }
    std::vector<float> flo, fhi;
    for (int64_t b = 0; b < cand; ++b) {
      const size_t from = static_cast<size_t>((*rng)() % static_cast<unsigned>(sources)) * static_cast<size_t>(d);
      flo.insert(flo.end(), src_lo.begin() + static_cast<std::ptrdiff_t>(from), src_lo.begin() + static_cast<std::ptrdiff_t>(from) + d);
      fhi.insert(fhi.end(), src_hi.begin() + static_cast<std::ptrdiff_t>(from), src_hi.begin() + static_cast<std::ptrdiff_t>(from) + d);
    }
    lo.resize(flo.size() * static_cast<size_t>(DTypeBytes(t)));
    hi.resize(lo.size());
    ConvertFromF32(t, flo.data(), lo.data(), static_cast<int64_t>(flo.size()));
    ConvertFromF32(t, fhi.data(), hi.data(), static_cast<int64_t>(fhi.size()));
    q.resize(static_cast<size_t>(group * d));
    for (size_t i = 0; i < q.size(); ++i) q[i] = i % 5 == 1 ? 0.0f : g(*rng);
    state.layer = 4;
    state.num_layers = 8;
    state.block_size = 16;
    state.head_dim = d;
    state.num_blocks = cand + 1;
    state.key_min = lo.data();
    state.key_max = hi.data();
    state.bound_dtype = t;
    state.queries = q.data();
    state.num_queries = group;
  }
  PageBoundsArgs Args(bool sum) const {
    PageBoundsArgs a;
    a.queries = q.data();
    a.num_queries = state.num_queries;
    a.head_dim = state.head_dim;
    a.key_min = lo.data();
    a.key_max = hi.data();
    a.dtype = state.bound_dtype;
    a.num_pages = state.num_blocks - 1;
    a.sum_heads = sum;
    return a;
  }
};

// Every CPU path the host has computes the scalar path's page scores bit for
// bit and picks the same pages, on 16- and 32-bit bounds, head sizes with
// and without a 16-lane tail, and groups that do not fill a 4-head pass; the
// scores are the bound (to rounding) and the picks are the rule's over them,
// ties to the earlier page (a tie straddles the cut in most cases here).
TEST(QuestPolicyTest, EveryCpuPathPicksTheScalarPathsPages) {
  std::mt19937 rng(11);
  const int64_t cand = 96;
  int cases = 0, ties_at_cut = 0;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int d : {128, 72, 16, 5}) {
      for (int group : {1, 3, 4, 6}) {
        for (bool sum : {false, true}) {
          SCOPED_TRACE(std::string(DTypeName(t)) + " d " + std::to_string(d) + " group " + std::to_string(group) +
                       (sum ? " sum" : " max"));
          const TiedStream s(t, d, group, cand, 8, &rng);
          auto quest = Quest({{"token_budget", "208"}, {"gqa", sum ? "sum" : "max"}});  // 13 pages: 12 + the recent one
          std::vector<float> want(static_cast<size_t>(cand)), got(want.size());
          std::vector<int32_t> picks, other;
          {
            const ScopedCpuIsa scalar(CpuIsa::kScalar);
            ASSERT_TRUE(scalar.status().ok());
            PageBoundScores(s.Args(sum), want.data());
            ASSERT_TRUE(quest->SelectReadBlocks(s.state, &picks));
          }
          for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
            if (!HostHasCpuIsa(isa)) continue;
            const ScopedCpuIsa path(isa);
            ASSERT_TRUE(path.status().ok());
            PageBoundScores(s.Args(sum), got.data());
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << CpuIsaName(isa);
            ASSERT_TRUE(quest->SelectReadBlocks(s.state, &other));
            EXPECT_EQ(other, picks) << CpuIsaName(isa);
          }
          // The scores against a double-precision bound from the stored bounds.
          std::vector<float> flo(static_cast<size_t>(cand * d)), fhi(flo.size());
          ConvertToF32(t, s.lo.data(), flo.data(), cand * d);
          ConvertToF32(t, s.hi.data(), fhi.data(), cand * d);
          for (int64_t b = 0; b < cand; ++b) {
            double out = 0, mag = 0;
            for (int h = 0; h < group; ++h) {
              double bound = 0;
              for (int c = 0; c < d; ++c) {
                const double qc = s.q[static_cast<size_t>(h * d + c)];
                const size_t at = static_cast<size_t>(b * d + c);
                bound += std::max(qc * flo[at], qc * fhi[at]);
                mag += std::fabs(qc) * (std::fabs(flo[at]) + std::fabs(fhi[at]));
              }
              out = h == 0 ? bound : (sum ? out + bound : std::max(out, bound));
            }
            EXPECT_NEAR(want[static_cast<size_t>(b)], out, 1e-5 * mag + 1e-6) << "page " << b;
          }
          // The rule over those scores: a stable sort by score, descending.
          std::vector<int32_t> order(static_cast<size_t>(cand));
          for (int32_t b = 0; b < cand; ++b) order[static_cast<size_t>(b)] = b;
          std::stable_sort(order.begin(), order.end(), [&want](int32_t x, int32_t y) {
            return want[static_cast<size_t>(x)] > want[static_cast<size_t>(y)];
          });
          std::vector<int32_t> rule(order.begin(), order.begin() + 12);
          std::sort(rule.begin(), rule.end());
          rule.push_back(static_cast<int32_t>(cand));
          EXPECT_EQ(picks, rule);
          ties_at_cut += want[static_cast<size_t>(order[11])] == want[static_cast<size_t>(order[12])];
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(ties_at_cut, cases / 2) << "the streams should put ties at the cut";
}

TEST(QuestPolicyTest, BadParametersNameQuestAndTheParameter) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{"quest", {{"token_budget", "0"}}, "run.toml:4:1"}, &p);
  EXPECT_EQ(s.message(), "run.toml:4:1: policy 'quest' parameter 'token_budget' must be in [1, 16777216], got 0");
  s = PolicyRegistry::Global().Create(PolicySpec{"quest", {{"dense_layers", "-1"}}, "t"}, &p);
  EXPECT_NE(s.message().find("policy 'quest' parameter 'dense_layers'"), std::string::npos) << s.message();
  s = PolicyRegistry::Global().Create(PolicySpec{"quest", {{"gqa", "mean"}}, "t"}, &p);
  EXPECT_NE(s.message().find("policy 'quest' parameter 'gqa' expects one of max, sum"), std::string::npos) << s.message();
  // A budget below one page is known once the block size is.
  p = Quest({{"token_budget", "8"}});
  s = p->CheckShape(8, 128, 16);
  EXPECT_NE(s.message().find("policy 'quest' parameter 'token_budget' is 8, below one page"), std::string::npos)
      << s.message();
  EXPECT_TRUE(p->CheckShape(8, 128, 8).ok());
}

Status StackShape(const std::vector<PolicySpec>& specs) {
  PolicyStack stack;
  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(specs, &stack));
  return stack.CheckShape(8, 128, 16);
}

// Read is a concern of its own: quest stacks with head sharing, selection
// that keeps keys rotated, every sealed encoding and placement; the compositions the read path
// cannot take are one error naming quest and the other policy.
TEST(QuestPolicyTest, ComposesAsAConcernOfItsOwn) {
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"quest", {}, "t"}}, &stack).ok());
  EXPECT_EQ(stack.Concerns(), static_cast<uint32_t>(kConcernRead));
  EXPECT_EQ(std::string(stack.ReadPolicy()->Name()), "quest");
  EXPECT_EQ(ConcernList(stack.Concerns()), "read");
  EXPECT_EQ(stack.For(kConcernSelection), nullptr);
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"gqa-reuse", {}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"offload", {}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"key-norm", {}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"sink", {{"positions", "original"}}, "t"}}).ok());
  // Over KIVI a sealed group is a page ranked by its own scales and zeros;
  // over int8 / fp8 / ThinK by the bounds of its decoded keys kept at seal.
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"kivi", {}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"kivi", {{"bits", "4"}, {"key_axis", "token"}}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"kivi", {}, "t"}, {"sink", {{"positions", "original"}}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"quant", {}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"quant", {{"format", "int8"}}, "t"}}).ok());
  EXPECT_TRUE(StackShape({{"quest", {}, "t"}, {"think", {}, "t"}}).ok());
  Status s;
  s = StackShape({{"quest", {}, "t"}, {"sink", {}, "t"}});
  EXPECT_NE(s.message().find("policy 'quest' (read) with 'sink' storing keys before RoPE"), std::string::npos)
      << s.message();
  s = StackShape({{"quest", {}, "t"}, {"h2o", {}, "t"}});
  EXPECT_NE(s.message().find("policy 'quest' (read) with 'h2o', which ranks slots by the attention"), std::string::npos)
      << s.message();
  s = PolicyStack::Create({{"quest", {}, "t"}, {"quest", {}, "t"}}, &stack);
  EXPECT_NE(s.message().find("both claim the read concern"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
