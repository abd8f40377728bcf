#include "core/serve/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace kvlab {
namespace {

UserClass Background() {
  UserClass uc;
  uc.name = "background";
  uc.count = 400;
  uc.arrival_rate = 0.05;
  uc.turns.kind = Distribution::Kind::kUniform;
  uc.turns.min = 1;
  uc.turns.max = 4;
  uc.user_tokens.kind = Distribution::Kind::kLogNormal;
  uc.user_tokens.median = 300;
  uc.user_tokens.sigma = 1.0;
  uc.user_tokens.min = 16;
  uc.user_tokens.max = 4000;
  uc.output_tokens.kind = Distribution::Kind::kPareto;
  uc.output_tokens.alpha = 1.5;
  uc.output_tokens.scale = 50;
  uc.output_tokens.max = 2000;
  uc.think_steps.kind = Distribution::Kind::kExponential;
  uc.think_steps.mean = 100;
  uc.system_tokens = 32;
  return uc;
}

TEST(WorkloadTest, SameSeedSameWorkload) {
  WorkloadSpec spec;
  spec.seed = 7;
  spec.classes = {Background()};
  Workload a, b, c;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &a).ok());
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &b).ok());
  spec.seed = 8;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &c).ok());
  ASSERT_EQ(a.conversations.size(), 400u);
  bool differs = false;
  for (size_t i = 0; i < a.conversations.size(); ++i) {
    const Conversation& x = a.conversations[i];
    const Conversation& y = b.conversations[i];
    ASSERT_EQ(x.arrival, y.arrival);
    ASSERT_EQ(x.turns.size(), y.turns.size());
    for (size_t k = 0; k < x.turns.size(); ++k) {
      ASSERT_EQ(x.turns[k].user, y.turns[k].user);
      ASSERT_EQ(x.turns[k].max_new_tokens, y.turns[k].max_new_tokens);
    }
    differs = differs || x.arrival != c.conversations[i].arrival;
  }
  EXPECT_TRUE(differs);
}

TEST(WorkloadTest, LengthsAreLongTailedAndClipped) {
  WorkloadSpec spec;
  spec.seed = 3;
  spec.classes = {Background()};
  spec.classes[0].count = 3000;
  Workload w;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &w).ok());
  std::vector<double> user, out;
  for (const Conversation& c : w.conversations) {
    ASSERT_GE(c.turns.size(), 1u);
    ASSERT_LE(c.turns.size(), 4u);
    for (const ChatTurn& t : c.turns) {
      user.push_back(static_cast<double>(t.user.size()));
      out.push_back(static_cast<double>(t.max_new_tokens));
      for (int32_t id : t.user) ASSERT_TRUE(id >= 0 && id < 1000);
    }
  }
  std::sort(user.begin(), user.end());
  std::sort(out.begin(), out.end());
  EXPECT_GE(user.front(), 16);
  EXPECT_LE(user.back(), 4000);
  EXPECT_NEAR(user[user.size() / 2], 300, 30);  // the lognormal's median
  EXPECT_GT(user.back(), 10 * user[user.size() / 2]);  // and its long tail
  EXPECT_GE(out.front(), 50);
  EXPECT_LE(out.back(), 2000);
  EXPECT_NEAR(out[out.size() / 2], 50 * std::pow(2.0, 1 / 1.5), 8);  // Pareto median: scale * 2^(1/alpha)
}

TEST(WorkloadTest, PoissonArrivalsAtTheRequestedRate) {
  WorkloadSpec spec;
  spec.seed = 11;
  spec.classes = {Background()};
  spec.classes[0].count = 5000;
  spec.classes[0].start = 100;
  Workload w;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &w).ok());
  EXPECT_GE(w.conversations.front().arrival, 100);
  for (size_t i = 1; i < w.conversations.size(); ++i) {
    ASSERT_LE(w.conversations[i - 1].arrival, w.conversations[i].arrival);
  }
  const double mean_gap = (w.conversations.back().arrival - 100) / 5000.0;
  EXPECT_NEAR(mean_gap, 1 / 0.05, 1.0);
}

