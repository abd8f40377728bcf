// Tests of the built-in selection and head-sharing policies on hand-built
// StreamStates (no model): exact kept sets, budgets as tokens and as ratios,
// determinism, and an error naming the parameter for every bad value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "policies/registry.h"
#include "policies/selection_test_util.h"

namespace kvlab {
namespace {

using namespace testing_util;  // NOLINT: the shared helpers

// --- sink ---

TEST(SinkPolicyTest, KeepsSinksAndWindow) {
  auto p = Make("sink", {{"n_sink", "2"}, {"window", "3"}});
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(5).state, &keep)) << "5 slots fit 2 + 3";
  EXPECT_EQ(Kept(*p, TestStream(6).state), (Slots{0, 1, 3, 4, 5}));
  EXPECT_EQ(Kept(*p, TestStream(10).state), (Slots{0, 1, 7, 8, 9}));
  // Scores play no part.
  EXPECT_EQ(Kept(*p, TestStream(10, {0, 0, 9, 9, 9, 9, 9, 0, 0, 0}).state), (Slots{0, 1, 7, 8, 9}));
}

TEST(SinkPolicyTest, PaperDefaults) {
  auto p = Make("sink");
  EXPECT_EQ(p->params().ToString(), "n_sink=4,positions=cache,window=1020");
  EXPECT_TRUE(p->KeysBeforeRope());
  EXPECT_FALSE(p->NeedsAttentionScores());
  EXPECT_EQ(p->Concerns(), kConcernSelection);
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(1024).state, &keep));
  EXPECT_EQ(Kept(*p, TestStream(1025).state), Concat(Range(0, 4), Range(5, 1025)));
  EXPECT_EQ(Kept(*p, TestStream(5000).state), Concat(Range(0, 4), Range(3980, 5000)));
}

TEST(SinkPolicyTest, PositionsOriginalKeepsPostRopeKeys) {
  EXPECT_FALSE(Make("sink", {{"positions", "original"}})->KeysBeforeRope());
  EXPECT_TRUE(Make("sink", {{"positions", "cache"}})->KeysBeforeRope());
}

TEST(SinkPolicyTest, ZeroSinksIsAWindow) {
  auto p = Make("sink", {{"n_sink", "0"}, {"window", "3"}});
  EXPECT_EQ(Kept(*p, TestStream(10).state), (Slots{7, 8, 9}));
}

TEST(SinkPolicyTest, BadValuesNameTheParameter) {
  ExpectErrorNames("sink", {{"window", "0"}}, "window");
  ExpectErrorNames("sink", {{"window", "-5"}}, "window");
  ExpectErrorNames("sink", {{"n_sink", "-1"}}, "n_sink");
  ExpectErrorNames("sink", {{"positions", "rope"}}, "positions");
  ExpectErrorNames("sink", {{"window", "1.5"}}, "window");
}

// --- window ---

TEST(WindowPolicyTest, KeepsOnlyTheMostRecent) {
  auto p = Make("window", {{"window", "3"}});
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(3).state, &keep));
  EXPECT_EQ(Kept(*p, TestStream(4).state), (Slots{1, 2, 3}));
  EXPECT_EQ(Kept(*p, TestStream(10).state), (Slots{7, 8, 9}));
}

TEST(WindowPolicyTest, PaperDefaults) {
  auto p = Make("window");
  EXPECT_EQ(p->params().ToString(), "positions=cache,window=1024");
  EXPECT_TRUE(p->KeysBeforeRope());
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(1024).state, &keep));
  EXPECT_EQ(Kept(*p, TestStream(2000).state), Range(976, 2000));
  EXPECT_FALSE(Make("window", {{"positions", "original"}})->KeysBeforeRope());
}

TEST(WindowPolicyTest, BadValuesNameTheParameter) {
  ExpectErrorNames("window", {{"window", "0"}}, "window");
  ExpectErrorNames("window", {{"window", "-1"}}, "window");
  ExpectErrorNames("window", {{"n_sink", "4"}}, "n_sink");  // no sinks in the baseline
}

// --- h2o ---

