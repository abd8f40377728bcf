// The dataset tasks in a sweep (evals/tasks/longbench.cpp) on the committed
// byte-level tiny-gqa and the fixtures of each schema (evals/fixtures/longbench,
// evals/fixtures/infinitebench): per-sample scores in the records (so the
// reports' intervals apply), LongBench's middle truncation, LongBench-E's
// length buckets, LongBench v2's breakdowns, the query-aware and
// query-agnostic modes recorded, and bad files failing their point with the
// file, line and field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/untrusted.h"
#include "datasets/tasks/longbench.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using sweep_test::Source;

std::string Fixture(const std::string& name) { return Source() + "/evals/fixtures/longbench/" + name; }

std::string Head(const std::vector<std::string>& tasks, const std::string& length = "1024") {
  std::string t = "models = [\"" + Source() + "/datasets/models/tiny-gqa\"]\ntasks = [";
  for (size_t i = 0; i < tasks.size(); ++i) t += (i ? ", \"" : "\"") + tasks[i] + "\"";
  return t + "]\nlengths = [" + length + "]\nthreads = 1\n";
}

const json* Find(const std::vector<json>& recs, const std::string& task, bool baseline) {
  for (const json& r : recs) {
    if (r["task"] == task && r.value("baseline", false) == baseline) return &r;
  }
  return nullptr;
}