TEST(WorkloadTest, AddingUsersToOneClassLeavesTheOthersAlone) {
  UserClass chat;
  chat.name = "long-chat";
  chat.turns = Distribution::Fixed(5);
  chat.user_tokens.kind = Distribution::Kind::kUniform;
  chat.user_tokens.min = 10;
  chat.user_tokens.max = 500;
  WorkloadSpec spec;
  spec.seed = 5;
  spec.classes = {chat, Background()};
  Workload a, b;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &a).ok());
  spec.classes[1].count = 800;
  ASSERT_TRUE(GenerateWorkload(spec, 1000, &b).ok());
  auto find_chat = [](const Workload& w) {
    for (const Conversation& c : w.conversations) {
      if (c.user_class == 0) return &c;
    }
    return static_cast<const Conversation*>(nullptr);
  };
  const Conversation* x = find_chat(a);
  const Conversation* y = find_chat(b);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(x->turns.size(), 5u);
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(x->turns[k].user, y->turns[k].user);
}

// One class of fixed-length chats: a 3-token system prompt, then 3 turns of
// 4 user tokens and 2 answer tokens.
WorkloadSpec FixedChatSpec() {
  UserClass uc;
  uc.turns = Distribution::Fixed(3);
  uc.user_tokens = Distribution::Fixed(4);
  uc.output_tokens = Distribution::Fixed(2);
  uc.system_tokens = 3;
  WorkloadSpec spec;
  spec.classes = {uc};
  return spec;
}

TEST(WorkloadTest, EveryTurnResendsTheWholeHistory) {
  Workload w;
  ASSERT_TRUE(GenerateWorkload(FixedChatSpec(), 50, &w).ok());
  const Conversation& c = w.conversations[0];
  ChatSession s(&c, 0);
  std::vector<int32_t> prompt, expect;
  int64_t max_new = 0;
  bool truncated = true;
  s.NextRequest(&prompt, &max_new, &truncated);
  expect = *c.system;
  expect.insert(expect.end(), c.turns[0].user.begin(), c.turns[0].user.end());
  EXPECT_EQ(prompt, expect);
  EXPECT_EQ(max_new, 2);
  EXPECT_FALSE(truncated);
  s.OnAnswer({41, 42});
  s.NextRequest(&prompt, &max_new, &truncated);
  expect.insert(expect.end(), {41, 42});
  expect.insert(expect.end(), c.turns[1].user.begin(), c.turns[1].user.end());
  EXPECT_EQ(prompt, expect);  // system + user 1 + answer 1 + user 2: 3 + 4 + 2 + 4
  EXPECT_EQ(prompt.size(), 13u);
  s.OnAnswer({43, 44});
  EXPECT_EQ(s.history_tokens(), 12);
  EXPECT_FALSE(s.done());
  s.OnAnswer({45, 46});
  EXPECT_TRUE(s.done());
}

TEST(WorkloadTest, ContextCapDropsTheOldestHistoryAndKeepsTheSystemPrompt) {
  Workload w;
  ASSERT_TRUE(GenerateWorkload(FixedChatSpec(), 50, &w).ok());
  const Conversation& c = w.conversations[0];
  ChatSession s(&c, /*max_context=*/12);
  s.OnAnswer({41, 42});
  s.OnAnswer({43, 44});
  std::vector<int32_t> prompt;
  int64_t max_new = 0;
  bool truncated = false;
  s.NextRequest(&prompt, &max_new, &truncated);
  // 12 = 2 answer tokens + 3 system + the last 7 of (12 history + 4 user).
  EXPECT_TRUE(truncated);
  EXPECT_EQ(max_new, 2);
  ASSERT_EQ(prompt.size(), 10u);
  EXPECT_EQ(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3), *c.system);
  EXPECT_EQ(prompt[3], c.turns[1].user[3]);  // history [u0, 41, 42, u1, 43, 44] from its 10th token
  EXPECT_EQ(prompt[4], 43);
  EXPECT_EQ(prompt[5], 44);
  EXPECT_EQ(std::vector<int32_t>(prompt.begin() + 6, prompt.end()), c.turns[2].user);
}

TEST(WorkloadTest, BadDistributionsNameTheField) {
  Distribution d;
  d.kind = Distribution::Kind::kLogNormal;
  d.median = 0;
  Status s = d.Validate("cfg.toml:3:1: 'user_tokens'");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cfg.toml:3:1: 'user_tokens': lognormal needs median > 0"), std::string::npos) << s.message();
  d.median = 10;
  d.min = 50;
  d.max = 20;
  EXPECT_NE(d.Validate("x").message().find("'max' (20) is below 'min' (50)"), std::string::npos);
  WorkloadSpec spec;
  UserClass uc;
  uc.arrival_rate = -1;
  spec.classes = {uc};
  Workload w;
  EXPECT_FALSE(GenerateWorkload(spec, 10, &w).ok());
}

}  // namespace
}  // namespace kvlab
