// Semantics of snapkv, pyramidkv, adakv, tova and key-norm on hand-built
// streams with known scores: the kept set is exactly what each paper's rule
// keeps. (Conformance over every policy is policy_test.cpp's.)
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "policies/registry.h"
#include "policies/snapkv_scores.h"

namespace kvlab {
namespace {

std::unique_ptr<KVPolicy> Make(const std::string& name, std::map<std::string, std::string> params) {
  std::unique_ptr<KVPolicy> p;
  const Status s = PolicyRegistry::Global().Create(PolicySpec{name, std::move(params), "t"}, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

std::string CreateError(const std::string& name, std::map<std::string, std::string> params) {
  std::unique_ptr<KVPolicy> p;
  return PolicyRegistry::Global().Create(PolicySpec{name, std::move(params), "t"}, &p).message();
}

// A stream of score.size() slots at positions 0.. as core hands it over.
struct Hand {
  std::vector<int32_t> positions;
  std::vector<float> score;
  StreamState state;
  explicit Hand(std::vector<float> s, int layer = 0, int num_layers = 0) : score(std::move(s)) {
    positions.resize(score.size());
    std::iota(positions.begin(), positions.end(), 0);
    state.layer = layer;
    state.num_layers = num_layers;
    state.num_tokens = static_cast<int64_t>(score.size());
    state.positions = positions.data();
    state.score = score.data();
    state.seq_length = state.num_tokens;
  }
};

std::vector<int64_t> Range(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i) v.push_back(i);
  return v;
}

std::vector<int64_t> Cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// 20 slots, window 4, budget 8: the top 4 of the 16 earlier slots by pooled score.
TEST(SnapKVTest, PoolingThenTopKPlusTheWindow) {
  std::vector<float> s(20, 0.0f);
  s[5] = 1.0f;
  s[12] = 0.5f;
  s[18] = 9.0f;  // in the window: kept anyway, and never a neighbour of the prefix
  std::vector<int64_t> keep;
  // Max-pooled over 3: slots 4-6 score 1, 11-13 score 0.5; ties to the lower slot.
  auto p = Make("snapkv", {{"budget", "8"}, {"window", "4"}, {"kernel", "3"}});
  ASSERT_TRUE(p->SelectSlots(Hand(s).state, &keep));
  EXPECT_EQ(keep, Cat({4, 5, 6, 11}, Range(16, 20)));
  // Kernel 1 is no pooling: the spikes, then the lowest of the zeros.
  p = Make("snapkv", {{"budget", "8"}, {"window", "4"}, {"kernel", "1"}});
  ASSERT_TRUE(p->SelectSlots(Hand(s).state, &keep));
  EXPECT_EQ(keep, Cat({0, 1, 5, 12}, Range(16, 20)));

  // A pair of 0.6 against one spike of 1: max-pooling keeps the spike's
  // neighbourhood, average-pooling (divided by the kernel) the pair.
  std::vector<float> t(10, 0.0f);
  t[2] = t[3] = 0.6f;
  t[9] = 1.0f;
  std::vector<float> pooled;
  PooledScores(t.data(), 10, 3, /*max_pool=*/false, &pooled);
  EXPECT_FLOAT_EQ(pooled[2], 0.4f);
  EXPECT_FLOAT_EQ(pooled[9], 1.0f / 3);
  EXPECT_FLOAT_EQ(pooled[0], 0.0f);
  t.resize(14, 0.0f);  // + a window of 4
  p = Make("snapkv", {{"budget", "6"}, {"window", "4"}, {"kernel", "3"}});
  ASSERT_TRUE(p->SelectSlots(Hand(t).state, &keep));
  EXPECT_EQ(keep, Cat({8, 9}, Range(10, 14)));
  p = Make("snapkv", {{"budget", "6"}, {"window", "4"}, {"kernel", "3"}, {"pooling", "avg"}});
  ASSERT_TRUE(p->SelectSlots(Hand(t).state, &keep));
  EXPECT_EQ(keep, Cat({2, 3}, Range(10, 14)));
}

TEST(SnapKVTest, BudgetAsRatioIncludesTheWindow) {
  auto p = Make("snapkv", {{"budget", "0"}, {"ratio", "0.25"}, {"window", "4"}, {"kernel", "1"}});
  std::vector<float> s(40, 0.0f);
  s[7] = s[20] = 1.0f;
  std::vector<int64_t> keep;
  ASSERT_TRUE(p->SelectSlots(Hand(s).state, &keep));
  EXPECT_EQ(keep, Cat({0, 1, 2, 3, 7, 20}, Range(36, 40))) << "0.25 x 40 = 10 slots, 4 of them the window";
  EXPECT_EQ(p->KeptSlotsBound(400), 100 + 256 - 1);
}

// When the rule runs: a prompt chunk's end (or an unknown step), else only
// once the stream is `every` slots past its budget.
TEST(SnapKVTest, RunsAtAPromptChunksEndAndEveryNSlotsAfter) {
  auto p = Make("snapkv", {{"budget", "16"}, {"window", "4"}, {"every", "8"}});
  std::vector<int64_t> keep;
  Hand h(std::vector<float>(23, 0.0f));
  h.state.step_tokens = 23;
  h.state.chunk_end = false;  // an earlier step of a longer chunk, 7 past the budget
  EXPECT_FALSE(p->SelectSlots(h.state, &keep));
  h.state.chunk_end = true;
  EXPECT_TRUE(p->SelectSlots(h.state, &keep));
  EXPECT_EQ(keep.size(), 16u);
  h.state.step_tokens = 1;  // decode: 7 past the budget waits, 8 runs
  EXPECT_FALSE(p->SelectSlots(h.state, &keep));
  Hand d(std::vector<float>(24, 0.0f));
  d.state.step_tokens = 1;
  EXPECT_TRUE(p->SelectSlots(d.state, &keep));
  EXPECT_EQ(keep.size(), 16u);
  EXPECT_EQ(p->KeptSlotsBound(1000), 16 + 8 - 1);
  // Within budget: nothing, whatever the step.
  Hand small(std::vector<float>(16, 0.0f));
  EXPECT_FALSE(p->SelectSlots(small.state, &keep));
}

// A prefill step's window replaces the scores; decode steps add to them.
TEST(SnapKVTest, FoldsAPrefillWindowAndAccumulatesDecode) {
  auto p = Make("snapkv", {});
  EXPECT_EQ(p->ObservationWindow(), 32);
  EXPECT_TRUE(p->NeedsAttentionScores());
  std::vector<float> score = {5, 5, 5};
  const std::vector<float> step = {1, 2, 3};
  p->FoldStepAttention(SeqStep{40, true}, step.data(), 3, score.data());
  EXPECT_EQ(score, std::vector<float>({1, 2, 3}));
  p->FoldStepAttention(SeqStep{1, true}, step.data(), 3, score.data());
  EXPECT_EQ(score, std::vector<float>({2, 4, 6}));
}

TEST(PyramidKVTest, LayerBudgetsFallWithDepthAndSumToTheUniformTotal) {
  for (int64_t P : {1, 7, 100, 992}) {
    for (int L : {1, 2, 32, 80}) {
      for (double beta : {1.0, 2.0, 20.0}) {
        const std::vector<int64_t> b = PyramidPrefixBudgets(P, L, beta);
        ASSERT_EQ(b.size(), static_cast<size_t>(L));
        EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), P * L) << P << " " << L << " " << beta;
        for (int l = 1; l < L; ++l) EXPECT_LE(b[l], b[l - 1]) << "rises at layer " << l;
        if (beta == 1.0) {
          EXPECT_EQ(b.front(), b.back()) << "beta 1 is uniform";
        }
      }
    }
  }
  // The paper's endpoints: 2P - P/beta at the bottom, P/beta at the top.
  const std::vector<int64_t> b = PyramidPrefixBudgets(992, 32, 20);
  EXPECT_NEAR(static_cast<double>(b.front()), 2 * 992 - 992 / 20.0, 1.0);
  EXPECT_NEAR(static_cast<double>(b.back()), 992 / 20.0, 1.0);
  EXPECT_GT(b.front(), 3 * b.back());