TEST(H2OPolicyTest, KeepsRecentPlusHeavyHitters) {
  auto p = Make("h2o", {{"budget", "4"}});  // 2 heavy + 2 recent
  EXPECT_TRUE(p->NeedsAttentionScores());
  EXPECT_FALSE(p->KeysBeforeRope());
  // Slots 8, 9 are recent; among 0..7 the two highest scores are at 2 and 4.
  TestStream s(10, {5, 1, 9, 1, 8, 0, 0, 7, 100, 100});
  EXPECT_EQ(Kept(*p, s.state), (Slots{2, 4, 8, 9}));
  // The recent slots' own scores do not take heavy-hitter places.
  TestStream t(10, {5, 1, 0, 1, 0, 0, 0, 0, 100, 100});
  EXPECT_EQ(Kept(*p, t.state), (Slots{0, 1, 8, 9}));
}

TEST(H2OPolicyTest, TiesGoToTheLowerSlot) {
  auto p = Make("h2o", {{"budget", "4"}});
  TestStream s(10, {3, 1, 3, 3, 1, 0, 3, 0, 0, 0});
  EXPECT_EQ(Kept(*p, s.state), (Slots{0, 2, 8, 9}));
  TestStream flat(10, std::vector<float>(10, 0.5f));
  EXPECT_EQ(Kept(*p, flat.state), (Slots{0, 1, 8, 9}));
  // 1 beats 3 at equal score; 6 beats both.
  TestStream u(10, {0, 2, 0, 2, 0, 0, 5, 0, 0, 0});
  EXPECT_EQ(Kept(*p, u.state), (Slots{1, 6, 8, 9}));
}

TEST(H2OPolicyTest, NaNScoresRankLast) {
  auto p = Make("h2o", {{"budget", "3"}});  // heavy 1 + recent 2
  const float nan = std::numeric_limits<float>::quiet_NaN();
  TestStream s(6, {nan, 0.25f, nan, 0, 0, 0});
  EXPECT_EQ(Kept(*p, s.state), (Slots{1, 4, 5}));
}

TEST(H2OPolicyTest, OddBudgetGivesTheExtraSlotToRecent) {
  auto p = Make("h2o", {{"budget", "5"}});  // heavy floor(2.5) = 2, recent 3
  TestStream s(10, {0, 9, 0, 8, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(Kept(*p, s.state), (Slots{1, 3, 7, 8, 9}));
}

TEST(H2OPolicyTest, HeavyFractionExtremes) {
  TestStream s(10, {0, 9, 0, 8, 0, 7, 0, 0, 0, 6});
  EXPECT_EQ(Kept(*Make("h2o", {{"budget", "4"}, {"heavy_fraction", "0"}}), s.state), (Slots{6, 7, 8, 9}));
  EXPECT_EQ(Kept(*Make("h2o", {{"budget", "4"}, {"heavy_fraction", "1"}}), s.state), (Slots{1, 3, 5, 9}));
  EXPECT_EQ(Kept(*Make("h2o", {{"budget", "4"}, {"heavy_fraction", "0.25"}}), s.state), (Slots{1, 7, 8, 9}));
}

TEST(H2OPolicyTest, BudgetAsTokensWithinAndAbove) {
  auto p = Make("h2o", {{"budget", "4"}});
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(3).state, &keep));
  EXPECT_FALSE(p->SelectSlots(TestStream(4).state, &keep));
  EXPECT_EQ(Kept(*p, TestStream(5, {0, 1, 2, 0, 0}).state), (Slots{1, 2, 3, 4}));
  // A token budget ignores the sequence length.
  EXPECT_EQ(Kept(*p, TestStream(10, {}, 1000).state).size(), 4u);
}

TEST(H2OPolicyTest, BudgetAsRatioOfSequenceLength) {
  auto p = Make("h2o");  // ratio 0.2, heavy_fraction 0.5
  EXPECT_EQ(p->params().ToString(), "budget=0,heavy_fraction=0.5,ratio=0.2");
  // 20 tokens -> budget 4: slots 18, 19 recent, heavy 2 from the rest.
  std::vector<float> sc(20, 0.0f);
  sc[3] = 2;
  sc[11] = 1;
  EXPECT_EQ(Kept(*p, TestStream(20, sc).state), (Slots{3, 11, 18, 19}));
  // The budget follows the sequence's length, not the stream's: a sequence of
  // 100 tokens whose stream already holds 30 keeps 20 (10 heavy + 10 recent).
  Slots k = Kept(*p, TestStream(30, {}, 100).state);
  EXPECT_EQ(k, Concat(Range(0, 10), Range(20, 30)));
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(20, {}, 100).state, &keep)) << "20 slots fit 0.2 x 100";
  // floor(0.29 x 100) is 29 even though the product is 28.999999999999996.
  EXPECT_EQ(Kept(*Make("h2o", {{"ratio", "0.29"}}), TestStream(100).state).size(), 29u);
  // At least one token: 0.01 x 10 rounds down to 0, the newest slot stays.
  EXPECT_EQ(Kept(*Make("h2o", {{"ratio", "0.01"}}), TestStream(10).state), (Slots{9}));
}

