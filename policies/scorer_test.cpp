// The scorer policies that read the slots' keys and values (NeedsKeyValues)
// on hand-built streams: keydiff, lagkv and cur, each against its rule
// worked out by hand or computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "policies/selection_test_util.h"

namespace kvlab {
namespace {

using namespace testing_util;  // NOLINT: the shared helpers

// A StreamKvReader over given keys and values ([n][d] each).
class Rows : public StreamKvReader {
 public:
  Rows(int d, std::vector<float> keys, std::vector<float> values) : d_(d), k_(std::move(keys)), v_(std::move(values)) {}
  int head_dim() const override { return d_; }
  void Read(float* keys, float* values) const override {
    std::copy(k_.begin(), k_.end(), keys);
    std::copy(v_.begin(), v_.end(), values);
  }

 private:
  int d_;
  std::vector<float> k_, v_;
};

// --- keydiff ---

TEST(KeyDiffPolicyTest, KeepsTheKeysLeastLikeTheAnchor) {
  auto p = Make("keydiff", {{"budget", "3"}});
  ASSERT_TRUE(p->NeedsKeyValues());
  // Most keys point along (1, 0): the anchor does too. Slot 3 points away
  // (negative cosine), slot 1 is orthogonal; the newest slot is always kept.
  const Rows kv(2, {1, 0, 0, 1, 2, 0.1f, -1, 0.2f, 1, 0.05f, 3, 0, 1, -0.1f, 1, 0}, std::vector<float>(16));
  TestStream s(8);
  s.state.kv = &kv;
  EXPECT_EQ(Kept(*p, s.state), (Slots{1, 3, 7}));
}

// The kept set against the rule computed here in double: anchor = mean of the
// unit keys, score = -cos(key, anchor), the budget - 1 best of the older
// slots (ties to the lower slot) plus the newest; at a ratio too.
TEST(KeyDiffPolicyTest, MatchesTheCosineRuleOnRandomKeys) {
  const int d = 16;
  const int64_t n = 40;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(n * d));
  for (float& x : keys) x = g(rng) + 0.7f;  // a shared direction, as real keys have
  std::vector<double> anchor(d, 0.0), score(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    double norm = 0;
    for (int c = 0; c < d; ++c) norm += static_cast<double>(keys[t * d + c]) * keys[t * d + c];
    for (int c = 0; c < d; ++c) anchor[c] += keys[t * d + c] / std::sqrt(norm) / static_cast<double>(n);
  }
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0, kn = 0, an = 0;
    for (int c = 0; c < d; ++c) {
      dot += keys[t * d + c] * anchor[c];
      kn += static_cast<double>(keys[t * d + c]) * keys[t * d + c];
      an += anchor[c] * anchor[c];
    }
    score[static_cast<size_t>(t)] = -dot / std::sqrt(kn * an);
  }
  const Rows kv(d, keys, std::vector<float>(keys.size()));
  for (const Params& params : {Params{{"budget", "10"}}, Params{{"ratio", "0.25"}}}) {
    auto p = Make("keydiff", params);
    Slots order(static_cast<size_t>(n - 1));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    Slots want(order.begin(), order.begin() + 9);
    want.push_back(n - 1);
    std::sort(want.begin(), want.end());
    TestStream s(n);
    s.state.kv = &kv;
    EXPECT_EQ(Kept(*p, s.state), want) << params.begin()->first;
  }
  ExpectErrorNames("keydiff", {{"budget", "8"}, {"ratio", "0.5"}}, "ratio");
  ExpectErrorNames("keydiff", {{"ratio", "0"}}, "ratio");
}

// --- lagkv ---

// n_sink 1, lag_size 4, 13 slots: partitions [1, 5) and [5, 9) are scored
// against the next one's per-channel range; [9, 13) and the sink score 1.
// Each partition spans [0, 1] per channel, so a row normalises to itself,
// and the row with the largest spread over its channels ranks first: slot 2
// in the first partition, slot 7 in the second.
TEST(LagKVPolicyTest, KeepsEachPartitionsMostLagRelativeRows) {
  auto p = Make("lagkv", {{"budget", "7"}, {"n_sink", "1"}, {"lag_size", "4"}});
  ASSERT_TRUE(p->NeedsKeyValues());
  auto row = [](float a, float b, float c, float e) { return std::vector<float>{a, b, c, e}; };
  std::vector<std::vector<float>> rows = {
      row(9, 9, 9, 9),                                                                       // sink
      row(.2f, .2f, .2f, .2f), row(1, 0, 1, 0), row(.3f, .3f, .3f, .3f), row(.1f, .2f, .1f, .2f),  // partition 0
      row(0, 0, 0, 0), row(1, 1, 1, 1), row(0, 1, 0, 1), row(.5f, .5f, .5f, .5f),            // partition 1
      row(0, 0, 0, 0), row(1, 1, 1, 1), row(.5f, .5f, .5f, .5f), row(.2f, .2f, .2f, .2f)};   // partition 2
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const Rows kv(4, flat, flat);  // values equal to the keys
  TestStream s(13);
  s.state.kv = &kv;
  EXPECT_EQ(Kept(*p, s.state), (Slots{0, 2, 7, 9, 10, 11, 12}));
  // One partition fewer in the budget: the two scored partitions' best tie at
  // rank 3/4 and the lower slot goes first.
  auto tight = Make("lagkv", {{"budget", "6"}, {"n_sink", "1"}, {"lag_size", "4"}});
  EXPECT_EQ(Kept(*tight, s.state), (Slots{0, 2, 9, 10, 11, 12}));
}