  // The policy keeps window + P_l on layer l of 4.
  auto p = Make("pyramidkv", {{"budget", "20"}, {"window", "4"}, {"beta", "4"}, {"kernel", "1"}});
  const std::vector<int64_t> sched = PyramidPrefixBudgets(16, 4, 4);
  int64_t total = 0;
  for (int l = 0; l < 4; ++l) {
    std::vector<float> s(100);
    for (int i = 0; i < 100; ++i) s[i] = static_cast<float>((i * 37) % 100);
    std::vector<int64_t> keep;
    ASSERT_TRUE(p->SelectSlots(Hand(s, l, 4).state, &keep));
    EXPECT_EQ(static_cast<int64_t>(keep.size()), 4 + sched[l]) << "layer " << l;
    total += static_cast<int64_t>(keep.size());
    // The highest-scoring earlier slots (the scores are distinct).
    std::vector<float> prefix(s.begin(), s.end() - 4);
    std::sort(prefix.begin(), prefix.end(), std::greater<float>());
    for (size_t j = 0; j + 4 < keep.size(); ++j) {
      EXPECT_GE(s[static_cast<size_t>(keep[j])], prefix[static_cast<size_t>(sched[l] - 1)]) << "layer " << l;
    }
  }
  EXPECT_EQ(total, 4 * 20) << "the uniform total";
  EXPECT_GE(p->KeptSlotsBound(1000), 4 + sched[0]);
}

// Two heads of a layer, prefix budget 4 each (8 together), safeguard
// floor(0.25 x 4) = 1: head 1's scores are all below head 0's, so it keeps
// only its floor and head 0 takes the other 7.
TEST(AdaKVTest, JointTopKOverTheLayersHeadsWithTheSafeguardFloor) {
  std::vector<float> s0(14), s1(14);
  for (int i = 0; i < 10; ++i) {
    s0[i] = 1.0f + static_cast<float>(i);     // head 0: 1..10, increasing
    s1[i] = 0.1f * static_cast<float>(i % 5);  // head 1: below 1 everywhere, best at 4 and 9
  }
  Hand h0(s0, 3, 8), h1(s1, 3, 8);
  h1.state.kv_head = 1;
  std::vector<std::vector<int64_t>> keep;
  std::vector<char> acts;
  auto p = Make("adakv", {{"budget", "8"}, {"window", "4"}, {"kernel", "1"}, {"alpha", "0.25"}});
  ASSERT_TRUE(p->SelectsPerLayer());
  p->SelectLayerSlots({h0.state, h1.state}, &keep, &acts);
  ASSERT_EQ(keep.size(), 2u);
  EXPECT_EQ(acts, std::vector<char>({1, 1}));
  EXPECT_EQ(keep[0], Cat({3, 4, 5, 6, 7, 8, 9}, Range(10, 14))) << "the floor's 1 + 6 of the joint top";
  EXPECT_EQ(keep[1], Cat({4}, Range(10, 14))) << "the safeguard: its own best slot (4 ties 9: the lower)";
  EXPECT_EQ(keep[0].size() - 4 + keep[1].size() - 4, 8u) << "the layer's total prefix budget";

  // alpha = 1: the floor is the whole budget, so every head keeps its uniform share.
  p = Make("adakv", {{"budget", "8"}, {"window", "4"}, {"kernel", "1"}, {"alpha", "1"}});
  p->SelectLayerSlots({h0.state, h1.state}, &keep, &acts);
  EXPECT_EQ(keep[0], Cat({6, 7, 8, 9}, Range(10, 14)));
  EXPECT_EQ(keep[1], Cat({3, 4, 8, 9}, Range(10, 14)));
  // alpha = 0: purely joint; head 1 keeps only its window.
  p = Make("adakv", {{"budget", "8"}, {"window", "4"}, {"kernel", "1"}, {"alpha", "0"}});
  p->SelectLayerSlots({h0.state, h1.state}, &keep, &acts);
  EXPECT_EQ(keep[0], Cat({2, 3, 4, 5, 6, 7, 8, 9}, Range(10, 14)));
  EXPECT_EQ(keep[1], Range(10, 14));

  // A head's bound in a layer of H heads: the window, H x P less the others' floors, and `every`.
  p = Make("adakv", {{"budget", "36"}, {"window", "4"}, {"alpha", "0.25"}, {"every", "8"}});
  EXPECT_EQ(p->KeptSlotsBoundInLayer(100000, 8), 4 + 8 * 32 - 7 * 8 + 7);
  EXPECT_EQ(p->KeptSlotsBound(100000), 36 + 7);
}

TEST(AdaKVTest, OverPyramidKVsLayerBudgets) {
  auto p = Make("adakv", {{"budget", "20"}, {"window", "4"}, {"kernel", "1"}, {"layers", "pyramid"}, {"beta", "4"}});
  const std::vector<int64_t> sched = PyramidPrefixBudgets(16, 4, 4);
  for (int l = 0; l < 4; ++l) {
    std::vector<Hand> hands;
    for (int h = 0; h < 3; ++h) {
      std::vector<float> s(60);
      for (int i = 0; i < 60; ++i) s[i] = static_cast<float>((i * 7 + h * 13) % 60);
      hands.emplace_back(s, l, 4);
    }
    std::vector<std::vector<int64_t>> keep;
    std::vector<char> acts;
    p->SelectLayerSlots({hands[0].state, hands[1].state, hands[2].state}, &keep, &acts);
    int64_t prefix = 0;
    for (const auto& k : keep) prefix += static_cast<int64_t>(k.size()) - 4;
    EXPECT_EQ(prefix, 3 * sched[l]) << "layer " << l;
  }
}

// TOVA: once full, one decode step evicts exactly one slot, the one with the
// lowest current attention averaged over the layer's heads (per head with
// heads = "each"); the slot just written stays.
TEST(TovaTest, EvictsExactlyOneSlotAStepOnceFull) {
  auto p = Make("tova", {{"budget", "4"}});
  EXPECT_EQ(p->ObservationWindow(), 1);
  std::vector<float> score = {9, 9};
  const std::vector<float> step = {1, 2};
  p->FoldAttention(step.data(), 2, score.data());
  EXPECT_EQ(score, step) << "the current step's attention, not accumulated";

  // Head 0 ranks slot 1 lowest, head 1 slot 2; on average slot 2 is lowest.
  Hand h0({0.30f, 0.05f, 0.20f, 0.25f, 0.20f}), h1({0.20f, 0.30f, 0.01f, 0.29f, 0.20f});
  std::vector<std::vector<int64_t>> keep;
  std::vector<char> acts;
  p->SelectLayerSlots({h0.state, h1.state}, &keep, &acts);
  EXPECT_EQ(acts, std::vector<char>({1, 1}));
  EXPECT_EQ(keep[0], std::vector<int64_t>({0, 1, 3, 4}));
  EXPECT_EQ(keep[1], keep[0]) << "one choice for the layer";
  auto each = Make("tova", {{"budget", "4"}, {"heads", "each"}});
  each->SelectLayerSlots({h0.state, h1.state}, &keep, &acts);
  EXPECT_EQ(keep[0], std::vector<int64_t>({0, 2, 3, 4}));
  EXPECT_EQ(keep[1], std::vector<int64_t>({0, 1, 3, 4}));

  // A run of decode steps: the stream stays at the budget, one eviction each.
  std::vector<float> s = {0.5f, 0.1f, 0.4f, 0.3f};
  std::vector<int32_t> pos = {0, 1, 2, 3};
  for (int t = 4; t < 12; ++t) {
    s.push_back(0.2f + 0.01f * static_cast<float>(t));
    pos.push_back(t);
    Hand h(s);
    h.positions = pos;
    h.state.positions = h.positions.data();
    std::vector<int64_t> k;
    ASSERT_TRUE(p->SelectSlots(h.state, &k));
    ASSERT_EQ(k.size(), 4u) << "step " << t;
    const auto lowest = std::min_element(s.begin(), s.end() - 1) - s.begin();
    EXPECT_EQ(std::find(k.begin(), k.end(), lowest), k.end()) << "the lowest is the one evicted";
    std::vector<float> ns;
    std::vector<int32_t> np;
    for (int64_t i : k) ns.push_back(s[static_cast<size_t>(i)]), np.push_back(pos[static_cast<size_t>(i)]);
    s = ns;
    pos = np;
  }
  EXPECT_EQ(p->KeptSlotsBound(1000), 4);
}

TEST(KeyNormTest, KeepsTheLowestNormKeysAndTheNewest) {
  auto p = Make("key-norm", {{"budget", "4"}});
  EXPECT_TRUE(p->NeedsKeyNorms());
  EXPECT_FALSE(p->NeedsAttentionScores());
  std::vector<int64_t> keep;
  ASSERT_TRUE(p->SelectSlots(Hand({3.0f, 1.0f, 2.5f, 0.5f, 4.0f, 1.5f, 9.0f}).state, &keep));
  EXPECT_EQ(keep, std::vector<int64_t>({1, 3, 5, 6})) << "norms 1, 0.5, 1.5, and the newest";
  p = Make("key-norm", {{"budget", "4"}, {"recent", "2"}});
  ASSERT_TRUE(p->SelectSlots(Hand({3.0f, 1.0f, 2.5f, 0.5f, 4.0f, 1.5f, 9.0f}).state, &keep));
  EXPECT_EQ(keep, std::vector<int64_t>({1, 3, 5, 6}));
  p = Make("key-norm", {{"budget", "3"}, {"recent", "2"}});
  ASSERT_TRUE(p->SelectSlots(Hand({3.0f, 1.0f, 2.5f, 0.5f, 4.0f, 1.5f, 9.0f}).state, &keep));
  EXPECT_EQ(keep, std::vector<int64_t>({3, 5, 6}));
  EXPECT_EQ(p->KeptSlotsBound(1000), 3);
}

TEST(SnapKVFamilyTest, BadParametersNameThePolicyAndTheParameter) {
  for (const char* name : {"snapkv", "pyramidkv", "adakv"}) {
    SCOPED_TRACE(name);
    const std::string n(name);
    EXPECT_EQ(CreateError(n, {{"window", "0"}}), "t: policy '" + n + "' parameter 'window' must be in [1, 1048576], got 0");
    EXPECT_EQ(CreateError(n, {{"kernel", "0"}}), "t: policy '" + n + "' parameter 'kernel' must be in [1, 1048576], got 0");
    EXPECT_EQ(CreateError(n, {{"kernel", "4"}}),
              "t: " + n + ": parameter 'kernel' is 4, must be odd (the pooled score of a slot is centred on it)");
    EXPECT_EQ(CreateError(n, {{"budget", "32"}}),
              "t: " + n + ": parameter 'budget' is 32, must be larger than 'window' 32 (the budget includes the window)");
    EXPECT_EQ(CreateError(n, {{"every", "0"}}), "t: policy '" + n + "' parameter 'every' must be in [1, 1048576], got 0");
    auto p = Make(n, {{"budget", "40"}, {"window", "8"}});
    const Status s = p->CheckShape(8, 128, 64);
    EXPECT_EQ(s.message(), n + ": parameter 'budget' is 40, smaller than one block (block_size 64): the pools hand "
                               "out whole blocks per stream");
  }
  EXPECT_EQ(CreateError("pyramidkv", {{"beta", "0.5"}}), "t: policy 'pyramidkv' parameter 'beta' must be >= 1, got 0.5");
  EXPECT_EQ(CreateError("adakv", {{"alpha", "1.5"}}), "t: policy 'adakv' parameter 'alpha' must be in [0, 1], got 1.5");
  EXPECT_EQ(CreateError("adakv", {{"layers", "cone"}}),
            "t: policy 'adakv' parameter 'layers' expects one of uniform, pyramid, got 'cone'");
  EXPECT_EQ(CreateError("tova", {{"budget", "-1"}}), "t: policy 'tova' parameter 'budget' must be >= 0, got -1");
  EXPECT_EQ(CreateError("tova", {{"heads", "max"}}), "t: policy 'tova' parameter 'heads' expects one of mean, each, got 'max'");
  EXPECT_EQ(CreateError("key-norm", {{"recent", "0"}}),
            "t: policy 'key-norm' parameter 'recent' must be in [1, 1048576], got 0");
  EXPECT_EQ(CreateError("key-norm", {{"budget", "2"}, {"recent", "3"}}),
            "t: key-norm: parameter 'budget' is 2, smaller than 'recent' 3");
}

}  // namespace
}  // namespace kvlab
