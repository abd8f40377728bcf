// quest in the engine on a small random-weight model: the cache stays whole
// (pools and bytes in use as full's), decode steps read fewer K/V bytes as k
// falls, a budget of every page gives full's logits bit for bit (on the
// optimised and the reference attention), the same over KIVI's sealed
// groups, and what the read path cannot take is refused naming quest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"

namespace kvlab {
namespace {

std::string ModelDir() {
  static const std::string dir = [] {
    ModelConfig c;
    c.name = "tiny-quest-test";
    c.vocab_size = 300;
    c.hidden_size = 128;
    c.intermediate_size = 128;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 32;
    c.max_position_embeddings = 4096;
    std::string d = ProcessTempDir() + "/" + c.name;
    std::filesystem::remove_all(d);
    EXPECT_TRUE(WriteRandomCheckpoint(c, 5, 0.08, d).ok());
    return d;
  }();
  return dir;
}

struct QuestRun {
  std::vector<float> logits;
  MemoryStats memory;
  ReadStats reads;
};

// A 300-token prompt, then 40 teacher-forced decode steps.
QuestRun TeacherForce(const std::vector<PolicySpec>& stack, const std::string& attention = "cpu") {
  EngineOptions o;
  o.model = ModelDir();
  o.max_context = 512;
  o.attention = attention;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(o, stack, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  QuestRun r;
  if (!e) return r;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 340; ++i) tokens.push_back((i * 37 + 11) % 300);
  EXPECT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> logits;
  EXPECT_TRUE(e->Forward({SeqChunk{0, std::vector<int32_t>(tokens.begin(), tokens.begin() + 300)}}, false, &logits).ok());
  for (size_t i = 300; i < tokens.size(); ++i) {
    EXPECT_TRUE(e->Forward({SeqChunk{0, {tokens[i]}}}, false, &logits).ok());
    r.logits.insert(r.logits.end(), logits[0].begin(), logits[0].end());
  }
  r.memory = e->Memory();
  r.reads = e->reads();
  return r;
}

TEST(QuestEngineTest, CacheStaysWholeAndBytesReadFallWithK) {
  const QuestRun full = TeacherForce({PolicySpec{"full", {}, "t"}});
  EXPECT_EQ(full.reads.decode_steps, 40);
  EXPECT_EQ(full.reads.kv_read_bytes, full.reads.kv_dense_bytes);
  int64_t last = full.reads.kv_read_bytes;
  for (const char* budget : {"256", "128", "64", "16"}) {
    SCOPED_TRACE(budget);
    const QuestRun q = TeacherForce({PolicySpec{"quest", {{"token_budget", budget}}, "t"}});
    EXPECT_EQ(q.memory.bytes_in_use, full.memory.bytes_in_use);
    EXPECT_EQ(q.memory.bytes_reserved, full.memory.bytes_reserved);
    EXPECT_EQ(q.reads.kv_dense_bytes, full.reads.kv_dense_bytes);
    EXPECT_LT(q.reads.kv_read_bytes, last);
    last = q.reads.kv_read_bytes;
    bool finite = true;
    for (float x : q.logits) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite);
  }
  // Per decode step at k = 4 pages of 16 (64 tokens), 3 layers (2 dense), 2 KV heads, f32? bf16 rows:
  // the dense layers read every slot, the last one 3 full pages + the recent page.
  const QuestRun q = TeacherForce({PolicySpec{"quest", {{"token_budget", "64"}}, "t"}});
  const int64_t row2 = 2 * 32 * 2;  // K and V of one slot, bf16
  int64_t want = 0;
  for (int64_t len = 301; len <= 340; ++len) {
    const int64_t in_last = (len - 1) % 16 + 1;
    want += 2 * (2 * len + (3 * 16 + in_last)) * row2;
  }
  EXPECT_EQ(q.reads.kv_read_bytes, want);
}

TEST(QuestEngineTest, EveryPageGivesFullsLogitsBitForBit) {
  for (const char* attention : {"cpu", "reference"}) {
    SCOPED_TRACE(attention);
    const QuestRun full = TeacherForce({PolicySpec{"full", {}, "t"}}, attention);
    const QuestRun q = TeacherForce({PolicySpec{"quest", {{"token_budget", "512"}, {"dense_layers", "0"}}, "t"}}, attention);
    ASSERT_EQ(q.logits.size(), full.logits.size());
    EXPECT_EQ(std::memcmp(q.logits.data(), full.logits.data(), q.logits.size() * sizeof(float)), 0);
    EXPECT_EQ(q.reads.kv_read_bytes, full.reads.kv_read_bytes);
    // A subset changes them (the rule is not a silent no-op).
    const QuestRun few = TeacherForce({PolicySpec{"quest", {{"token_budget", "32"}, {"dense_layers", "0"}}, "t"}}, attention);
    EXPECT_NE(std::memcmp(few.logits.data(), full.logits.data(), few.logits.size() * sizeof(float)), 0);
  }
}

// Quest over KIVI: 340 tokens, a 128-token residual and groups of 32, so
// decode streams hold 6 sealed groups and 5 to 10 plain blocks. The cache
// is kivi's (pools and bytes in use), a budget of every page gives kivi's
// logits bit for bit, a smaller one changes them, and the bytes read fall
// with k.
// The same over quant's int8 and fp8 blocks and ThinK's, whose sealed blocks
// are ranked by the bounds of their decoded keys kept from their seal.
TEST(QuestEngineTest, OverAnEncodingTheCacheIsItsOwnAndEveryPageGivesItsLogits) {
  for (const PolicySpec& enc : {PolicySpec{"kivi", {}, "t"}, PolicySpec{"quant", {}, "t"},
                                 PolicySpec{"quant", {{"format", "int8"}}, "t"}, PolicySpec{"think", {}, "t"}}) {
    for (const char* attention : {"cpu", "reference"}) {
      SCOPED_TRACE(enc.name + (enc.params.empty() ? "" : ":" + enc.params.begin()->second) + " " + attention);
      const QuestRun alone = TeacherForce({enc}, attention);
      const QuestRun every =
          TeacherForce({enc, PolicySpec{"quest", {{"token_budget", "512"}, {"dense_layers", "0"}}, "t"}}, attention);
      ASSERT_EQ(every.logits.size(), alone.logits.size());
      EXPECT_EQ(std::memcmp(every.logits.data(), alone.logits.data(), alone.logits.size() * sizeof(float)), 0);
      EXPECT_EQ(every.reads.kv_read_bytes, alone.reads.kv_read_bytes);
      EXPECT_EQ(every.memory.bytes_in_use, alone.memory.bytes_in_use);
      EXPECT_EQ(every.memory.bytes_reserved, alone.memory.bytes_reserved);
      const QuestRun few =
          TeacherForce({enc, PolicySpec{"quest", {{"token_budget", "64"}, {"dense_layers", "0"}}, "t"}}, attention);
      EXPECT_NE(std::memcmp(few.logits.data(), alone.logits.data(), alone.logits.size() * sizeof(float)), 0);
      bool finite = true;
      for (float x : few.logits) finite = finite && std::isfinite(x);
      EXPECT_TRUE(finite);
    }
    const QuestRun alone = TeacherForce({enc});
    EXPECT_EQ(alone.reads.decode_steps, 40);
    int64_t last = alone.reads.kv_read_bytes;
    for (const char* budget : {"256", "128", "64", "16"}) {
      SCOPED_TRACE(budget);
      const QuestRun q = TeacherForce({enc, PolicySpec{"quest", {{"token_budget", budget}}, "t"}});
      EXPECT_EQ(q.memory.bytes_in_use, alone.memory.bytes_in_use);
      EXPECT_EQ(q.reads.kv_dense_bytes, alone.reads.kv_dense_bytes);
      EXPECT_LT(q.reads.kv_read_bytes, last);
      EXPECT_GT(q.reads.bound_read_bytes, 0);
      last = q.reads.kv_read_bytes;
    }
  }
}

TEST(QuestEngineTest, RefusesWhatTheReadPathCannotTake) {
  EngineOptions o;
  o.model = ModelDir();
  o.max_context = 512;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(o, {PolicySpec{"quest", {{"token_budget", "8"}}, "t"}}, &e);
  EXPECT_NE(s.message().find("policy 'quest' parameter 'token_budget' is 8, below one page"), std::string::npos)
      << s.message();
  s = Engine::Create(o, {PolicySpec{"quest", {}, "t"}, PolicySpec{"h2o", {}, "t"}}, &e);
  EXPECT_NE(s.message().find("policy 'quest' (read) with 'h2o'"), std::string::npos) << s.message();
  // With a selection policy that keeps keys rotated, both act.
  const QuestRun both = TeacherForce({PolicySpec{"quest", {{"token_budget", "64"}}, "t"},
                                 PolicySpec{"sink", {{"positions", "original"}, {"window", "200"}}, "t"}});
  EXPECT_LT(both.reads.kv_read_bytes, both.reads.kv_dense_bytes);
}

}  // namespace
}  // namespace kvlab