TEST(H2OPolicyTest, BadValuesNameTheParameter) {
  ExpectErrorNames("h2o", {{"budget", "-1"}}, "budget");
  ExpectErrorNames("h2o", {{"ratio", "0"}}, "ratio");
  ExpectErrorNames("h2o", {{"ratio", "-0.2"}}, "ratio");
  ExpectErrorNames("h2o", {{"ratio", "1.5"}}, "ratio");
  ExpectErrorNames("h2o", {{"ratio", "inf"}}, "ratio");
  ExpectErrorNames("h2o", {{"heavy_fraction", "-0.1"}}, "heavy_fraction");
  ExpectErrorNames("h2o", {{"heavy_fraction", "1.01"}}, "heavy_fraction");
  EXPECT_NE(Make("h2o", {{"ratio", "1"}}), nullptr);
  EXPECT_NE(Make("h2o", {{"heavy_fraction", "0"}}), nullptr);
  EXPECT_NE(Make("h2o", {{"heavy_fraction", "1"}}), nullptr);
}

// --- random ---

void ExpectStrictlyIncreasingWithin(const Slots& k, int64_t n) {
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_GE(k[i], 0);
    ASSERT_LT(k[i], n);
    if (i > 0) {
      ASSERT_LT(k[i - 1], k[i]);
    }
  }
}

TEST(RandomPolicyTest, KeepsExactlyTheBudgetAndTheLastSlot) {
  auto p = Make("random", {{"budget", "10"}});
  for (int64_t n : {11, 12, 50, 100, 5000}) {
    SCOPED_TRACE(n);
    Slots keep;
    ASSERT_TRUE(p->SelectSlots(TestStream(n).state, &keep));
    EXPECT_EQ(keep.size(), 10u);
    ExpectStrictlyIncreasingWithin(keep, n);
    EXPECT_EQ(keep.back(), n - 1);
  }
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(10).state, &keep));
  EXPECT_EQ(Kept(*Make("random", {{"budget", "1"}}), TestStream(7).state), (Slots{6}));
}

TEST(RandomPolicyTest, BudgetAsRatio) {
  auto p = Make("random", {{"ratio", "0.5"}});
  EXPECT_EQ(Kept(*p, TestStream(1000).state).size(), 500u);
  EXPECT_EQ(Kept(*p, TestStream(300, {}, 1000).state).size(), 300u) << "300 slots fit 0.5 x 1000";
  EXPECT_EQ(Kept(*p, TestStream(600, {}, 1000).state).size(), 500u);
  EXPECT_EQ(Kept(*Make("random"), TestStream(1000).state).size(), 200u) << "default ratio 0.2";
}

TEST(RandomPolicyTest, DeterministicFunctionOfSeedLayerHeadAndLength) {
  TestStream s(200);
  s.state.layer = 3;
  s.state.kv_head = 1;
  const Slots a = Kept(*Make("random", {{"budget", "20"}}), s.state);
  EXPECT_EQ(Kept(*Make("random", {{"budget", "20"}}), s.state), a) << "a fresh instance chooses the same";
  EXPECT_EQ(Kept(*Make("random", {{"budget", "20"}, {"seed", "0"}}), s.state), a);
  EXPECT_NE(Kept(*Make("random", {{"budget", "20"}, {"seed", "1"}}), s.state), a);
  TestStream other_layer(200);
  other_layer.state.layer = 4;
  other_layer.state.kv_head = 1;
  EXPECT_NE(Kept(*Make("random", {{"budget", "20"}}), other_layer.state), a);
  TestStream other_head(200);
  other_head.state.layer = 3;
  other_head.state.kv_head = 2;
  EXPECT_NE(Kept(*Make("random", {{"budget", "20"}}), other_head.state), a);
  // Scores and positions play no part.
  TestStream scored(200, std::vector<float>(200, 3.0f));
  scored.state.layer = 3;
  scored.state.kv_head = 1;
  EXPECT_EQ(Kept(*Make("random", {{"budget", "20"}}), scored.state), a);
}