TEST(SweepLongBenchTest, FixturesRunWithPerSampleScores) {
  const std::string dir = sweep_test::TempDir("sweep_longbench_test", "run");
  const std::string cfg =
      Head({"longbench-hotpotqa", "longbench-trec", "longbench-v2", "infinitebench-longbook_choice_eng"}) +
      "[task.infinitebench-longbook_choice_eng]\nfile = \"" + Source() +
      "/evals/fixtures/infinitebench/longbook_choice_eng.jsonl\"\nsamples = 2\n[task.longbench-hotpotqa]\nfile = \"" +
      Fixture("hotpotqa.jsonl") + "\"\nsamples = 3\ntokens_to_generate = 8\n[task.longbench-trec]\nfile = \"" +
      Fixture("trec_e.jsonl") + "\"\nsamples = 5\ntokens_to_generate = 8\n[task.longbench-v2]\nfile = \"" +
      Fixture("longbench_v2.jsonl") +
      "\"\nsamples = 2\ntokens_to_generate = 8\n[[point]]\n[[point.policy]]\nname = \"sink\"\nn_sink = 4\nwindow = 60\n";
  std::string report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, cfg), sweep_test::Quiet(dir + "/aware"), &report).ok()) << report;
  const std::vector<json> r = sweep_test::Records(dir + "/aware");
  ASSERT_EQ(r.size(), 8u);
  for (const json& rec : r) {
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    const json& m = rec["metrics"];
    const json& acc = m["per_sample"]["accuracy"];
    double sum = 0;
    for (const json& v : acc) {
      EXPECT_GE(v.get<double>(), 0.0);
      EXPECT_LE(v.get<double>(), 1.0);
      sum += v.get<double>();
    }
    ASSERT_EQ(acc.size(), m["samples"].get<size_t>());
    EXPECT_DOUBLE_EQ(m["accuracy"].get<double>(), sum / static_cast<double>(acc.size()));
    EXPECT_DOUBLE_EQ(m["score"].get<double>(), 100 * m["accuracy"].get<double>());
    EXPECT_EQ(m["query_aware"], true);
    EXPECT_EQ(m["tokens_to_generate"], rec["task"] == "infinitebench-longbook_choice_eng" ? 40 : 8);  // its budget
    for (const json& t : m["per_sample"]["prompt_tokens"]) EXPECT_LE(t.get<int64_t>(), 1024 - 8);
  }
  const json& hot = (*Find(r, "longbench-hotpotqa", true))["metrics"];
  EXPECT_EQ(hot["metric"], "qa_f1");
  EXPECT_EQ(hot["samples"], 3);
  // The third record's context is longer than the point: cut in the middle to 2 x 508 tokens.
  EXPECT_EQ(hot["truncated"], 1);
  EXPECT_EQ(hot["per_sample"]["prompt_tokens"][2], 1016);
  // The question's tokens (byte-level: the template's tail after the context, in bytes).
  std::string text;
  ASSERT_TRUE(ReadFileBounded(Fixture("hotpotqa.jsonl"), 1 << 20, &text).ok());
  std::vector<LongBenchRecord> recs;
  const LongBenchDataset& d = *FindLongBenchDataset("hotpotqa");
  ASSERT_TRUE(LoadLongBenchFile("hotpotqa.jsonl", text, d, 0, &recs).ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hot["per_sample"]["question_tokens"][i], LongBenchPrompt(d, recs[i]).tail.size()) << i;
  }
  EXPECT_EQ(hot["per_sample"]["prompt_tokens"][0], 1 + LongBenchPrompt(d, recs[0]).head.size() +
                                                       LongBenchPrompt(d, recs[0]).tail.size());
  const json& trec = (*Find(r, "longbench-trec", false))["metrics"];
  EXPECT_EQ(trec["metric"], "classification");
  EXPECT_EQ(trec["samples"], 3);  // samples = 5, the file holds 3
  EXPECT_EQ(trec["per_sample"]["length"], json::parse("[120, 5000, 9000]"));
  for (const char* b : {"0-4k", "4-8k", "8k+"}) EXPECT_TRUE(trec["accuracy_by_length"].contains(b)) << trec.dump();
  const json& v2 = (*Find(r, "longbench-v2", true))["metrics"];
  EXPECT_EQ(v2["metric"], "multiple_choice");
  EXPECT_TRUE(v2["accuracy_by_difficulty"].contains("easy") && v2["accuracy_by_difficulty"].contains("hard"));
  EXPECT_TRUE(v2["accuracy_by_length"].contains("short") && v2["accuracy_by_length"].contains("medium"));
  EXPECT_EQ(v2["per_sample"]["answered"].size(), 2u);
  const json& ib = (*Find(r, "infinitebench-longbook_choice_eng", true))["metrics"];
  EXPECT_EQ(ib["metric"], "choice");
  EXPECT_EQ(ib["samples"], 2);
  // results.csv carries the tasks with their intervals.
  std::ifstream csv(dir + "/aware/results.csv");
  std::stringstream ss;
  ss << csv.rdbuf();
  EXPECT_NE(ss.str().find("longbench-hotpotqa"), std::string::npos);
  EXPECT_EQ(hot["predictions"].size(), 3u);
  // summary.md: LongBench's table with its average over datasets; v2's alone.
  std::ifstream sum(dir + "/aware/summary.md");
  std::stringstream md;
  md << sum.rdbuf();
  EXPECT_NE(md.str().find("### LongBench at 1024 tokens: score (%), question-aware\n"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("| setting | longbench-hotpotqa | longbench-trec | average |"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find(" n=6 |"), std::string::npos) << md.str();  // the average over 3 + 3 samples
  EXPECT_NE(md.str().find("| setting | longbench-v2 |\n"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("### LongBench v2 at 1024 tokens: difference from the baseline (points)"), std::string::npos);
  EXPECT_NE(md.str().find("### InfiniteBench at 1024 tokens: score (%)"), std::string::npos);

  // Query-agnostic: the same prompts, the mode recorded and part of the points' identity.
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, cfg, {"task.longbench-hotpotqa.query_aware=false",
                                                     "tasks=[\"longbench-hotpotqa\", \"longbench-trec\"]"}),
                       sweep_test::Quiet(dir + "/agnostic"), &report)
                  .ok())
      << report;
  const std::vector<json> a = sweep_test::Records(dir + "/agnostic");
  const json* ah = Find(a, "longbench-hotpotqa", true);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ((*ah)["status"], "ok") << ah->dump();
  EXPECT_EQ((*ah)["metrics"]["query_aware"], false);
  EXPECT_NE((*ah)["key"], (*Find(r, "longbench-hotpotqa", true))["key"]);
  const std::string key = (*ah)["key"].get<std::string>();
  EXPECT_NE(key.find("\"file\":\"hotpotqa.jsonl\""), std::string::npos) << key;  // the name, not the path
  EXPECT_EQ(key.find("evals/fixtures"), std::string::npos) << key;
  EXPECT_EQ((*ah)["metrics"]["per_sample"]["prompt_tokens"], hot["per_sample"]["prompt_tokens"]);
  // With the full cache nothing is dropped, so the split prefill reads the same tokens: the same answers.
  EXPECT_EQ((*ah)["metrics"]["per_sample"]["accuracy"], hot["per_sample"]["accuracy"]);
  EXPECT_EQ((*Find(a, "longbench-trec", true))["metrics"]["query_aware"], true);
  std::ifstream asum(dir + "/agnostic/summary.md");
  std::stringstream amd;
  amd << asum.rdbuf();
  EXPECT_NE(amd.str().find("### LongBench at 1024 tokens: score (%), question-aware and question-agnostic records mixed"),
            std::string::npos)
      << amd.str();
  EXPECT_NE(md.str().find("### LongBench v2 at 1024 tokens: score (%), question-aware\n"), std::string::npos);
  fs::remove_all(dir);
}

