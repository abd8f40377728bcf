// The sweep harness: config expansion and errors, resume after a killed run,
// shards + merge, failed points, and honest baseline figures.
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"
#include "core/model/model_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using sweep_test::Parse;
using sweep_test::Quiet;
using sweep_test::Records;

std::string TempDir(const std::string& name) { return sweep_test::TempDir("sweep_test", name); }

// A text file for bpb, in the test's directory.
std::string WriteText(const std::string& dir, size_t bytes) {
  std::string t;
  const char* words[] = {"keys ", "values ", "cache ", "tokens ", "heads ", "blocks "};
  for (size_t i = 0; t.size() < bytes; ++i) t += words[(i * 7 + i / 3) % 6];
  t.resize(bytes);
  std::ofstream(dir + "/text.txt") << t;
  return "text.txt";
}

// A tiny sweep on the random-weight `small` preset: 2 stacks + baseline, 2 tasks.
std::string TinySweep(const std::string& dir) {
  WriteText(dir, 400);
  return "name = \"tiny\"\nmodels = [\"small\"]\ntasks = [\"bpb\", \"recall\"]\nlengths = [48]\nthreads = 1\n"
         "[task.bpb]\ntext = \"text.txt\"\nprefill = 16\n"
         "[task.recall]\ndepths = [0.0, 1.0]\nsamples = 1\npairs = 4\n"
         "[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nn_sink = 4\nwindow = [16, 24]\n";
}

TEST(SweepConfigTest, GridsExpandWithBaselineFirst) {
  const std::string dir = TempDir("grid");
  SweepConfig c = Parse(dir,
                        "models = [\"small\"]\ntasks = [\"bpb\", \"latency\"]\nlengths = [64, 128]\nbatch_sizes = [1, 4]\n"
                        "seeds = [0, 1]\n[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nwindow = [16, 32, 64]\n"
                        "[[sweep.policy]]\nname = \"kivi\"\nbits = [2, 4]\n"
                        "[[point]]\n[[point.policy]]\nname = \"h2o\"\nbudget = 32\n");
  ASSERT_EQ(c.stacks.size(), 1u + 6u + 1u);
  EXPECT_EQ(c.stacks[0][0].name, "full");
  EXPECT_EQ(c.stacks[1][0].params.at("window"), "16");
  EXPECT_EQ(c.stacks[1][1].params.at("bits"), "2");
  EXPECT_EQ(c.stacks[2][1].params.at("bits"), "4");
  EXPECT_EQ(c.stacks[7][0].name, "h2o");
  const auto points = ExpandPoints(c);
  // Per stack: bpb 2 lengths x 1 batch x 2 seeds + latency 2 lengths x 2 batches x 2 seeds.
  EXPECT_EQ(points.size(), 8u * (4u + 8u));
  std::set<std::string> keys;
  for (const auto& p : points) keys.insert(p.key);
  EXPECT_EQ(keys.size(), points.size());  // every point has its own identity
  EXPECT_TRUE(points[0].baseline);
  // --set overrides a list, a nested table key and a bare string.
  c = Parse(dir, "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [64, 128]\n",
            {"lengths=[256]", "task.bpb.windows=3", "name=renamed"});
  EXPECT_EQ(c.lengths, std::vector<int64_t>{256});
  EXPECT_EQ(c.task_options.at("bpb").Int("windows"), 3);
  EXPECT_EQ(c.name, "renamed");
  fs::remove_all(dir);
}

