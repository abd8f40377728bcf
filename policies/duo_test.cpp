// duo (policies/duo.cpp): the per-head split read from its file, on
// hand-built streams (retrieval heads keep everything, streaming heads keep
// exactly sinks + recent), the ranking by score, and every bad parameter.
#include <gtest/gtest.h>

#include <fstream>

#include "core/base/temp_dir_test_util.h"
#include "policies/duo_heads.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

std::string TempPath(const std::string& name) { return ProcessTempDir() + "/" + name; }

// A split of 3 layers x 2 heads; scores by (layer, head).
std::string WriteSplit(const std::string& name, const std::vector<double>& scores, int layers = 3, int heads = 2) {
  DuoHeadScores s;
  s.model = "test-model";
  s.num_layers = layers;
  s.num_kv_heads = heads;
  s.sinks = 4;
  s.recent = 16;
  s.samples = 2;
  s.length = 128;
  s.scores = scores;
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteDuoHeads(path, s).ok());
  return path;
}

std::unique_ptr<KVPolicy> Make(const std::map<std::string, std::string>& params, Status* st = nullptr) {
  std::unique_ptr<KVPolicy> p;
  const Status s = PolicyRegistry::Global().Create(PolicySpec{"duo", params, "t"}, &p);
  if (st != nullptr) *st = s;
  else EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

struct Stream {
  std::vector<int32_t> positions;
  StreamState state;
  Stream(int layer, int head, int64_t n) {
    for (int64_t i = 0; i < n; ++i) positions.push_back(static_cast<int32_t>(i));
    state.layer = layer;
    state.kv_head = head;
    state.num_tokens = n;
    state.positions = positions.data();
    state.seq_length = n;
  }
};

std::vector<int64_t> SinksAndRecent(int64_t n, int64_t sinks, int64_t recent) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < sinks; ++i) v.push_back(i);
  for (int64_t i = n - recent; i < n; ++i) v.push_back(i);
  return v;
}

TEST(DuoTest, SplitFromItsFileRetrievalKeepsAllStreamingKeepsSinksAndRecent) {
  // Scores: the highest are (2, 0) 0.9, (0, 1) 0.8, (1, 1) 0.5; fraction 0.5 of 6 heads = 3.
  const std::string path = WriteSplit("split-a.toml", {0.1, 0.8, 0.05, 0.5, 0.9, 0.2});
  auto p = Make({{"heads", path}, {"fraction", "0.5"}, {"sinks", "4"}, {"recent", "16"}});
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->CheckLayout(3, 2).ok());
  const std::set<std::pair<int, int>> retrieval = {{2, 0}, {0, 1}, {1, 1}};
  for (int l = 0; l < 3; ++l) {
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE("layer " + std::to_string(l) + " head " + std::to_string(h));
      for (int64_t n : {10, 20, 21, 100, 1000}) {
        Stream s(l, h, n);
        std::vector<int64_t> keep = {-7};
        const bool acts = p->SelectSlots(s.state, &keep);
        if (retrieval.count({l, h}) || n <= 20) {
          EXPECT_FALSE(acts) << n << " slots: a retrieval head, or within sinks + recent, keeps everything";
        } else {
          ASSERT_TRUE(acts) << n;
          EXPECT_EQ(keep, SinksAndRecent(n, 4, 16)) << n;
        }
      }
    }
  }
  // A larger fraction turns the next heads by score into retrieval heads: (1, 0) 0.05 stays streaming at 5/6.
  auto q = Make({{"heads", path}, {"fraction", "0.8"}, {"sinks", "4"}, {"recent", "16"}});
  std::vector<int64_t> keep;
  Stream s20(2, 1, 200), s10(1, 0, 200), s00(0, 0, 200);
  EXPECT_FALSE(q->SelectSlots(s20.state, &keep)) << "score 0.2 is 4th of 6: retrieval at 0.8 (5 heads)";
  EXPECT_FALSE(q->SelectSlots(s00.state, &keep)) << "score 0.1 is 5th of 6";
  EXPECT_TRUE(q->SelectSlots(s10.state, &keep)) << "the lowest score stays streaming";
  EXPECT_EQ(keep.size(), 20u);
  // Retrieval heads claim no bound; the pools are sized for the whole length.
  EXPECT_EQ(p->KeptSlotsBound(5000), 5000);
}

TEST(DuoTest, RetrievalMaskRanksByScoreTiesToTheLowerIndex) {
  EXPECT_EQ(DuoRetrievalMask({0.3, 0.1, 0.3, 0.2}, 0.5), (std::vector<char>{1, 0, 1, 0}));
  EXPECT_EQ(DuoRetrievalMask({0.5, 0.5, 0.5, 0.5}, 0.25), (std::vector<char>{1, 0, 0, 0}));
  EXPECT_EQ(DuoRetrievalMask({0.0, 0.9}, 1.0), (std::vector<char>{1, 1}));
  EXPECT_EQ(DuoRetrievalCount(2, 0.01), 1) << "at least one retrieval head";
  EXPECT_EQ(DuoRetrievalCount(8, 0.25), 2);
  EXPECT_EQ(DuoRetrievalCount(8, 0.5), 4);
  EXPECT_EQ(DuoRetrievalCount(256, 0.5), 128);
}

TEST(DuoTest, FileRoundTrips) {
  const std::string path = WriteSplit("split-rt.toml", {0.125, 1e-9, 3.5, 0, 2, 7});
  DuoHeadScores s;
  ASSERT_TRUE(ReadDuoHeads(path, "duo", "heads", &s).ok());
  EXPECT_EQ(s.model, "test-model");
  EXPECT_EQ(s.num_layers, 3);
  EXPECT_EQ(s.num_kv_heads, 2);
  EXPECT_EQ(s.sinks, 4);
  EXPECT_EQ(s.recent, 16);
  ASSERT_EQ(s.scores.size(), 6u);
  EXPECT_DOUBLE_EQ(s.scores[0], 0.125);
  EXPECT_NEAR(s.scores[1], 1e-9, 1e-15);
  EXPECT_DOUBLE_EQ(s.scores[2], 3.5);
}