TEST(LagKVPolicyTest, ShortStreamsKeepSinksThenTheNewest) {
  // 9 < n_sink + 2 lag_size = 10: no partition is scored.
  auto p = Make("lagkv", {{"budget", "5"}, {"n_sink", "2"}, {"lag_size", "4"}});
  const Rows kv(2, std::vector<float>(18, 1.0f), std::vector<float>(18, 1.0f));
  TestStream s(9);
  s.state.kv = &kv;
  EXPECT_EQ(Kept(*p, s.state), (Slots{0, 1, 6, 7, 8}));
  ExpectErrorNames("lagkv", {{"lag_size", "1"}}, "lag_size");
  ExpectErrorNames("lagkv", {{"n_sink", "-1"}}, "n_sink");
  ExpectErrorNames("lagkv", {{"budget", "8"}, {"ratio", "0.5"}}, "ratio");
}

// --- cur ---

// head_dim 1: k2 = [25, 1, 4, 6.25, 1, 1, 16, 1], v2 = [1, 9, 1, 1, 4, 1, 1, 1].
// With windows of 4, slot 1's product is (1 / 36.25)(9 / 12), slot 4's
// (1 / 19)(4 / 7), slot 6's (16 / 19)(1 / 7): the order of the non-sink,
// non-newest slots is 6, 4, 1, 3, 2, 5.
TEST(CurPolicyTest, KeepsTheHighestLocalLeverageProducts) {
  const Rows kv(1, {5, 1, 2, 2.5f, 1, 1, 4, 1}, {1, 3, 1, 1, 2, 1, 1, 1});
  TestStream s(8);
  s.state.kv = &kv;
  const Params local = {{"num_sinks", "1"}, {"local_window", "4"}};
  auto with = [&](Params p, const std::string& budget) {
    p["budget"] = budget;
    return Make("cur", p);
  };
  ASSERT_TRUE(with(local, "4")->NeedsKeyValues());
  EXPECT_EQ(Kept(*with(local, "4"), s.state), (Slots{0, 4, 6, 7}));
  EXPECT_EQ(Kept(*with(local, "5"), s.state), (Slots{0, 1, 4, 6, 7}));
  // Without windows or sinks, one side alone: the largest squared norms.
  EXPECT_EQ(Kept(*with({{"num_sinks", "0"}, {"local_window", "0"}, {"leverage", "key"}}, "3"), s.state),
            (Slots{0, 6, 7}));
  EXPECT_EQ(Kept(*with({{"num_sinks", "0"}, {"local_window", "0"}, {"leverage", "value"}}, "3"), s.state),
            (Slots{1, 4, 7}));
  // kv_avg over windows: slot 6's (16 / 19 + 1 / 7) / 2, then slot 1's (1 / 36.25 + 9 / 12) / 2
  // (slot 4's product came second, its average third).
  EXPECT_EQ(Kept(*with({{"num_sinks", "1"}, {"local_window", "4"}, {"leverage", "kv_avg"}}, "4"), s.state),
            (Slots{0, 1, 6, 7}));
  ExpectErrorNames("cur", {{"leverage", "svd"}}, "leverage");
  ExpectErrorNames("cur", {{"local_window", "-1"}}, "local_window");
}

// --- chunkkv ---

// 14 slots in chunks of 4: [0, 4) scores 0.1, [4, 8) 0.9, [8, 12) 0.5 and
// the newest chunk [12, 14). The newest chunk stays, then whole chunks by
// their mean score while they fit the budget.
TEST(ChunkKVPolicyTest, KeepsWholeChunksByTheScorersMean) {
  std::vector<float> scores = {.1f, .1f, .1f, .1f, .8f, 1, .9f, .9f, .5f, .4f, .6f, .5f, 0, 0};
  TestStream s(14, scores);
  auto chunk = [](const std::string& score, const std::string& budget) {
    return Make("chunkkv", {{"score", score}, {"chunk_length", "4"}, {"budget", budget}});
  };
  ASSERT_TRUE(chunk("h2o", "8")->NeedsAttentionScores());
  EXPECT_EQ(Kept(*chunk("h2o", "8"), s.state), (Slots{4, 5, 6, 7, 12, 13}));
  EXPECT_EQ(Kept(*chunk("h2o", "10"), s.state), (Slots{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(Kept(*chunk("h2o", "9"), s.state), (Slots{4, 5, 6, 7, 12, 13}));  // a chunk does not fit in 3 slots
  // key-norm ranks by the lowest score (its norms): the first chunk.
  ASSERT_TRUE(chunk("key-norm", "8")->NeedsKeyNorms());
  EXPECT_EQ(Kept(*chunk("key-norm", "8"), s.state), (Slots{0, 1, 2, 3, 12, 13}));
  // Equal means: the earlier chunk.
  TestStream flat(14, std::vector<float>(14, 1.0f));
  EXPECT_EQ(Kept(*chunk("h2o", "6"), flat.state), (Slots{0, 1, 2, 3, 12, 13}));
  // A budget under the newest chunk keeps its newest slots.
  auto wide = Make("chunkkv", {{"score", "h2o"}, {"chunk_length", "8"}, {"budget", "4"}});
  EXPECT_EQ(Kept(*wide, s.state), (Slots{10, 11, 12, 13}));
  // A key-reading scorer is asked through its needs (keydiff by default).
  EXPECT_TRUE(Make("chunkkv", {{"budget", "8"}})->NeedsKeyValues());
  ExpectErrorNames("chunkkv", {{"score", "snapkv"}}, "score");
  ExpectErrorNames("chunkkv", {{"chunk_length", "0"}}, "chunk_length");
}

}  // namespace
}  // namespace kvlab
