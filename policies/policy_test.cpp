// Registry and composition tests, plus conformance checks run over every
// registered policy (a new policy is picked up automatically).
#include <gtest/gtest.h>

#include "policies/registry.h"

namespace kvlab {
namespace {

TEST(PolicyRegistryTest, UnknownPolicyListsValidNames) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{"h3o", {}, "x.toml:3:1"}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.toml:3:1"), std::string::npos);
  EXPECT_NE(s.message().find("unknown policy 'h3o'"), std::string::npos);
  EXPECT_NE(s.message().find("full"), std::string::npos);
}

TEST(PolicyRegistryTest, UnknownParameterIsAnError) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{"full", {{"budget", "3"}}, "--policy"}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no parameter 'budget'"), std::string::npos);
}

// A throwaway policy registered in a private registry exercises typing.
class ProbePolicy : public KVPolicy {
 public:
  explicit ProbePolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "probe"; }
  uint32_t Concerns() const override { return kConcernSelection; }
};

TEST(PolicyRegistryTest, ParametersAreTypedDefaultedAndCanonical) {
  PolicyRegistry r;
  PolicyInfo info;
  info.name = "probe";
  info.concerns = kConcernSelection;
  info.params = {{"n", ParamSpec::Type::kInt, "4", "", {}},
                 {"frac", ParamSpec::Type::kFloat, "0.5", "", {}},
                 {"on", ParamSpec::Type::kBool, "true", "", {}},
                 {"mode", ParamSpec::Type::kString, "a", "", {"a", "b"}}};
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new ProbePolicy(std::move(p)));
    return Status::OK();
  };
  r.Register(info);
  std::unique_ptr<KVPolicy> p;
  ASSERT_TRUE(r.Create(PolicySpec{"probe", {{"n", "+7"}, {"mode", "b"}}, "t"}, &p).ok());
  EXPECT_EQ(p->params().GetInt("n"), 7);
  EXPECT_EQ(p->params().GetString("mode"), "b");
  EXPECT_DOUBLE_EQ(p->params().GetFloat("frac"), 0.5);
  EXPECT_TRUE(p->params().GetBool("on"));
  EXPECT_EQ(p->params().ToString(), "frac=0.5,mode=b,n=7,on=true");
  Status s = r.Create(PolicySpec{"probe", {{"n", "4.5"}}, "t"}, &p);
  EXPECT_NE(s.message().find("expects an integer"), std::string::npos) << s.message();
  s = r.Create(PolicySpec{"probe", {{"mode", "c"}}, "t"}, &p);
  EXPECT_NE(s.message().find("one of a, b"), std::string::npos) << s.message();
  s = r.Create(PolicySpec{"probe", {{"on", "yes"}}, "t"}, &p);
  EXPECT_FALSE(s.ok());
  s = r.Create(PolicySpec{"probe", {{"frac", "nan"}}, "t"}, &p);
  EXPECT_FALSE(s.ok());
}

TEST(PolicyStackTest, FullStandsAloneAndIsNeutral) {
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "t"}}, &stack).ok());
  EXPECT_EQ(stack.Concerns(), 0u);
  EXPECT_EQ(stack.Describe(), "full");
  EXPECT_EQ(stack.StoredKvHeads(8), 8);
  EXPECT_EQ(stack.StorageDType(DType::kBF16), DType::kBF16);
  EXPECT_FALSE(stack.NeedsAttentionScores());
  Status s = PolicyStack::Create({PolicySpec{"full", {}, "t"}, PolicySpec{"full", {}, "t"}}, &stack);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(PolicyStack::Create({}, &stack).ok());
}

// Conformance, over every registered policy: defaults build, the declared
// concerns match the registry's, only `full` claims none, and the neutral
// hooks of undeclared concerns stay neutral.
TEST(PolicyConformanceTest, EveryRegisteredPolicy) {
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    SCOPED_TRACE(info.name);
    std::unique_ptr<KVPolicy> p;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &p).ok());
    EXPECT_EQ(info.name, p->Name());
    EXPECT_EQ(info.concerns, p->Concerns());
    EXPECT_FALSE(info.summary.empty());
    EXPECT_FALSE(info.paper.empty());
    if (info.name != "full") {
      EXPECT_NE(p->Concerns(), 0u) << "a policy that does nothing";
    }
    for (const ParamSpec& ps : info.params) {
      EXPECT_FALSE(ps.help.empty()) << ps.name;
    }
    if (!(p->Concerns() & kConcernHeadSharing)) {
      EXPECT_EQ(p->StoredKvHeads(8), 8);
    }
    if (!(p->Concerns() & kConcernRepresentation)) {
      EXPECT_EQ(p->StorageDType(DType::kF16), DType::kF16);
    }
    if (!(p->Concerns() & kConcernSelection)) {
      std::vector<int64_t> keep;
      StreamState s;
      s.num_tokens = 100;
      EXPECT_FALSE(p->SelectSlots(s, &keep));
    }
  }
}

}  // namespace
}  // namespace kvlab