TEST(RandomPolicyTest, RoughlyUniform) {
  // 11 slots, budget 6: each of slots 0..9 is kept with probability 5/10.
  auto p = Make("random", {{"budget", "6"}});
  std::vector<int> hits(10, 0);
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    TestStream s(11);
    s.state.layer = t;
    for (int64_t k : Kept(*p, s.state)) {
      if (k < 10) ++hits[static_cast<size_t>(k)];
    }
  }
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(hits[static_cast<size_t>(i)] / double(trials), 0.5, 0.05) << "slot " << i;
}

TEST(RandomPolicyTest, BadValuesNameTheParameter) {
  ExpectErrorNames("random", {{"budget", "-3"}}, "budget");
  ExpectErrorNames("random", {{"ratio", "0"}}, "ratio");
  ExpectErrorNames("random", {{"ratio", "2"}}, "ratio");
  ExpectErrorNames("random", {{"seed", "x"}}, "seed");
}

// --- gqa-reuse ---

TEST(GqaReusePolicyTest, StoredHeadsAndMergeMode) {
  auto p = Make("gqa-reuse");
  EXPECT_EQ(p->Concerns(), kConcernHeadSharing);
  EXPECT_EQ(p->StoredKvHeads(8), 4);
  EXPECT_EQ(p->StoredKvHeads(32), 16);
  EXPECT_EQ(p->MergeMode(), HeadMerge::kMean);
  EXPECT_EQ(Make("gqa-reuse", {{"group", "8"}})->StoredKvHeads(8), 1) << "group = H_kv is MQA";
  EXPECT_EQ(Make("gqa-reuse", {{"group", "4"}})->StoredKvHeads(32), 8);
  EXPECT_EQ(Make("gqa-reuse", {{"group", "1"}})->StoredKvHeads(8), 8);
  EXPECT_EQ(Make("gqa-reuse", {{"merge", "first"}})->MergeMode(), HeadMerge::kFirst);
  Slots keep;
  EXPECT_FALSE(p->SelectSlots(TestStream(100).state, &keep));
}

TEST(GqaReusePolicyTest, CheckShapeNamesGroup) {
  EXPECT_TRUE(Make("gqa-reuse")->CheckShape(8, 128, 16).ok());
  EXPECT_TRUE(Make("gqa-reuse", {{"group", "8"}})->CheckShape(8, 128, 16).ok());
  for (auto [group, heads] : std::vector<std::pair<const char*, int>>{{"3", 8}, {"16", 8}, {"2", 1}, {"4", 6}}) {
    SCOPED_TRACE(std::string(group) + " on " + std::to_string(heads));
    auto p = Make("gqa-reuse", {{"group", group}});
    Status s = p->CheckShape(heads, 128, 16);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("'group'"), std::string::npos) << s.message();
    EXPECT_EQ(p->StoredKvHeads(heads), heads) << "a bad group is not applied half-way";
  }
}

TEST(GqaReusePolicyTest, BadValuesNameTheParameter) {
  ExpectErrorNames("gqa-reuse", {{"group", "0"}}, "group");
  ExpectErrorNames("gqa-reuse", {{"group", "-2"}}, "group");
  ExpectErrorNames("gqa-reuse", {{"group", "99999999999"}}, "group");
  ExpectErrorNames("gqa-reuse", {{"merge", "max"}}, "merge");
}

// --- stacks ---

TEST(SelectionStackTest, HeadSharingComposesWithSelection) {
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"gqa-reuse", {{"group", "4"}}, "t"}, PolicySpec{"sink", {}, "t"}}, &stack).ok());
  EXPECT_EQ(stack.StoredKvHeads(8), 2);
  EXPECT_TRUE(stack.KeysBeforeRope());
  EXPECT_FALSE(stack.NeedsAttentionScores());
  EXPECT_EQ(stack.For(kConcernSelection)->Name(), std::string("sink"));
  EXPECT_EQ(stack.Describe(), "gqa-reuse(group=4,merge=mean)+sink(n_sink=4,positions=cache,window=1020)");
  EXPECT_FALSE(stack.CheckShape(6, 128, 16).ok());
  EXPECT_TRUE(stack.CheckShape(8, 128, 16).ok());

  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"h2o", {}, "t"}}, &stack).ok());
  EXPECT_TRUE(stack.NeedsAttentionScores());
  EXPECT_FALSE(stack.KeysBeforeRope());
}