TEST(SweepConfigTest, ErrorsNameFileLineColumn) {
  const std::string dir = TempDir("errors");
  const std::string path = dir + "/bad.toml";
  auto error = [&](const std::string& text) {
    std::ofstream(path) << text;
    SweepConfig c;
    const Status s = LoadSweepConfig(path, {}, &c);
    EXPECT_FALSE(s.ok()) << text;
    return s.ToString();
  };
  std::string e = error("models = [\"small\"]\ntasks = [\"bpb\"]\nlenghts = [64]\n");
  EXPECT_NE(e.find(path + ":3:"), std::string::npos) << e;
  EXPECT_NE(e.find("lenghts"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = \"long\"\n");
  EXPECT_NE(e.find(path + ":3:"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = []\n");
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\n[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nwindow = []\n");
  EXPECT_NE(e.find(path + ":6:"), std::string::npos) << e;
  EXPECT_NE(e.find("empty grid"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\n[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nwindoww = 3\n");
  EXPECT_NE(e.find("windoww"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"passkee\"]\n");
  EXPECT_NE(e.find("passkee"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\n[task.bpb]\nwindows = 0\n");
  EXPECT_NE(e.find(path + ":4:"), std::string::npos) << e;
  e = error("models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [64\n");  // TOML syntax
  EXPECT_NE(e.find(path + ":"), std::string::npos) << e;
  fs::remove_all(dir);
}

// Every value the user set is honoured or refused: a value listed twice in
// lengths, seeds, models or tasks (each point would run twice and be reported
// as one of n=2), a policy parameter of the wrong TOML type, and a length past
// the model's positions (refused before any point runs, naming lengths, the
// model and its limit; allow_long_context = true lets it through).
TEST(SweepConfigTest, DuplicatesWrongTypesAndLengthsPastPositionsAreRefused) {
  const std::string dir = TempDir("refused");
  const std::string path = dir + "/c.toml";
  auto load = [&](const std::string& text) {
    std::ofstream(path) << text;
    SweepConfig c;
    return LoadSweepConfig(path, {}, &c);
  };
  const std::string head = "models = [\"small\"]\ntasks = [\"bpb\"]\n";
  Status s = load(head + "lengths = [64, 128, 64]\n");
  EXPECT_NE(s.message().find(path + ":3:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'lengths' lists 64 twice"), std::string::npos) << s.message();
  s = load(head + "seeds = [1, 1]\n");
  EXPECT_NE(s.message().find("'seeds' lists 1 twice"), std::string::npos) << s.message();
  s = load("models = [\"small\", \"small\"]\ntasks = [\"bpb\"]\n");
  EXPECT_NE(s.message().find("'models' lists 'small' twice"), std::string::npos) << s.message();
  s = load("models = [\"small\"]\ntasks = [\"bpb\", \"bpb\"]\n");
  EXPECT_NE(s.message().find("'tasks' lists 'bpb' twice"), std::string::npos) << s.message();
  s = load(head + "[[sweep]]\n[[sweep.policy]]\nname = \"h2o\"\nratio = [0.25, \"0.5\"]\n");
  EXPECT_NE(s.message().find(path + ":6:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("policy 'h2o' parameter 'ratio' must be a number, got a string (0.5)"),
            std::string::npos)
      << s.message();
  ModelConfig small;
  ASSERT_TRUE(PresetConfig("small", &small).ok());
  const std::string past = std::to_string(small.max_position_embeddings + 1);
  s = load(head + "lengths = [64, " + past + "]\n");
  EXPECT_NE(s.message().find(path + ":3:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'lengths' entry " + past + " is past the " +
                             std::to_string(small.max_position_embeddings) + " positions of model 'small'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("allow_long_context"), std::string::npos) << s.message();
  EXPECT_TRUE(load(head + "allow_long_context = true\nlengths = [64, " + past + "]\n").ok());
  EXPECT_TRUE(load(head + "lengths = [64, 128]\nseeds = [0, 1]\n").ok());
  fs::remove_all(dir);
}

// Each task reads its table by the options it declares: another task's key
// is refused (never silently unused), and each type and range is checked.
TEST(SweepConfigTest, TaskTablesTakeTheirTasksOptionsOnly) {
  const std::string dir = TempDir("task-options");
  const std::string path = dir + "/t.toml";
  auto load = [&](const std::string& table, SweepConfig* c) {
    std::ofstream(path) << "models = [\"small\"]\ntasks = [\"passkey\", \"paging\"]\n" << table;
    return LoadSweepConfig(path, {}, c);
  };
  SweepConfig c;
  ASSERT_TRUE(load("", &c).ok());
  EXPECT_EQ(c.task_options.at("passkey").Int("samples"), 2);  // declared defaults
  EXPECT_EQ(c.task_options.at("passkey").Floats("depths"), (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
  EXPECT_EQ(c.task_options.at("paging").Ints("block_sizes"), (std::vector<int64_t>{1, 16, 64, 256}));
  EXPECT_FALSE(c.task_options.at("passkey").Has("windows"));
  ASSERT_TRUE(load("[task.passkey]\nsamples = 3\ndepths = 0.5\n[task.paging]\nsigma = 2\n", &c).ok());
  EXPECT_EQ(c.task_options.at("passkey").Int("samples"), 3);
  EXPECT_EQ(c.task_options.at("passkey").Floats("depths"), std::vector<double>{0.5});
  EXPECT_EQ(c.task_options.at("paging").Float("sigma"), 2.0);

  Status s = load("[task.passkey]\nwindows = 4\n", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ":4:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unknown key 'task.passkey.windows'; valid keys of task 'passkey': depths, samples"),
            std::string::npos)
      << s.message();
  s = load("[task.passkey]\ndepths = [0.5, 1.5]\n", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'task.passkey.depths' entries must be in [0, 1]"), std::string::npos) << s.message();
  s = load("[task.passkey]\nsamples = \"3\"\n", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'task.passkey.samples' must be an integer >= 1"), std::string::npos) << s.message();
  s = load("[task.paging]\nsigma = 5.0\n", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'task.paging.sigma'"), std::string::npos) << s.message();
  s = load("[task.paging]\nblock_sizes = [16, 0]\n", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'task.paging.block_sizes' entries must be >= 1"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

// A run killed mid-sweep (records lost and a half-written line) resumes:
// nothing lost, nothing duplicated, earlier records untouched.
TEST(SweepRunTest, ResumeAfterKill) {
  const std::string dir = TempDir("resume");
  const SweepConfig c = Parse(dir, TinySweep(dir));
  const size_t n = ExpandPoints(c).size();
  ASSERT_EQ(n, 3u * 2u);
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  std::vector<json> full = Records(dir + "/out");
  ASSERT_EQ(full.size(), n);
  // Simulate kill -9 after 3 points, in the middle of writing the 4th.
  std::string kept;
  {
    std::ifstream in(dir + "/out/results.jsonl");
    std::string line;
    for (int i = 0; i < 3 && std::getline(in, line); ++i) kept += line + "\n";
    std::getline(in, line);
    std::ofstream(dir + "/out/results.jsonl", std::ios::trunc) << kept << line.substr(0, line.size() / 2);
  }
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok());
  EXPECT_NE(report.find("ran 3 of 6 points"), std::string::npos) << report;
  std::vector<json> resumed = Records(dir + "/out");
  ASSERT_EQ(resumed.size(), n);
  std::set<std::string> keys;
  for (size_t i = 0; i < resumed.size(); ++i) {
    keys.insert(resumed[i]["key"].get<std::string>());
    EXPECT_EQ(resumed[i]["status"], "ok");
  }
  EXPECT_EQ(keys.size(), n);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i].dump(), full[i].dump());
  // Deterministic metrics: the recomputed points equal the first run's.
  for (size_t i = 3; i < n; ++i) {
    EXPECT_EQ(resumed[i]["key"], full[i]["key"]);
    EXPECT_EQ(resumed[i]["metrics"].value("bpb", -1.0), full[i]["metrics"].value("bpb", -1.0));
    EXPECT_EQ(resumed[i]["metrics"].value("accuracy", -1.0), full[i]["metrics"].value("accuracy", -1.0));
  }
  // A third run has nothing to do.
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok());
  EXPECT_NE(report.find("ran 0 of 6 points"), std::string::npos) << report;
  EXPECT_EQ(Records(dir + "/out").size(), n);
  // A damaged line in the middle is an error naming file:line; nothing is dropped.
  std::string damaged;
  {
    std::ifstream in(dir + "/out/results.jsonl");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    text.insert(text.find('\n') + 1, "{not json\n");
    std::ofstream(dir + "/out/results.jsonl", std::ios::trunc) << text;
    damaged = text;
  }
  const Status bad = RunSweep(c, Quiet(dir + "/out"), &report);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.ToString().find("results.jsonl:2"), std::string::npos) << bad.ToString();
  std::ifstream after(dir + "/out/results.jsonl");
  std::stringstream as;
  as << after.rdbuf();
  EXPECT_EQ(as.str(), damaged);
  fs::remove_all(dir);
}

// Records made with other weights of a model (retrained since) are not taken
// as done: the run stops with an error naming the model, and writes nothing.
// The config copied beside the results says what ran: the file as written,
// then the --set overrides that were applied on top of it.
TEST(SweepRunTest, ConfigCopyRecordsTheOverrides) {
  const std::string dir = TempDir("config-copy");
  const SweepConfig c = Parse(dir, TinySweep(dir), {"name=\"tiny-48\"", "tasks=[\"bpb\"]"});
  ASSERT_EQ(c.tasks, std::vector<std::string>{"bpb"});
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  std::ifstream in(dir + "/out/config.toml");
  std::stringstream copy;
  copy << in.rdbuf();
  const std::string text = copy.str();
  EXPECT_EQ(text.rfind(TinySweep(dir), 0), 0u) << text;  // the file first, unchanged
  EXPECT_NE(text.find("--set 'name=\"tiny-48\"' --set 'tasks=[\"bpb\"]'"), std::string::npos) << text;
  // Without overrides the copy is the file alone.
  const std::string plain = TempDir("config-copy-plain");
  ASSERT_TRUE(RunSweep(Parse(plain, TinySweep(plain)), Quiet(plain + "/out"), &report).ok()) << report;
  std::ifstream in2(plain + "/out/config.toml");
  std::stringstream copy2;
  copy2 << in2.rdbuf();
  EXPECT_EQ(copy2.str(), TinySweep(plain));
}

TEST(SweepRunTest, RecordsOfAnotherCheckpointAreAnError) {
  const std::string dir = TempDir("stale");
  const SweepConfig c = Parse(dir, TinySweep(dir));
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  std::vector<json> recs = Records(dir + "/out");
  ASSERT_FALSE(recs.empty());
  const std::string hash = recs[1]["checkpoint"].get<std::string>();
  EXPECT_FALSE(hash.empty());
  recs[1]["checkpoint"] = "sha256:0123456789abcdef";  // as if the model had been retrained since
  std::string text;
  for (const json& r : recs) text += r.dump() + "\n";
  std::ofstream(dir + "/out/results.jsonl", std::ios::trunc) << text;
  const Status s = RunSweep(c, Quiet(dir + "/out"), &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("results.jsonl"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("'small'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("1 recorded point"), std::string::npos) << s.ToString();
  std::ifstream in(dir + "/out/results.jsonl");
  std::stringstream after;
  after << in.rdbuf();
  EXPECT_EQ(after.str(), text);
  // With the record's checkpoint restored, the run has nothing to do.
  recs[1]["checkpoint"] = hash;
  text.clear();
  for (const json& r : recs) text += r.dump() + "\n";
  std::ofstream(dir + "/out/results.jsonl", std::ios::trunc) << text;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  EXPECT_NE(report.find("ran 0 of 6 points"), std::string::npos) << report;
  fs::remove_all(dir);
}

TEST(SweepRunTest, ShardsMergeToTheWholeSweep) {
  const std::string dir = TempDir("shards");
  const SweepConfig c = Parse(dir, TinySweep(dir));
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/whole"), &report).ok());
  for (int i = 0; i < 3; ++i) {
    RunSweepOptions o = Quiet(dir + "/shard" + std::to_string(i));
    o.shard = i;
    o.num_shards = 3;
    ASSERT_TRUE(RunSweep(c, o, &report).ok());
    for (const json& r : Records(o.out_dir)) EXPECT_EQ(r["index"].get<int>() % 3, i);
  }
  ASSERT_TRUE(MergeResults({dir + "/shard0", dir + "/shard1", dir + "/shard2", dir + "/shard1"}, dir + "/merged", &report).ok());
  const std::vector<json> whole = Records(dir + "/whole"), merged = Records(dir + "/merged");
  ASSERT_EQ(merged.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(merged[i]["key"], whole[i]["key"]);
    EXPECT_EQ(merged[i]["metrics"].value("bpb", -1.0), whole[i]["metrics"].value("bpb", -1.0));
  }
  EXPECT_TRUE(fs::exists(dir + "/merged/summary.md"));
  EXPECT_TRUE(fs::exists(dir + "/merged/results.csv"));
  fs::remove_all(dir);
}

// Shards whose records were made with different weights of one model do not
// merge: the error names the model and both files.
TEST(SweepRunTest, ShardsOfAnotherCheckpointDoNotMerge) {
  const std::string dir = TempDir("shards-stale");
  const SweepConfig c = Parse(dir, TinySweep(dir));
  std::string report;
  for (int i = 0; i < 2; ++i) {
    RunSweepOptions o = Quiet(dir + "/shard" + std::to_string(i));
    o.shard = i;
    o.num_shards = 2;
    ASSERT_TRUE(RunSweep(c, o, &report).ok());
  }
  ASSERT_TRUE(MergeResults({dir + "/shard0", dir + "/shard1"}, dir + "/merged", &report).ok()) << report;
  // Rewrite shard1 as if its model had other weights.
  std::vector<json> recs = Records(dir + "/shard1");
  ASSERT_FALSE(recs.empty());
  {
    std::ofstream f(dir + "/shard1/results.jsonl", std::ios::trunc);
    for (json& r : recs) {
      ASSERT_TRUE(r.contains("checkpoint"));
      r["checkpoint"] = "sha256:0000";
      f << r.dump() << "\n";
    }
  }
  const Status s = MergeResults({dir + "/shard0", dir + "/shard1"}, dir + "/merged2", &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("two checkpoints"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("small"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(dir + "/shard1/results.jsonl"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find(dir + "/shard0/results.jsonl"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(dir + "/merged2/results.jsonl"));
  fs::remove_all(dir);
}

// A point that fails records its error; the others still run; a rerun does
// not repeat it unless asked to.
TEST(SweepRunTest, FailedPointIsRecordedAndTheSweepGoesOn) {
  const std::string dir = TempDir("failed");
  WriteText(dir, 100);
  // The text holds 100 bytes: length 48 works, length 160 cannot.
  const SweepConfig c = Parse(dir, "name = \"f\"\nmodels = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [48, 160, 32]\nthreads = 1\n"
                                   "[task.bpb]\ntext = \"text.txt\"\nprefill = 16\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok());
  EXPECT_NE(report.find("1 failed"), std::string::npos) << report;
  std::vector<json> recs = Records(dir + "/out");
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0]["status"], "ok");
  EXPECT_EQ(recs[1]["status"], "error");
  EXPECT_NE(recs[1]["error"].get<std::string>().find("text.txt"), std::string::npos);
  EXPECT_EQ(recs[2]["status"], "ok");
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok());
  EXPECT_EQ(Records(dir + "/out").size(), 3u);
  RunSweepOptions retry = Quiet(dir + "/out");
  retry.retry_failed = true;
  ASSERT_TRUE(RunSweep(c, retry, &report).ok());
  EXPECT_EQ(Records(dir + "/out").size(), 4u);  // the retry appended a new record for that point
  std::ifstream csv(dir + "/out/results.csv");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 1 + 3);  // one row per point: the latest record
  fs::remove_all(dir);
}

// A sweep in which every point fails measured nothing: RunSweep returns an
// error naming the first failure (the records are still written), on the run
// and on a rerun that finds only failed records; one ok point is enough to pass.
TEST(SweepRunTest, EveryPointFailingIsAnError) {
  const std::string dir = TempDir("allfail");
  const SweepConfig c = Parse(dir, "models = [\"no-such-model\"]\ntasks = [\"passkey\"]\nlengths = [64]\nthreads = 1\n"
                                   "[task.passkey]\ndepths = [0.5]\nsamples = 1\n"
                                   "[[point]]\n[[point.policy]]\nname = \"sink\"\nwindow = 16\n");
  std::string report;
  Status s = RunSweep(c, Quiet(dir + "/out"), &report);
  ASSERT_FALSE(s.ok()) << report;
  EXPECT_NE(s.message().find("every one of the 2 point(s) failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no-such-model"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(dir + "/out/results.jsonl"), std::string::npos) << s.message();
  const std::vector<json> recs = Records(dir + "/out");
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0]["status"], "error");
  EXPECT_TRUE(fs::exists(dir + "/out/summary.md"));
  s = RunSweep(c, Quiet(dir + "/out"), &report);  // nothing to run; still nothing measured
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--retry-failed"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

// The baseline compares with itself exactly; offload is lossless.
// One CSV line's fields (RFC 4180 quoting: a field with a comma is quoted, "" inside is one ").
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

TEST(SweepRunTest, HonestBaselineAndLosslessOffload) {
  const std::string dir = TempDir("honest");
  WriteText(dir, 400);
  const SweepConfig c = Parse(dir, "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [96]\nthreads = 1\n"
                                   "[task.bpb]\ntext = \"text.txt\"\nprefill = 8\n"
                                   "[[point]]\n[[point.policy]]\nname = \"offload\"\ndevice_budget = 65536\n"
                                   "keep_recent = 16\nkeep_sinks = 0\n"
                                   "[[point]]\n[[point.policy]]\nname = \"kivi\"\nbits = 2\nresidual = 0\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok());
  const std::vector<json> r = Records(dir + "/out");
  ASSERT_EQ(r.size(), 3u);
  const json& base = r[0]["metrics"];
  const json& off = r[1]["metrics"];
  const json& kivi = r[2]["metrics"];
  EXPECT_TRUE(r[0]["baseline"].get<bool>());
  EXPECT_EQ(base["kl"].get<double>(), 0.0);
  EXPECT_EQ(base["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(off["bpb"].get<double>(), base["bpb"].get<double>());
  EXPECT_EQ(off["kl"].get<double>(), 0.0);
  EXPECT_EQ(off["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(off["memory"]["device_bytes"].get<double>(), base["memory"]["device_bytes"].get<double>());
  // KIVI-2 holds fewer bytes and is not free.
  EXPECT_LT(kivi["memory"]["kv_bytes_end"].get<double>(), base["memory"]["kv_bytes_end"].get<double>());
  EXPECT_GT(kivi["kl"].get<double>(), 0.0);
  // CSV: the baseline's memory ratio and compression are exactly 1.
  std::ifstream csv(dir + "/out/results.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  const std::vector<std::string> h = CsvFields(header), v = CsvFields(row);
  std::map<std::string, std::string> col;
  for (size_t i = 0; i < h.size() && i < v.size(); ++i) col[h[i]] = v[i];
  EXPECT_EQ(col["memory_ratio"], "1");
  EXPECT_EQ(col["compression"], "1");
  EXPECT_EQ(col["bpb_ratio"], "1");
  EXPECT_EQ(col["peak_ratio"], "1");
  EXPECT_EQ(col["reserved_ratio"], "1");
  // KIVI's row: peak and reserved ratios from its own record over the baseline's, reserved below full's.
  std::getline(csv, row);  // offload
  std::getline(csv, row);  // kivi
  const std::vector<std::string> kv = CsvFields(row);
  std::map<std::string, std::string> kcol;
  for (size_t i = 0; i < h.size() && i < kv.size(); ++i) kcol[h[i]] = kv[i];
  const double peak = kivi["memory"]["peak_kv_bytes"].get<double>() / base["memory"]["peak_kv_bytes"].get<double>();
  const double reserved =
      kivi["memory"]["kv_bytes_reserved"].get<double>() / base["memory"]["kv_bytes_reserved"].get<double>();
  ASSERT_FALSE(kcol["peak_ratio"].empty());
  EXPECT_NEAR(std::stod(kcol["peak_ratio"]), peak, 1e-3 * peak);
  EXPECT_NEAR(std::stod(kcol["reserved_ratio"]), reserved, 1e-3 * reserved);
  // (Not reserved < 1 here: at 96 tokens each of KIVI's two pools is sized for
  // its own most, 96 plain tokens (residual 0 + group 32 + a 64-token step) and
  // 96 encoded, 1.07x full's; docs/policies.md, "Reservations".)
  EXPECT_LT(peak, 1.0);
  // summary.md's memory columns: the peak first, then end and reserved.
  std::ifstream md(dir + "/out/summary.md");
  const std::string summary((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find("| setting | peak memory | end memory | reserved | compression |"), std::string::npos);
  fs::remove_all(dir);
}

// run_blocks in a sweep: passed to the engine (the reserve a decode-grown
// cache takes ahead is there with runs, none without), recorded in every
// record and results.csv, part of the key when not the default, and without
// effect on the figures.
TEST(SweepRunTest, RunBlocksReachTheEngineAndJoinTheKey) {
  const std::string dir = TempDir("runs");
  WriteText(dir, 400);
  const std::string text = "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [96]\nthreads = 1\nbaseline = false\n"
                           "[task.bpb]\ntext = \"text.txt\"\nprefill = 16\n"
                           "[[point]]\n[[point.policy]]\nname = \"full\"\n";
  std::map<int, json> rec;
  std::map<int, std::string> key, csv;
  for (int runs : {0, 8, 32}) {
    const SweepConfig c = Parse(dir, text, {"run_blocks=" + std::to_string(runs)});
    EXPECT_EQ(c.run_blocks, runs);
    key[runs] = ExpandPoints(c).at(0).key;
    std::string report;
    const std::string out = dir + "/out" + std::to_string(runs);
    ASSERT_TRUE(RunSweep(c, Quiet(out), &report).ok());
    const std::vector<json> r = Records(out);
    ASSERT_EQ(r.size(), 1u);
    rec[runs] = r[0];
    EXPECT_EQ(r[0]["run_blocks"].get<int>(), runs);
    std::ifstream f(out + "/results.csv");
    std::string header, row;
    std::getline(f, header);
    std::getline(f, row);
    EXPECT_NE(header.find(",run_blocks,peak_kv_bytes_run_reserve"), std::string::npos) << header;
    csv[runs] = row.substr(row.rfind(',', row.rfind(',') - 1) + 1);  // the last two cells
  }
  EXPECT_NE(key[0].find("\"run_blocks\":0"), std::string::npos) << key[0];
  EXPECT_NE(key[8].find("\"run_blocks\":8"), std::string::npos) << key[8];
  EXPECT_EQ(key[32].find("run_blocks"), std::string::npos) << key[32];  // the default: keys as before
  const auto reserve = [&](int r) { return rec[r]["metrics"]["memory"]["peak_kv_bytes_run_reserve"].get<double>(); };
  EXPECT_EQ(reserve(0), 0);
  EXPECT_GT(reserve(8), 0);
  EXPECT_EQ(csv[0], "0,0");
  EXPECT_EQ(csv[8], "8," + std::to_string(static_cast<int64_t>(reserve(8))));
  EXPECT_EQ(rec[0]["metrics"]["bpb"], rec[8]["metrics"]["bpb"]);
  EXPECT_EQ(rec[0]["metrics"]["memory"]["peak_kv_bytes"], rec[8]["metrics"]["memory"]["peak_kv_bytes"]);
  SweepConfig bad;
  EXPECT_NE(ParseSweepConfig(text, dir + "/s.toml", {"run_blocks=-1"}, &bad).message().find(
                "'run_blocks' is -1, less than 0"),
            std::string::npos);
  fs::remove_all(dir);
}

// max_step_tokens in a sweep: recorded in every record, part of the key when
// not the default, and it bounds the peak: an 80-token prefill under h2o holds
// all 80 tokens at once as one step (0), at most the budget + 16 as steps of 16.
TEST(SweepRunTest, MaxStepTokensBoundsThePeakAndJoinsTheKey) {
  const std::string dir = TempDir("steps");
  WriteText(dir, 400);
  const std::string text = "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [96]\nthreads = 1\nbaseline = false\n"
                           "block_size = 1\n[task.bpb]\ntext = \"text.txt\"\nprefill = 80\n"
                           "[[point]]\n[[point.policy]]\nname = \"h2o\"\nbudget = 16\n";
  std::map<int64_t, json> rec;
  std::map<int64_t, std::string> key;
  for (int64_t steps : {int64_t{0}, int64_t{16}, int64_t{64}}) {
    const SweepConfig c = Parse(dir, text, {"max_step_tokens=" + std::to_string(steps)});
    EXPECT_EQ(c.max_step_tokens, steps);
    key[steps] = ExpandPoints(c).at(0).key;
    std::string report;
    const std::string out = dir + "/out" + std::to_string(steps);
    ASSERT_TRUE(RunSweep(c, Quiet(out), &report).ok());
    const std::vector<json> r = Records(out);
    ASSERT_EQ(r.size(), 1u);
    rec[steps] = r[0];
    EXPECT_EQ(r[0]["max_step_tokens"].get<int64_t>(), steps);
  }
  EXPECT_NE(key[0].find("\"max_step_tokens\":0"), std::string::npos) << key[0];
  EXPECT_NE(key[16].find("\"max_step_tokens\":16"), std::string::npos) << key[16];
  EXPECT_EQ(key[64].find("max_step_tokens"), std::string::npos) << key[64];  // the default: keys as before
  const auto peak = [&](int64_t s) { return rec[s]["metrics"]["memory"]["peak_kv_bytes"].get<double>(); };
  const auto end = [&](int64_t s) { return rec[s]["metrics"]["memory"]["kv_bytes_end"].get<double>(); };
  const double per_slot = end(16) / 16;  // h2o keeps 16 slots of one block each at the end
  EXPECT_GE(peak(0), 80 * per_slot);
  EXPECT_LE(peak(16), 32 * per_slot);
  EXPECT_LT(peak(16), peak(64));
  SweepConfig bad;
  EXPECT_NE(ParseSweepConfig(text, dir + "/s.toml", {"max_step_tokens=-1"}, &bad).message().find(
                "'max_step_tokens' is -1, less than 0"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// quest in a sweep: its memory is the baseline's (the end memory cell says
// the cache is whole), and the K/V bytes its decode steps read are below the
// baseline's, in the record, the CSV and the summary's read column.
TEST(SweepRunTest, QuestKeepsTheCacheWholeAndReportsBytesRead) {
  const std::string dir = TempDir("quest");
  WriteText(dir, 400);
  const SweepConfig c = Parse(dir, "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [128]\nthreads = 1\n"
                                   "[task.bpb]\ntext = \"text.txt\"\nprefill = 32\n"
                                   "[[point]]\n[[point.policy]]\nname = \"quest\"\ntoken_budget = 32\n"
                                   "dense_layers = 0\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  const std::vector<json> r = Records(dir + "/out");
  ASSERT_EQ(r.size(), 2u);
  const json& base = r[0]["metrics"]["memory"];
  const json& quest = r[1]["metrics"]["memory"];
  EXPECT_EQ(quest["kv_bytes_end"], base["kv_bytes_end"]);
  EXPECT_EQ(quest["kv_bytes_reserved"], base["kv_bytes_reserved"]);
  EXPECT_EQ(base["kv_read_ratio"].get<double>(), 1.0);
  EXPECT_LT(quest["kv_read_ratio"].get<double>(), 1.0);
  EXPECT_LT(quest["kv_read_bytes_per_step"].get<double>(), base["kv_read_bytes_per_step"].get<double>());
  std::ifstream csv(dir + "/out/results.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);  // the baseline
  std::getline(csv, row);
  const std::vector<std::string> h = CsvFields(header), v = CsvFields(row);
  std::map<std::string, std::string> col;
  for (size_t i = 0; i < h.size() && i < v.size(); ++i) col[h[i]] = v[i];
  EXPECT_EQ(col["memory_ratio"], "1");
  ASSERT_FALSE(col["read_ratio"].empty());
  EXPECT_LT(std::stod(col["read_ratio"]), 1.0);
  std::ifstream md(dir + "/out/summary.md");
  const std::string summary((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find("| 1.000 (whole cache) | 1.000 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find(" read | points |"), std::string::npos) << summary;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