// A bad file fails its point with one error naming the file, the line and the
// field; the other tasks' points still run. A length past tiny-gqa's 2,048
// positions is refused when the config is read, before any point runs.
TEST(SweepLongBenchTest, BadFilesFailTheirPoint) {
  const std::string dir = sweep_test::TempDir("sweep_longbench_test", "bad");
  const std::string good = "{\"input\": \"Who?\", \"context\": \"Ada built it.\", \"answers\": [\"Ada\"]}\n";
  std::ofstream(dir + "/missing.jsonl") << good << "{\"context\": \"c\", \"answers\": [\"a\"]}\n";
  std::ofstream(dir + "/type.jsonl") << "{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\"], \"length\": []}\n";
  std::ofstream(dir + "/empty.jsonl") << good << good << "{\"input\": \"q\", \"context\": \"c\", \"answers\": []}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing.jsonl", "missing.jsonl:2: field 'input' is missing"},
      {"type.jsonl", "type.jsonl:1: field 'length' is [], expected an integer >= 0"},
      {"empty.jsonl", "empty.jsonl:3: field 'answers' is an empty list"},
      {"nosuch.jsonl", "nosuch.jsonl"},
  };
  for (const auto& [file, want] : cases) {
    const std::string cfg = Head({"longbench-musique", "longbench-qasper"}, "2048") +
                            "[task.longbench-musique]\nfile = \"" + file +
                            "\"\nsamples = 3\ntokens_to_generate = 4\n[task.longbench-qasper]\nfile = \"" +
                            Fixture("hotpotqa.jsonl") + "\"\nsamples = 1\ntokens_to_generate = 4\n";
    std::string report;
    const std::string out = dir + "/out-" + file;
    ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, cfg), sweep_test::Quiet(out), &report).ok()) << report;
    const std::vector<json> r = sweep_test::Records(out);
    ASSERT_EQ(r.size(), 2u) << file;
    EXPECT_EQ(r[0]["status"], "error") << r[0].dump();
    const std::string err = r[0].value("error", "");
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(r[1]["status"], "ok") << r[1].dump();
  }
  // A length past tiny-gqa's 2,048 positions: the config is refused naming
  // 'lengths', the model and its limit, and nothing runs.
  {
    const std::string path = dir + "/long.toml";
    std::ofstream(path) << Head({"longbench-musique"}, "4096") << "[task.longbench-musique]\nfile = \""
                        << Fixture("hotpotqa.jsonl") << "\"\nsamples = 1\n";
    SweepConfig c;
    const Status s = LoadSweepConfig(path, {}, &c);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("long.toml:3:11: 'lengths' entry 4096 is past the 2048 positions of model 'tiny-gqa'"),
              std::string::npos)
        << s.ToString();
  }
  // Without truncation a prompt past the point's length is an error too.
  std::ofstream(dir + "/fits.jsonl") << "{\"input\": \"q\", \"context\": \"" << std::string(1500, 'x')
                                     << "\", \"answers\": [\"a\"]}\n";
  const std::string cfg = Head({"longbench-musique"}) + "[task.longbench-musique]\nfile = \"fits.jsonl\"\n"
                                                         "tokens_to_generate = 4\ntruncate = false\n";
  std::string report;
  EXPECT_FALSE(RunSweep(sweep_test::Parse(dir, cfg), sweep_test::Quiet(dir + "/notrunc"), &report).ok());  // all failed
  const std::vector<json> r = sweep_test::Records(dir + "/notrunc");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].value("error", "").find("fits.jsonl:1: field 'context': the prompt is "), std::string::npos)
      << r[0].dump();
  // No file: the point fails naming the option.
  const std::string nofile = Head({"longbench-musique"}) + "[task.longbench-musique]\nsamples = 1\n";
  EXPECT_FALSE(RunSweep(sweep_test::Parse(dir, nofile), sweep_test::Quiet(dir + "/nofile"), &report).ok());
  EXPECT_NE(sweep_test::Records(dir + "/nofile")[0].value("error", "").find("set [task.longbench-musique] file = "),
            std::string::npos);
  fs::remove_all(dir);
}