TEST(SelectionStackTest, TwoSelectionPoliciesAreAnError) {
  PolicyStack stack;
  Status s = PolicyStack::Create({PolicySpec{"h2o", {}, "t"}, PolicySpec{"sink", {}, "t"}}, &stack);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'h2o' and 'sink'"), std::string::npos) << s.message();
}

TEST(A2sfPolicyTest, FoldForgetsPerQuery) {
  auto p = Make("a2sf", {{"budget", "16"}, {"alpha", "0.5"}});
  std::vector<float> score = {0, 0, 0};
  const std::vector<float> first = {4, 2, 0}, second = {0, 1, 2};
  p->FoldStepAttention(SeqStep{1, true}, first.data(), 3, score.data());
  EXPECT_EQ(score, (std::vector<float>{4, 2, 0}));
  // A decode step: the old scores times alpha, then the step's.
  p->FoldStepAttention(SeqStep{1, true}, second.data(), 3, score.data());
  EXPECT_EQ(score, (std::vector<float>{2, 2, 2}));
  // A step of three tokens forgets three queries' worth: alpha^3.
  p->FoldStepAttention(SeqStep{3, true}, second.data(), 3, score.data());
  EXPECT_EQ(score, (std::vector<float>{0.25f, 1.25f, 2.25f}));
}

TEST(A2sfPolicyTest, AlphaOneIsH2OWithOneRecentSlot) {
  // alpha 1 folds a plain sum, and the kept set is h2o's whose recent share
  // is the one newest slot (heavy_fraction 0.75 of 4).
  auto a2sf = Make("a2sf", {{"budget", "4"}, {"alpha", "1"}});
  auto h2o = Make("h2o", {{"budget", "4"}, {"heavy_fraction", "0.75"}});
  std::vector<float> sa(10, 0.0f), sh(10, 0.0f);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> attn(10);
    for (int i = 0; i < 10; ++i) attn[static_cast<size_t>(i)] = static_cast<float>((i * 7 + step * 3) % 5);
    a2sf->FoldStepAttention(SeqStep{1, true}, attn.data(), 10, sa.data());
    h2o->FoldStepAttention(SeqStep{1, true}, attn.data(), 10, sh.data());
  }
  EXPECT_EQ(sa, sh);
  TestStream s(10, sa);
  EXPECT_EQ(Kept(*a2sf, s.state), Kept(*h2o, s.state));
  EXPECT_EQ(Kept(*a2sf, s.state).size(), 4u);
}

TEST(A2sfPolicyTest, RecentAttentionOutranksOldAttention) {
  // Slot 0 is attended strongly in the first two steps, slot 1 half as much
  // in the last two: summed (alpha 1) slot 0 wins, forgetting (alpha 0.5) slot 1.
  const std::vector<std::vector<float>> steps = {{2, 0, 0, 0, 0}, {2, 0, 0, 0, 0}, {0, 0, 0, 0, 0},
                                                 {0, 1, 0, 0, 0}, {0, 1, 0, 0, 0}};
  for (const auto& [alpha, winner] : std::vector<std::pair<std::string, int64_t>>{{"1", 0}, {"0.5", 1}}) {
    SCOPED_TRACE(alpha);
    auto p = Make("a2sf", {{"budget", "2"}, {"alpha", alpha}});
    std::vector<float> score(5, 0.0f);
    for (const auto& a : steps) p->FoldStepAttention(SeqStep{1, true}, a.data(), 5, score.data());
    TestStream s(5, score);
    EXPECT_EQ(Kept(*p, s.state), (Slots{winner, 4}));
  }
}

TEST(A2sfPolicyTest, RatioAndErrors) {
  auto p = Make("a2sf");  // ratio 0.2
  EXPECT_EQ(Kept(*p, TestStream(20).state).size(), 4u);
  ExpectErrorNames("a2sf", {{"alpha", "0"}}, "alpha");
  ExpectErrorNames("a2sf", {{"alpha", "1.5"}}, "alpha");
  ExpectErrorNames("a2sf", {{"budget", "8"}, {"ratio", "0.5"}}, "ratio");
}

}  // namespace
}  // namespace kvlab
