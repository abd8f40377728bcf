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

// Every policy that sizes what it keeps by `budget` or `ratio`.
std::vector<const PolicyInfo*> BudgetOrRatioPolicies() {
  std::vector<const PolicyInfo*> out;
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    int both = 0;
    for (const ParamSpec& p : info.params) both += (p.name == "budget" || p.name == "ratio") ? 1 : 0;
    if (both == 2) out.push_back(&info);
  }
  return out;
}

TEST(PolicyRegistryTest, RatioAloneSetsTheBudget) {
  // snapkv's budget defaults to 1,024 slots: a ratio given alone replaces it.
  std::unique_ptr<KVPolicy> snap;
  ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"snapkv", {{"ratio", "0.25"}}, "t"}, &snap).ok());
  EXPECT_EQ(snap->params().GetInt("budget"), 0);
  EXPECT_EQ(snap->KeptSlotsBound(8192), 2048 + snap->params().GetInt("every") - 1);

  const std::vector<const PolicyInfo*> policies = BudgetOrRatioPolicies();
  ASSERT_GE(policies.size(), 7u);  // h2o, random, tova, key-norm, snapkv, pyramidkv, adakv
  for (const PolicyInfo* info : policies) {
    SCOPED_TRACE(info->name);
    std::unique_ptr<KVPolicy> by_ratio, by_budget, zero_and_ratio;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info->name, {{"ratio", "0.25"}}, "t"}, &by_ratio).ok());
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info->name, {{"budget", "2048"}}, "t"}, &by_budget).ok());
    ASSERT_TRUE(PolicyRegistry::Global()
                    .Create(PolicySpec{info->name, {{"budget", "0"}, {"ratio", "0.25"}}, "t"}, &zero_and_ratio)
                    .ok());
    EXPECT_EQ(by_ratio->params().GetInt("budget"), 0);
    // At 8,192 tokens a quarter is the 2,048 slots of the explicit budget, at
    // 4,096 half as many: the ratio is what sizes the kept set.
    EXPECT_EQ(by_ratio->KeptSlotsBoundInLayer(8192, 1), by_budget->KeptSlotsBoundInLayer(8192, 1));
    EXPECT_LT(by_ratio->KeptSlotsBoundInLayer(4096, 1), by_budget->KeptSlotsBoundInLayer(4096, 1));
    EXPECT_EQ(zero_and_ratio->params().ToString(), by_ratio->params().ToString());
  }
}

