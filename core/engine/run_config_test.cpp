#include "core/engine/run_config.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvlab {
namespace {

TEST(RunConfigTest, ParsesAllKeysAndPolicyStack) {
  RunConfig rc;
  Status s = ParseRunConfig(R"(
model = "small"
prompt = "hello"
max_new_tokens = 8
kv_dtype = "f16"
block_size = 1
temperature = 0.7
top_p = 0.9
seed = 3
device = "cuda"
run_blocks = 8
[[policy]]
name = "full"
)", "run.toml", &rc);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rc.engine.model, "small");
  EXPECT_EQ(rc.prompt, "hello");
  EXPECT_EQ(rc.generate.max_new_tokens, 8);
  EXPECT_EQ(rc.engine.kv_dtype, DType::kF16);
  EXPECT_EQ(rc.engine.block_size, 1);
  EXPECT_EQ(rc.engine.device, "cuda");
  EXPECT_EQ(rc.engine.run_blocks, 8);
  EXPECT_DOUBLE_EQ(rc.generate.sampling.temperature, 0.7);
  ASSERT_EQ(rc.policies.size(), 1u);
  EXPECT_EQ(rc.policies[0].name, "full");
  EXPECT_EQ(rc.policies[0].source, "run.toml:12:1");
}

TEST(RunConfigTest, DefaultsToFullPolicy) {
  RunConfig rc;
  ASSERT_TRUE(ParseRunConfig("tokens = [1, 2, 3]\n", "a.toml", &rc).ok());
  ASSERT_EQ(rc.policies.size(), 1u);
  EXPECT_EQ(rc.policies[0].name, "full");
  EXPECT_EQ(rc.tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST(RunConfigTest, PromptFileIsRelativeToTheConfigAndExcludesPrompt) {
  RunConfig rc;
  ASSERT_TRUE(ParseRunConfig("prompt_file = \"p.ids\"\n", "cfg/run.toml", &rc).ok());
  EXPECT_EQ(rc.prompt_file, "cfg/p.ids");
  ASSERT_TRUE(ParseRunConfig("prompt_file = \"/abs/p.txt\"\n", "cfg/run.toml", &rc).ok());
  EXPECT_EQ(rc.prompt_file, "/abs/p.txt");
  Status s = ParseRunConfig("prompt = \"hi\"\nprompt_file = \"p.txt\"\n", "cfg/run.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cfg/run.toml"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("prompt_file"), std::string::npos) << s.message();
}

TEST(RunConfigTest, UnknownKeyNamesFileLineColumn) {
  RunConfig rc;
  Status s = ParseRunConfig("model = \"small\"\nmax_new_tokns = 4\n", "cfg/run.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cfg/run.toml:2:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max_new_tokns"), std::string::npos);
}

TEST(RunConfigTest, MalformedTomlNamesFileLineColumn) {
  RunConfig rc;
  Status s = ParseRunConfig("model = \"small\"\nblock_size = = 3\n", "bad.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.toml:2:"), std::string::npos) << s.message();
}

TEST(RunConfigTest, TypeErrorsNameTheKey) {
  RunConfig rc;
  Status s = ParseRunConfig("block_size = \"16\"\n", "t.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.toml:1:"), std::string::npos);
  EXPECT_NE(s.message().find("'block_size' must be an integer"), std::string::npos);
  s = ParseRunConfig("kv_dtype = \"int3\"\n", "t.toml", &rc);
  EXPECT_NE(s.message().find("kv_dtype"), std::string::npos);
  s = ParseRunConfig("[[policy]]\nbudget = 3\n", "t.toml", &rc);
  EXPECT_NE(s.message().find("'name'"), std::string::npos);
}

TEST(RunConfigTest, PolicyParametersAreValidatedByTheRegistry) {
  RunConfig rc;
  ASSERT_TRUE(ParseRunConfig("[[policy]]\nname = \"full\"\nwindow = 3\n", "p.toml", &rc).ok());
  PolicyStack stack;
  Status s = PolicyStack::Create(rc.policies, &stack);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.toml:1:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'window'"), std::string::npos);
}

// A policy parameter's TOML type must be the one it declares: a quoted number
// or a float for an integer is an error naming the place, never converted.
TEST(RunConfigTest, PolicyParameterOfTheWrongTomlTypeIsAnError) {
  RunConfig rc;
  Status s = ParseRunConfig("[[policy]]\nname = \"h2o\"\nratio = \"0.25\"\n", "p.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.toml:3:9: policy 'h2o' parameter 'ratio' must be a number, got a string (0.25)"),
            std::string::npos)
      << s.message();
  s = ParseRunConfig("[[policy]]\nname = \"kivi\"\nbits = 2.0\n", "p.toml", &rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameter 'bits' must be an integer, got a float"), std::string::npos) << s.message();
  s = ParseRunConfig("[[policy]]\nname = \"offload\"\ndisk_dir = 3\n", "p.toml", &rc);
  EXPECT_NE(s.message().find("parameter 'disk_dir' must be a string, got an integer"), std::string::npos)
      << s.message();
  // An integer is a number; the declared types read as before.
  EXPECT_TRUE(ParseRunConfig("[[policy]]\nname = \"h2o\"\nratio = 1\n", "p.toml", &rc).ok());
  EXPECT_TRUE(ParseRunConfig("[[policy]]\nname = \"kivi\"\nbits = 4\n", "p.toml", &rc).ok());
}