TEST(DuoTest, ExplicitStreamingListWindowsOnlyThoseHeads) {
  auto p = Make({{"streaming", "1.0+2.1"}, {"sinks", "2"}, {"recent", "8"}});
  std::vector<int64_t> keep;
  for (int l = 0; l < 3; ++l) {
    for (int h = 0; h < 2; ++h) {
      Stream s(l, h, 50);
      const bool streaming = (l == 1 && h == 0) || (l == 2 && h == 1);
      EXPECT_EQ(p->SelectSlots(s.state, &keep), streaming) << l << "." << h;
      if (streaming) {
        EXPECT_EQ(keep, SinksAndRecent(50, 2, 8));
      }
    }
  }
  EXPECT_TRUE(p->CheckLayout(3, 2).ok());
  const Status s = p->CheckLayout(2, 2);
  EXPECT_NE(s.message().find("'streaming'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2.1"), std::string::npos) << s.message();
  // Neither file nor list: every head streaming, sink's bound.
  auto all = Make({{"sinks", "4"}, {"recent", "12"}});
  Stream s0(0, 0, 100), s9(9, 7, 100);
  EXPECT_TRUE(all->SelectSlots(s0.state, &keep));
  EXPECT_TRUE(all->SelectSlots(s9.state, &keep));
  EXPECT_EQ(all->KeptSlotsBound(5000), 16);
  EXPECT_TRUE(all->PerHeadSplit());
}

// Each bad value: one error naming the policy and the parameter (and the file).
TEST(DuoTest, BadParametersNameThePolicyTheParameterAndTheFile) {
  const std::string path = WriteSplit("split-shape.toml", {1, 2, 3, 4, 5, 6});
  auto p = Make({{"heads", path}});
  Status s = p->CheckLayout(32, 8);  // another model's shape
  ASSERT_FALSE(s.ok());
  for (const char* want : {"'duo'", "'heads'", "3 layers x 2 KV heads", "32 layers x 8", "test-model"}) {
    EXPECT_NE(s.message().find(want), std::string::npos) << want << " in: " << s.message();
  }
  EXPECT_NE(s.message().find(path), std::string::npos);
  EXPECT_FALSE(p->CheckLayout(3, 1).ok()) << "kv heads mismatch (head sharing stores fewer)";

  const std::string missing = TempPath("no-such-split.toml");
  Make({{"heads", missing}}, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'duo'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'heads'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();

  const std::vector<std::pair<std::string, std::string>> bad_files = {
      {"format = \"other\"\n", "format"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 2\nnum_kv_heads = 1\n", "'scores'"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 2\nnum_kv_heads = 1\nscores = [[1.0]]\n", "rows"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 1\nnum_kv_heads = 2\nscores = [[1.0]]\n", "row 0"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 1\nnum_kv_heads = 1\nscores = [[-1.0]]\n", ">= 0"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 1\nnum_kv_heads = 1\nscores = [[nan]]\n", "finite"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = 0\nnum_kv_heads = 1\nscores = []\n", "num_layers"},
      {"format = \"kvlab-duo-heads\"\nnum_layers = \"4\"\nnum_kv_heads = 1\n", "integer"},
      {"format = = \n", "line 1"},
  };
  for (const auto& [text, want] : bad_files) {
    const std::string bad = TempPath("split-bad.toml");
    std::ofstream(bad) << text;
    Make({{"heads", bad}}, &s);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find("policy 'duo' parameter 'heads' (" + bad + ")"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(want), std::string::npos) << want << " in: " << s.message();
  }

  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"fraction", "0"}}, "t: policy 'duo' parameter 'fraction' must be in (0, 1], got 0"},
      {{{"fraction", "1.5"}}, "t: policy 'duo' parameter 'fraction' must be in (0, 1], got 1.5"},
      {{{"recent", "0"}}, "t: policy 'duo' parameter 'recent' must be in [1, 16777216], got 0"},
      {{{"sinks", "-1"}}, "t: policy 'duo' parameter 'sinks' must be in [0, 16777216], got -1"},
      {{{"heads", path}, {"streaming", "0.0"}}, "'heads' (a split file) or 'streaming'"},
      {{{"streaming", "0.x"}}, "policy 'duo' parameter 'streaming': '0.x'"},
      {{{"streaming", "1"}}, "parameter 'streaming'"},
      {{{"streaming", "0.1+"}}, "parameter 'streaming'"},
      {{{"streaming", "99999999.0"}}, "parameter 'streaming'"},
      // A fraction picks heads of a split file only: beside a list, or alone, it would be unused.
      {{{"streaming", "0.0"}, {"fraction", "0.25"}}, "parameter 'fraction' picks the retrieval heads of a split file"},
      {{{"fraction", "0.25"}}, "without one (every head streaming) it would be unused"},
  };
  for (const auto& [params, want] : cases) {
    Make(params, &s);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
  // A window smaller than a block.
  auto tiny = Make({{"sinks", "2"}, {"recent", "5"}});
  s = tiny->CheckShape(8, 128, 16);
  EXPECT_NE(s.message().find("'sinks' + 'recent'"), std::string::npos) << s.message();
  EXPECT_TRUE(tiny->CheckShape(8, 128, 4).ok());
}

}  // namespace
}  // namespace kvlab