TEST(PolicyRegistryTest, BudgetBesideRatioIsOneErrorNamingBoth) {
  for (const PolicyInfo* info : BudgetOrRatioPolicies()) {
    SCOPED_TRACE(info->name);
    std::unique_ptr<KVPolicy> p;
    const Status s = PolicyRegistry::Global().Create(
        PolicySpec{info->name, {{"budget", "256"}, {"ratio", "0.25"}}, "sweep.toml:7:1"}, &p);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(p, nullptr);
    EXPECT_NE(s.message().find("sweep.toml:7:1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'budget' (256)"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'ratio' (0.25)"), std::string::npos) << s.message();
  }
}

TEST(ParsePolicyStringTest, NameAndParameters) {
  PolicySpec spec;
  ASSERT_TRUE(ParsePolicyString("kivi:bits=2,group=64", "--policy", &spec).ok());
  EXPECT_EQ(spec.name, "kivi");
  EXPECT_EQ(spec.params, (std::map<std::string, std::string>{{"bits", "2"}, {"group", "64"}}));
  EXPECT_EQ(spec.source, "--policy kivi:bits=2,group=64");
  ASSERT_TRUE(ParsePolicyString("full", "--policy", &spec).ok());
  EXPECT_EQ(spec.name, "full");
  EXPECT_TRUE(spec.params.empty());
}

TEST(ParsePolicyStringTest, EachMistakeIsOneClearError) {
  PolicySpec spec;
  Status s = ParsePolicyString("kivi:bits=2,bits=4", "--policy", &spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameter 'bits' is given twice"), std::string::npos) << s.message();
  s = ParsePolicyString("kivi:bits", "--policy", &spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("got 'bits'"), std::string::npos) << s.message();
  s = ParsePolicyString(":bits=2", "--policy", &spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the name is empty"), std::string::npos) << s.message();
  s = ParsePolicyString("h2o:budget=64,", "--policy", &spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("got ''"), std::string::npos) << s.message();
}

TEST(ParsePolicyStringTest, LongTextIsQuotedByItsStart) {
  const std::string name(100000, 'x');
  PolicySpec spec;
  ASSERT_TRUE(ParsePolicyString(name, "--policy", &spec).ok());
  std::unique_ptr<KVPolicy> p;
  const Status s = PolicyRegistry::Global().Create(spec, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown policy"), std::string::npos);
  EXPECT_LT(s.message().size(), 1000u) << "the 100,000-byte name is quoted by its first bytes";
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

// Ranges and allowed values are declared in the ParamSpec and checked by the
// registry: one message naming where, the policy, the parameter, the value
// and the valid range, and `create` never sees a value outside them.
TEST(PolicyRegistryTest, RangesAreCheckedBeforeCreate) {
  PolicyRegistry r;
  PolicyInfo info;
  info.name = "probe";
  info.concerns = kConcernSelection;
  info.params = {{"n", ParamSpec::Type::kInt, "4", "", {}, ParamRange::AtLeast(1)},
                 {"frac", ParamSpec::Type::kFloat, "0.5", "", {}, ParamRange::OpenClosed(0, 1)},
                 {"share", ParamSpec::Type::kFloat, "0.5", "", {}, ParamRange::Closed(0, 1)},
                 {"big", ParamSpec::Type::kInt, "2", "", {}, ParamRange::Closed(1, 1 << 20)},
                 {"bits", ParamSpec::Type::kInt, "2", "", {"2", "4"}}};
  auto created = std::make_shared<int>(0);
  info.create = [created](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    ++*created;
    out->reset(new ProbePolicy(std::move(p)));
    return Status::OK();
  };
  r.Register(info);
  std::unique_ptr<KVPolicy> p;
  Status s = r.Create(PolicySpec{"probe", {{"n", "0"}}, "x.toml:2:1"}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "x.toml:2:1: policy 'probe' parameter 'n' must be >= 1, got 0");
  s = r.Create(PolicySpec{"probe", {{"frac", "0"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'frac' must be in (0, 1], got 0");
  s = r.Create(PolicySpec{"probe", {{"frac", "1.0001"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'frac' must be in (0, 1], got 1.0001");
  s = r.Create(PolicySpec{"probe", {{"share", "-0.01"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'share' must be in [0, 1], got -0.01");
  s = r.Create(PolicySpec{"probe", {{"big", "99999999999"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'big' must be in [1, 1048576], got 99999999999");
  s = r.Create(PolicySpec{"probe", {{"bits", "3"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'bits' expects one of 2, 4, got '3'");
  s = r.Create(PolicySpec{"probe", {{"bits", "two"}}, "t"}, &p);
  EXPECT_EQ(s.message(), "t: policy 'probe' parameter 'bits' expects one of 2, 4, got 'two'");
  EXPECT_EQ(*created, 0) << "create saw a value outside its ParamSpec";
  // The ends themselves, as declared open or closed; ints by canonical value.
  ASSERT_TRUE(r.Create(PolicySpec{"probe", {{"n", "1"}, {"frac", "1"}, {"share", "0"}, {"bits", "+4"}}, "t"}, &p).ok());
  EXPECT_EQ(p->params().GetString("bits"), "4");
  ASSERT_TRUE(r.Create(PolicySpec{"probe", {{"share", "1"}, {"big", "1048576"}}, "t"}, &p).ok());
  EXPECT_EQ(*created, 2);

  EXPECT_EQ(ParamRange::Above(0).ToString(), "> 0");
  EXPECT_FALSE(ParamRange::Above(0).Contains(0));
  EXPECT_TRUE(ParamRange::Above(0).Contains(1e-9));
  EXPECT_EQ(ParamRange().ToString(), "");
  EXPECT_TRUE(ParamRange().Contains(-1e300));
  EXPECT_EQ(ParamRange::Closed(0.25, 0.75).ToString(), "in [0.25, 0.75]");
}

// The built-in policies' ranges reach their messages (each range declared
// once in the policy's ParamSpec, not checked by hand in its create function).
TEST(PolicyRegistryTest, BuiltinRangeMessages) {
  const std::vector<std::pair<PolicySpec, std::string>> cases = {
      {{"h2o", {{"ratio", "1.5"}}, "t"}, "t: policy 'h2o' parameter 'ratio' must be in (0, 1], got 1.5"},
      {{"h2o", {{"heavy_fraction", "-0.1"}}, "t"}, "t: policy 'h2o' parameter 'heavy_fraction' must be in [0, 1], got -0.1"},
      {{"h2o", {{"budget", "-1"}}, "t"}, "t: policy 'h2o' parameter 'budget' must be >= 0, got -1"},
      {{"random", {{"ratio", "0"}}, "t"}, "t: policy 'random' parameter 'ratio' must be in (0, 1], got 0"},
      {{"sink", {{"window", "0"}}, "t"}, "t: policy 'sink' parameter 'window' must be >= 1, got 0"},
      {{"sink", {{"n_sink", "-1"}}, "t"}, "t: policy 'sink' parameter 'n_sink' must be >= 0, got -1"},
      {{"window", {{"window", "-1"}}, "t"}, "t: policy 'window' parameter 'window' must be >= 1, got -1"},
      {{"gqa-reuse", {{"group", "0"}}, "t"}, "t: policy 'gqa-reuse' parameter 'group' must be in [1, 1048576], got 0"},
      {{"kivi", {{"bits", "3"}}, "t"}, "t: policy 'kivi' parameter 'bits' expects one of 2, 4, got '3'"},
      {{"kivi", {{"group", "0"}}, "t"}, "t: policy 'kivi' parameter 'group' must be >= 1, got 0"},
      {{"kivi", {{"residual", "-1"}}, "t"}, "t: policy 'kivi' parameter 'residual' must be >= 0, got -1"},
      {{"offload", {{"keep_recent", "-2"}}, "t"}, "t: policy 'offload' parameter 'keep_recent' must be >= 0, got -2"},
  };
  for (const auto& [spec, message] : cases) {
    std::unique_ptr<KVPolicy> p;
    const Status s = PolicyRegistry::Global().Create(spec, &p);
    EXPECT_EQ(s.message(), message);
  }
}

// kivi's `attention`: a bad value is rejected naming the parameter; int8 only
// sets the kernels' KernelOptions::int8_attention (the same encoding, format
// and block bytes as exact).
TEST(PolicyRegistryTest, KiviAttentionParameter) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{"kivi", {{"attention", "int4"}}, "t"}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'attention'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("one of exact, int8"), std::string::npos) << s.message();

  KvEncoding exact, int8;
  int64_t residual = -1;
  ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"kivi", {}, "t"}, &p).ok());
  EXPECT_EQ(p->params().GetString("attention"), "exact");
  ASSERT_TRUE(p->SealedEncoding(128, 16, &exact, &residual));
  EXPECT_FALSE(p->AttentionKernelOptions().int8_attention);
  ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"kivi", {{"attention", "exact"}}, "t"}, &p).ok());
  ASSERT_TRUE(p->SealedEncoding(128, 16, &exact, &residual));
  EXPECT_FALSE(p->AttentionKernelOptions().int8_attention);
  ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"kivi", {{"attention", "int8"}}, "t"}, &p).ok());
  ASSERT_TRUE(p->SealedEncoding(128, 16, &int8, &residual));
  EXPECT_TRUE(p->AttentionKernelOptions().int8_attention);
  EXPECT_TRUE(p->CheckShape(8, 128, 16).ok());
  EXPECT_EQ(int8.Validate(), "");
  EXPECT_EQ(int8.BlockBytes(), exact.BlockBytes());
  EXPECT_EQ(int8.kind, exact.kind);
  EXPECT_EQ(int8.bits, exact.bits);
  EXPECT_EQ(int8.group, exact.group);
  EXPECT_EQ(int8.tokens_per_block, exact.tokens_per_block);
  // Shapes the int8 kernel is not written for: one error naming the parameter.
  s = p->CheckShape(8, 64, 16);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'attention'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("head_dim 64"), std::string::npos) << s.message();
  ASSERT_TRUE(
      PolicyRegistry::Global().Create(PolicySpec{"kivi", {{"attention", "int8"}, {"bits", "4"}}, "t"}, &p).ok());
  s = p->CheckShape(8, 128, 16);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bits 4"), std::string::npos) << s.message();
}

// kivi's attention = "int8" changes only the kernel's arithmetic: the same
// encoding, bytes and layout (an exact block and an int8-attention block
// encode identically); the stack, which results record, tells them apart and
// passes the option on (PolicyStack::AttentionKernelOptions).
TEST(PolicyStackTest, KiviInt8AttentionKeepsTheFormat) {
  for (const char* bits : {"2", "4"}) {
    PolicyStack exact, int8;
    ASSERT_TRUE(PolicyStack::Create({PolicySpec{"kivi", {{"bits", bits}}, "t"}}, &exact).ok());
    ASSERT_TRUE(PolicyStack::Create({PolicySpec{"kivi", {{"bits", bits}, {"attention", "int8"}}, "t"}}, &int8).ok());
    KvEncoding e, a;
    int64_t re = -1, ra = -1;
    ASSERT_TRUE(exact.SealedEncoding(128, 16, &e, &re));
    ASSERT_TRUE(int8.SealedEncoding(128, 16, &a, &ra));
    ASSERT_EQ(a.Validate(), "");
    EXPECT_EQ(re, ra);
    EXPECT_EQ(a.BlockBytes(), e.BlockBytes());
    EXPECT_EQ(a.CodeBytes(), e.CodeBytes());
    EXPECT_EQ(a.NumKeyParams(), e.NumKeyParams());
    EXPECT_EQ(a.NumValueParams(), e.NumValueParams());
    EXPECT_EQ(a.Describe(), e.Describe());
    EXPECT_NE(int8.Describe(), exact.Describe());
    EXPECT_FALSE(exact.AttentionKernelOptions().int8_attention);
    EXPECT_TRUE(int8.AttentionKernelOptions().int8_attention);
    std::vector<float> k(32 * 128), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = static_cast<float>((i * 37) % 101) / 10.0f - 5.0f + (i % 7 == 0 ? 8.0f : 0.0f);
      v[i] = static_cast<float>((i * 53) % 97) / 10.0f - 4.8f;
    }
    std::vector<uint8_t> be(static_cast<size_t>(e.BlockBytes())), ba(be.size());
    EncodeKvBlock(e, k.data(), v.data(), be.data());
    EncodeKvBlock(a, k.data(), v.data(), ba.data());
    EXPECT_EQ(be, ba);
  }
}

// A kivi group past int's range must not wrap to a valid one (2^32 + 32 -> 32).
TEST(PolicyRegistryTest, KiviGroupPastIntIsAnError) {
  std::unique_ptr<KVPolicy> p;
  ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{"kivi", {{"group", "4294967328"}}, "t"}, &p).ok());
  const Status s = p->CheckShape(8, 128, 16);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "kivi: 'group' is 4294967328, more than 16777216 (kvlab's limit)");
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
      // Defaults skip the registry's check, so each must pass it: in range,
      // among the choices, already canonical ("" is a string's "none").
      if (ps.type == ParamSpec::Type::kString && ps.default_value.empty()) continue;
      std::string canon;
      const Status st = CheckParamValue(info.name, ps, ps.default_value, &canon);
      EXPECT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(canon, ps.default_value) << ps.name;
    }
    if (!(p->Concerns() & kConcernHeadSharing)) {
      EXPECT_EQ(p->StoredKvHeads(8), 8);
    }
    if (!(p->Concerns() & kConcernRepresentation)) {
      EXPECT_EQ(p->StorageDType(DType::kF16), DType::kF16);
      EXPECT_FALSE(p->AttentionKernelOptions().int8_attention) << "kernel options belong to a representation";
    }
    if (!(p->Concerns() & kConcernSelection)) {
      std::vector<int64_t> keep;
      StreamState s;
      s.num_tokens = 100;
      EXPECT_FALSE(p->SelectSlots(s, &keep));
      // The stack asks only its selection policy for KeysBeforeRope.
      EXPECT_FALSE(p->KeysBeforeRope()) << "KeysBeforeRope outside the selection concern is ignored by the stack";
    }
    if (!(p->Concerns() & kConcernRead)) {
      std::vector<int32_t> blocks;
      StreamReadState r;
      r.num_blocks = 100;
      EXPECT_FALSE(p->SelectReadBlocks(r, &blocks));
      EXPECT_FALSE(p->NeedsBlockKeyBounds()) << "block key bounds are a read policy's";
    }
  }
}

// Conformance of every registered read policy with its default params on a
// stream of 5,000 blocks with random key bounds and queries, at a layer past
// any default's dense layers: it reads fewer blocks than the stream holds
// (no silent no-op), a strictly increasing list within range that ends with
// the last block (the one holding the step's token), deterministically.
TEST(PolicyConformanceTest, EveryReadPolicyOnALongStream) {
  const int64_t nb = 5000;
  const int d = 64, group = 4;
  std::vector<float> lo(static_cast<size_t>(nb * d)), hi(lo.size()), q(static_cast<size_t>(group * d));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
  };
  for (size_t i = 0; i < lo.size(); ++i) {
    lo[i] = next();
    hi[i] = lo[i] + std::abs(next());
  }
  for (float& v : q) v = next();
  int checked = 0;
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    if (!(info.concerns & kConcernRead)) continue;
    SCOPED_TRACE(info.name);
    std::unique_ptr<KVPolicy> p, p2;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &p).ok());
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &p2).ok());
    StreamReadState r;
    r.layer = 30;
    r.num_layers = 32;
    r.block_size = 16;
    r.head_dim = d;
    r.num_blocks = nb;
    r.key_min = lo.data();
    r.key_max = hi.data();
    r.queries = q.data();
    r.num_queries = group;
    std::vector<int32_t> blocks, again = {42};
    ASSERT_TRUE(p->SelectReadBlocks(r, &blocks)) << "a read policy that reads everything of a long stream";
    ASSERT_FALSE(blocks.empty());
    EXPECT_LT(static_cast<int64_t>(blocks.size()), nb);
    EXPECT_EQ(blocks.back(), nb - 1) << "the block holding the step's token must be read";
    EXPECT_GE(blocks.front(), 0);
    for (size_t i = 1; i < blocks.size(); ++i) EXPECT_LT(blocks[i - 1], blocks[i]);
    ASSERT_TRUE(p2->SelectReadBlocks(r, &again));
    EXPECT_EQ(again, blocks) << "not deterministic, or appended to";
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// A stream of n slots as core hands it over: positions 0..n-1, seeded random
// scores (only when the policy asked for them), a sequence of n tokens.
struct ConformanceStream {
  std::vector<int32_t> positions;
  std::vector<float> score;
  StreamState state;
  ConformanceStream(int64_t n, bool with_scores, int layer, int kv_head) {
    uint64_t x = 0x243F6A8885A308D3ull ^ static_cast<uint64_t>(layer * 131 + kv_head);
    for (int64_t i = 0; i < n; ++i) {
      positions.push_back(static_cast<int32_t>(i));
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
      score.push_back(static_cast<float>(x >> 40) / static_cast<float>(1 << 24));
    }
    state.layer = layer;
    state.kv_head = kv_head;
    state.num_tokens = n;
    state.positions = positions.data();
    state.score = with_scores ? score.data() : nullptr;  // a policy must not read scores it did not ask for
    state.seq_length = n;
  }
  // The stream after core compacts it to `keep` (the sequence length stays).
  ConformanceStream(const ConformanceStream& from, const std::vector<int64_t>& keep) : state(from.state) {
    for (int64_t k : keep) {
      positions.push_back(from.positions[static_cast<size_t>(k)]);
      score.push_back(from.score[static_cast<size_t>(k)]);
    }
    state.num_tokens = static_cast<int64_t>(keep.size());
    state.positions = positions.data();
    state.score = from.state.score ? score.data() : nullptr;
  }
};

// Conformance of every registered selection policy with its default params on
// a stream longer than any default budget: the kept set is strictly
// increasing and in range, non-empty, holds the token just written, drops
// something (no silent no-op), is deterministic, and is within the policy's
// own budget: selecting again on the compacted stream returns false.
TEST(PolicyConformanceTest, EverySelectionPolicyOnALongStream) {
  const int64_t n = 5000;
  int checked = 0;
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    if (!(info.concerns & kConcernSelection)) continue;
    SCOPED_TRACE(info.name);
    ++checked;
    std::unique_ptr<KVPolicy> p;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &p).ok());
    for (auto [layer, head] : std::vector<std::pair<int, int>>{{0, 0}, {5, 3}}) {
      SCOPED_TRACE("layer " + std::to_string(layer) + " head " + std::to_string(head));
      ConformanceStream s(n, p->NeedsAttentionScores(), layer, head);
      std::vector<int64_t> keep;
      ASSERT_TRUE(p->SelectSlots(s.state, &keep)) << "keeps all 5000 slots with default params: a silent no-op";
      ASSERT_FALSE(keep.empty()) << "keeps nothing";
      ASSERT_LT(static_cast<int64_t>(keep.size()), n) << "drops nothing";
      for (size_t i = 0; i < keep.size(); ++i) {
        ASSERT_GE(keep[i], 0);
        ASSERT_LT(keep[i], n);
        if (i > 0) {
          ASSERT_LT(keep[i - 1], keep[i]) << "not strictly increasing at " << i;
        }
      }
      EXPECT_EQ(keep.back(), n - 1) << "drops the token just written";
      // The pools are sized from KeptSlotsBound (core/cache/cache_reservation.h):
      // a choice above it would leave a later step without blocks.
      EXPECT_LE(static_cast<int64_t>(keep.size()), p->KeptSlotsBound(std::max(n, s.state.seq_length)))
          << "keeps more slots than its KeptSlotsBound";
      EXPECT_LT(p->KeptSlotsBound(1 << 20), 1 << 20) << "a selection policy that claims no bound on what it keeps";

      std::vector<int64_t> again = {-1};  // a stale vector must be overwritten, not appended to
      ASSERT_TRUE(p->SelectSlots(s.state, &again));
      EXPECT_EQ(again, keep) << "not deterministic";
      std::unique_ptr<KVPolicy> twin;
      ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &twin).ok());
      std::vector<int64_t> from_twin;
      ASSERT_TRUE(twin->SelectSlots(s.state, &from_twin));
      EXPECT_EQ(from_twin, keep) << "a second instance with the same params chooses differently";

      // Within budget a policy returns false: returning true with every slot
      // would make core compact for nothing, and with fewer it would mean the
      // first choice kept more than the policy's own budget.
      ConformanceStream compacted(s, keep);
      std::vector<int64_t> second;
      EXPECT_FALSE(p->SelectSlots(compacted.state, &second))
          << "kept " << keep.size() << " slots, then on those slots chose " << second.size()
          << ": the first choice was not within the policy's budget";
    }
  }
  EXPECT_GE(checked, 1) << "no selection policy registered";
}

// Conformance of every head-sharing policy with its default params: for every
// H_kv its CheckShape accepts, the stored heads divide H_kv, and for some H_kv
// fewer heads are stored (no silent no-op).
TEST(PolicyConformanceTest, EveryHeadSharingPolicy) {
  for (const PolicyInfo& info : PolicyRegistry::Global().infos()) {
    if (!(info.concerns & kConcernHeadSharing)) continue;
    SCOPED_TRACE(info.name);
    std::unique_ptr<KVPolicy> p;
    ASSERT_TRUE(PolicyRegistry::Global().Create(PolicySpec{info.name, {}, "t"}, &p).ok());
    bool shrinks = false;
    for (int h : {1, 2, 4, 8, 16, 32, 64}) {
      if (!p->CheckShape(h, 128, 16).ok()) continue;
      const int stored = p->StoredKvHeads(h);
      ASSERT_GE(stored, 1) << h;
      EXPECT_EQ(h % stored, 0) << stored << " stored heads do not divide " << h;
      shrinks = shrinks || stored < h;
    }
    EXPECT_TRUE(shrinks) << "stores every head for every H_kv: a silent no-op";
  }
}

}  // namespace
}  // namespace kvlab