// --set takes a TOML value, or a bare word as a string; anything else is the
// parser's error naming the --set, and a value's later errors name it too.
TEST(RunConfigTest, SetValueThatIsNotTomlIsAnErrorNamingIt) {
  toml::table root;
  Status s = ApplyTomlOverride("lengths=[", &root);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--set lengths=[: the value is not TOML"), std::string::npos) << s.message();
  EXPECT_FALSE(ApplyTomlOverride("name=a b", &root).ok());
  ASSERT_TRUE(ApplyTomlOverride("name=quick-1", &root).ok());
  EXPECT_EQ(root["name"].value<std::string>(), "quick-1");
  ASSERT_TRUE(ApplyTomlOverride("threads=\"2\"", &root).ok());
  EXPECT_EQ(TomlWhere("base.toml", root.get("threads")->source()), "--set threads");
}

TEST(RunConfigTest, MissingFileIsAnError) {
  RunConfig rc;
  Status s = LoadRunConfig("/nonexistent/run.toml", &rc);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("run.toml"), std::string::npos);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

std::string Times(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Deeply nested TOML (toml++ builds and destroys nested tables recursively) is
// refused before parsing, with the file and line, in every config kvlab reads.
TEST(RunConfigTest, DeeplyNestedTomlIsOneErrorNamingTheFile) {
  const int n = 100000;
  const std::string shapes[] = {
      "tokens = " + Times("[", n) + Times("]", n) + "\n",                       // arrays
      "seed = 1\nx = " + Times("{a = ", n) + "1" + Times("}", n) + "\n",        // inline tables
      "seed = 1\n[" + Times("t.", n) + "t]\n",                                  // a table header
      "seed = 1\n[[" + Times("t.", n) + "t]]\n",                                // an array of tables
      Times("k.", n) + "k = 1\n",                                               // a dotted key
  };
  for (const std::string& text : shapes) {
    RunConfig rc;
    const Status s = ParseRunConfig(text, "deep.toml", &rc);
    ASSERT_FALSE(s.ok()) << text.substr(0, 30);
    EXPECT_NE(s.message().find("deep.toml:"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("nested deeper than 128 levels"), std::string::npos) << s.message();
  }
  toml::table root;
  const Status set = ApplyTomlOverride("lengths=" + Times("[", n) + Times("]", n), &root);
  EXPECT_NE(set.message().find("--set lengths:1: TOML values nested deeper than 128"), std::string::npos)
      << set.message();
  const Status key = ApplyTomlOverride(Times("a.", 1000) + "b=1", &root);
  EXPECT_NE(key.message().find("1001 dotted parts, more than 128"), std::string::npos) << key.message();
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// Sizes and numbers a user gives are bounded before work starts: one error
// naming the key and both numbers (core/base/untrusted.h).
TEST(RunConfigTest, LimitsNameTheKeyAndBothNumbers) {
  const std::pair<std::string, std::string> cases[] = {
      {"max_new_tokens = 9223372036854775807\n",
       "max_new_tokens (--max-new-tokens) is 9223372036854775807, more than 16777216"},
      {"temperature = nan\n", "temperature (--temperature) is nan; expected a finite number in [0, 1000000]"},
      {"temperature = inf\n", "temperature (--temperature) is inf"},
      {"top_p = -inf\n", "top_p (--top-p) is -inf; expected a finite number in [0, 1]"},
      {"tokens = [1, 4294967297]\n", "r.toml:1:14: 'tokens' entry is 4294967297, more than 2147483647"},
      {"block_size = 4294967312\n", "'block_size' must be in [1, 4096]"},  // not wrapped to 16
      {"prefill_chunk = 9223372036854775807\n", "prefill_chunk (--prefill-chunk) is 9223372036854775807, more than 16777216"},
      {"run_blocks = 9223372036854775807\n", "r.toml:1:14: 'run_blocks' (--run-blocks; 0 or 1: off) is 9223372036854775807, more than 4096"},
      {"run_blocks = -2\n", "'run_blocks' (--run-blocks; 0 or 1: off) is -2, less than 0"},
  };
  for (const auto& [text, want] : cases) {
    RunConfig rc;
    const Status s = ParseRunConfig(text, "r.toml", &rc);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
  EngineOptions eo;
  eo.num_threads = 100000;
  EXPECT_EQ(CheckEngineOptions(eo).message(), "threads (--threads) is 100000, more than 1024 (kvlab's limit)");
  eo = EngineOptions();
  eo.max_context = int64_t{1} << 40;
  EXPECT_NE(CheckEngineOptions(eo).message().find("the context (prompt + new tokens) is 1099511627776, more than"),
            std::string::npos);
  eo = EngineOptions();
  eo.max_seqs = 1 << 20;
  EXPECT_FALSE(CheckEngineOptions(eo).ok());
  EXPECT_TRUE(CheckEngineOptions(EngineOptions()).ok());
  GenerateOptions go;
  EXPECT_TRUE(CheckGenerateOptions(go).ok());
  go.sampling.temperature = std::nan("");
  EXPECT_FALSE(CheckGenerateOptions(go).ok());
}

}  // namespace
}  // namespace kvlab