// RULER's tasks take query_aware too: the haystack is compressed before the question.
TEST(SweepLongBenchTest, RulerQueryAgnostic) {
  const std::string dir = sweep_test::TempDir("sweep_longbench_test", "ruler");
  const std::string cfg = Head({"niah_single_1"}, "512") + "[task.niah_single_1]\nsamples = 2\ntokens_to_generate = 8\n";
  std::string report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, cfg), sweep_test::Quiet(dir + "/aware"), &report).ok()) << report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, cfg, {"task.niah_single_1.query_aware=false"}),
                       sweep_test::Quiet(dir + "/agnostic"), &report)
                  .ok())
      << report;
  const json aware = sweep_test::Records(dir + "/aware")[0], agnostic = sweep_test::Records(dir + "/agnostic")[0];
  ASSERT_EQ(agnostic["status"], "ok") << agnostic.dump();
  EXPECT_EQ(aware["metrics"]["query_aware"], true);
  EXPECT_EQ(agnostic["metrics"]["query_aware"], false);
  EXPECT_EQ(aware["key"].get<std::string>().find("query_aware"), std::string::npos);  // older records' keys hold
  EXPECT_NE(agnostic["key"].get<std::string>().find("\"query_aware\":false"), std::string::npos);
  const json& per = agnostic["metrics"]["per_sample"];
  ASSERT_EQ(per["question_tokens"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    // The question and answer prefix: "\nWhat is the special magic number for KEY ... is" (about 120 bytes).
    EXPECT_GT(per["question_tokens"][i].get<int64_t>(), 80);
    EXPECT_LT(per["question_tokens"][i].get<int64_t>(), 200);
  }
  // The full cache drops nothing: the same answers either way.
  EXPECT_EQ(per["accuracy"], aware["metrics"]["per_sample"]["accuracy"]);
  fs::remove_all(dir);
}

TEST(SweepLongBenchTest, OptionsAreChecked) {
  const std::string dir = sweep_test::TempDir("sweep_longbench_test", "opts");
  const std::string path = dir + "/bad.toml";
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"[task.longbench-v2]\nquery_aware = 1\n", "'task.longbench-v2.query_aware' must be true or false"},
           {"[task.longbench-v2]\nfile = 3\n", "'task.longbench-v2.file' must be a string"},
           {"[task.longbench-nosuch]\nfile = \"x\"\n", "longbench-nosuch"}}) {
    std::ofstream(path) << "models = [\"small\"]\ntasks = [\"longbench-v2\"]\n" + text;
    SweepConfig c;
    const Status s = LoadSweepConfig(path, {}, &c);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
