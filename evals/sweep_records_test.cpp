// results.jsonl as untrusted data (bounded, checked field by field, one error
// naming PATH:LINE), points recorded twice, and the results directory's lock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <set>
#include <thread>

#include "evals/sweep.h"
#include "evals/sweep_internal.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using sweep_test::Parse;
using sweep_test::Quiet;
using sweep_test::Records;

std::string TempDir(const std::string& name) { return sweep_test::TempDir("sweep_records_test", name); }

// A point's key as a record holds it: the JSON text of an object (here one
// naming the point), escaped as a string inside the record.
std::string KeyText(const std::string& name) { return "{\\\"point\\\": \\\"" + name + "\\\"}"; }

// A record as `kvlab run` writes it, with the fields the reports read (an
// empty `key` leaves the key empty).
std::string Record(int index, const std::string& key, const std::string& metrics = "{\"bpb\": 1.5}",
                   const std::string& task = "bpb") {
  return "{\"key\": \"" + (key.empty() ? key : KeyText(key)) + "\", \"sweep\": \"s\", \"index\": " +
         std::to_string(index) +
         ", \"status\": \"ok\", \"model\": \"small\", \"stack\": \"full\", \"baseline\": true, \"task\": \"" + task +
         "\", \"length\": 64, \"batch\": 1, \"seed\": 0, \"repetition\": 0, \"metrics\": " + metrics + "}";
}

Status Report(const std::string& dir, const std::vector<std::string>& lines, std::string* summary) {
  std::ofstream out(dir + "/results.jsonl", std::ios::trunc);
  for (const std::string& l : lines) out << l << "\n";
  out.close();
  return WriteReports(dir, summary);
}

TEST(SweepRecordsTest, BadRecordsAreOneErrorNamingFileLineAndField) {
  const std::string dir = TempDir("bad");
  const std::string path = dir + "/results.jsonl";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::pair<std::string, std::string> cases[] = {
      {"{\"key\": \"b\", \"metrics\": \"fast\"}", path + ":2: field 'metrics' is \"fast\", expected an object"},
      {"{\"key\": \"b\", \"length\": \"64\"}", path + ":2: field 'length' is \"64\", expected an integer"},
      {"{\"key\": 7}", path + ":2: field 'key' is 7, expected a string"},
      {"[1, 2]", path + ":2: a record must be a JSON object, got [1, 2]"},
      {"{\"key\": \"b\", \"metrics\": " + deep + "}", path + ":2: JSON nested deeper than 128 levels"},
      {"{\"key\": \"b\", \"metrics\": {\"memory\": 3}}", path + ":2: field 'metrics.memory' is 3, expected an object"},
      {Record(1, "b", "{\"paged_utilization_by_block_size\": {\"x\\n\": 0.5}}", "paging"),
       path + ":2: metrics.paged_utilization_by_block_size has key 'x\\n', expected a block size"},
      {Record(1, "b", "{\"per_sample\": [1, 0]}", "passkey"),
       path + ":2: field 'metrics.per_sample' is [1, 0], expected an object"},
      {Record(1, "b", "{\"per_sample\": {\"accuracy\": [1, \"0\"]}}", "passkey"),
       path + ":2: field 'metrics.per_sample.accuracy' holds \"0\", expected numbers"},
      {Record(1, "b", "{\"per_sample\": {\"accuracy\": [1, 0], \"depth\": [0.5]}}", "passkey"),
       path + ":2: field 'metrics.per_sample.depth' has 1 entries, the other per-sample fields 2"},
  };
  for (const auto& [line, want] : cases) {
    std::string summary;
    const Status s = Report(dir, {Record(0, "a"), line}, &summary);
    ASSERT_FALSE(s.ok()) << line.substr(0, 60);
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    EXPECT_LT(s.message().size(), 400u);
    std::string merged;
    EXPECT_EQ(MergeResults({dir}, dir + "/merged", &merged).message(), s.message());
  }
  fs::remove_all(dir);
}

// A record resume and the reports could not place: no key, a key that is not
// a point's settings, or a status other than the two a run writes. One error naming the line; nothing is counted
// twice and the file is left as it was.
TEST(SweepRecordsTest, RecordWithoutKeyOrWithUnknownStatusIsAnError) {
  const std::string dir = TempDir("status");
  const std::string path = dir + "/results.jsonl";
  std::string done = Record(1, "b");
  done.replace(done.find("\"ok\""), 4, "\"done\"");
  std::string keyless = Record(1, "b");
  keyless.replace(0, keyless.find(", \"sweep\"") + 2, "{");
  std::string not_a_key = Record(1, "b");
  not_a_key.replace(not_a_key.find(KeyText("b")), KeyText("b").size(), "not a key");
  std::string statusless = Record(1, "b");
  statusless.erase(statusless.find("\"status\""), std::string("\"status\": \"ok\", ").size());
  const std::pair<std::string, std::string> cases[] = {
      {done, path + ":2: field 'status' is \"done\", expected \"ok\" or \"error\""},
      {keyless, path + ":2: the record has no 'key'"},
      {Record(1, ""), path + ":2: the record has no 'key'"},
      {not_a_key, path + ":2: field 'key' is \"not a key\", expected the JSON text of a point's settings"},
      {statusless, path + ":2: the record has no 'status'"},
  };
  for (const auto& [line, want] : cases) {
    std::string summary;
    const Status s = Report(dir, {Record(0, "a"), line}, &summary);
    ASSERT_FALSE(s.ok()) << line;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    std::vector<nlohmann::ordered_json> recs;
    EXPECT_EQ(LoadRecords(path, &recs).message(), s.message());
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, Record(0, "a") + "\n" + line + "\n");
  }
  fs::remove_all(dir);
}

// Records a report reads but that lack optional parts: a record without
// metrics, a paging record without its per-block-size table.
TEST(SweepRecordsTest, MissingOptionalFieldsAreReportedAsEmpty) {
  const std::string dir = TempDir("missing");
  std::string summary;
  const Status s = Report(dir,
                          {"{\"key\": \"" + KeyText("a") + "\", \"index\": 0, \"status\": \"ok\", \"model\": \"small\", \"task\": \"bpb\"}",
                           Record(1, "p", "{\"requests\": 4}", "paging"), Record(2, "q", "{}", "paging")},
                          &summary);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(summary.find("### paging"), std::string::npos) << summary;
  fs::remove_all(dir);
}

// A passkey record of a setting and its baseline, hand-written: per-sample exact matches.
std::string Passkey(int index, const std::string& stack, const std::string& scores, int seed = 0) {
  const bool base = stack == "full";
  return "{\"key\": \"" + KeyText(stack + std::to_string(seed)) + "\", \"sweep\": \"s\", \"index\": " +
         std::to_string(index) +
         ", \"status\": \"ok\", \"model\": \"m\", \"stack\": \"" + stack + "\", \"baseline\": " +
         (base ? "true" : "false") + ", \"task\": \"passkey\", \"length\": 64, \"batch\": 1, \"seed\": " +
         std::to_string(seed) + ", \"repetition\": 0, \"metrics\": {\"accuracy\": 0.5, \"per_sample\": {\"accuracy\": " +
         scores + "}, \"memory\": {\"kv_bytes_end\": " + (base ? "1000" : "500") +
         ", \"peak_kv_bytes\": " + (base ? "2000" : "500") + ", \"kv_bytes_reserved\": " + (base ? "4000" : "1000") +
         "}}}";
}

// The reports' intervals from per-sample values: Wilson's for 8 of 10 (by
// hand: [0.490, 0.943]), the n behind each cell, and paired differences,
// marked ~ where their interval holds 0.
TEST(SweepRecordsTest, ReportsCarryIntervalsAndPairedDifferences) {
  const std::string dir = TempDir("intervals");
  std::string summary;
  const std::string base = "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]";
  ASSERT_TRUE(Report(dir, {Passkey(0, "full", base, 0), Passkey(1, "full", "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]", 1),
                           Passkey(2, "bad", "[1, 1, 0, 1, 0, 1, 1, 1, 1, 1]", 0), Passkey(3, "bad", "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]", 1),
                           Passkey(4, "same", "[1, 1, 1, 1, 1, 1, 1, 1, 1, 0]", 0), Passkey(5, "same", base, 1)},
                     &summary).ok());
  // Pooled over both seeds: 8 of 20 for "bad"; Wilson of 8/20 = [0.2188, 0.6134]. Memory: peak 500 / 2000,
  // end 500 / 1000, reserved 1000 / 4000, compression 1000 / 500.
  EXPECT_NE(summary.find("| `bad` | 0.250 | 0.500 | 0.250 | 2.00x | 0.40 [0.22, 0.61] n=20 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| `full` | 1.000 | 1.000 | 1.000 | 1.00x | 1.00 [0.84, 1.00] n=20 |"), std::string::npos)
      << summary;
  // Paired: bad loses 0.6 (12 of 20 samples), clearly (about ±1.96·sqrt(0.24/20) = ±0.21);
  // same loses one sample of 20: its interval reaches 0, marked ~.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("\\| `bad` \\| -0\\.60 \\[(-0\\.[0-9]+), (-0\\.[0-9]+)\\] n=20 \\|")))
      << summary;
  EXPECT_NEAR(std::stod(m[1]), -0.81, 0.06);
  EXPECT_NEAR(std::stod(m[2]), -0.39, 0.06);
  EXPECT_TRUE(std::regex_search(summary, std::regex("\\| `same` \\| -0\\.05 \\[-0\\.[0-9]+, \\+0\\.00\\] n=20 ~ \\|")))
      << summary;
  // results.csv: the point's own interval and its paired difference.
  std::ifstream csv(dir + "/results.csv");
  std::string header, line;
  std::getline(csv, header);
  std::vector<std::string> h;
  std::stringstream hs(header);
  for (std::string x; std::getline(hs, x, ',');) h.push_back(x);
  std::map<std::string, std::string> bad0;
  while (std::getline(csv, line)) {
    std::vector<std::string> v;
    std::stringstream vs(line);
    for (std::string x; std::getline(vs, x, ',');) v.push_back(x);
    if (v.size() > 3 && v[3] == "bad" && v[0] == "2") {
      for (size_t i = 0; i < h.size() && i < v.size(); ++i) bad0[h[i]] = v[i];
    }
  }
  EXPECT_EQ(bad0["n_samples"], "10");
  EXPECT_EQ(bad0["accuracy_lo"], "0.4902");  // 8 of 10
  EXPECT_EQ(bad0["accuracy_hi"], "0.9433");
  EXPECT_EQ(bad0["accuracy_delta"], "-0.2");
  EXPECT_EQ(bad0["accuracy_delta_hi"], "0");  // a bootstrap of 8 zeros and 2 minus ones reaches 0
  fs::remove_all(dir);
}

TEST(SweepRecordsTest, RepeatedPointsKeepOneAndSaySo) {
  const std::string dir = TempDir("dups");
  std::string summary;
  ASSERT_TRUE(Report(dir, {Record(0, "a"), Record(1, "b"), Record(0, "a"), Record(1, "b"), Record(1, "b")}, &summary)
                  .ok());
  EXPECT_NE(summary.find("2 point(s) have more than one record in results.jsonl (3 extra, 2 point(s) with two or "
                         "more ok records); the tables keep one record per point"),
            std::string::npos)
      << summary;
  // Records without per-sample values count as one unit each, and the summary says so.
  EXPECT_NE(summary.find("2 record(s) hold no per-sample values"), std::string::npos) << summary;
  std::ifstream csv(dir + "/results.csv");
  std::string line;
  int rows = -1;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 2);
  fs::remove_all(dir);
}

// One record per key: an ok one over an error, then the latest (or the first),
// ordered by index and then by key.
TEST(SweepRecordsTest, OneRecordPerKeyPrefersOkThenLatestOrFirst) {
  auto rec = [](const std::string& key, int index, const std::string& status, int n) {
    return nlohmann::ordered_json{{"key", key}, {"index", index}, {"status", status}, {"n", n}};
  };
  const std::vector<nlohmann::ordered_json> records = {
      rec("c", 2, "error", 0), rec("c", 2, "ok", 1),    rec("c", 2, "ok", 2),    rec("c", 2, "error", 3),
      rec("b", 1, "error", 4), rec("b", 1, "error", 5), rec("a", 1, "ok", 6),    rec("d", 0, "ok", 7)};
  auto picked = [](const std::vector<nlohmann::ordered_json>& recs) {
    std::vector<std::string> out;
    for (const auto& r : recs) out.push_back(r["key"].get<std::string>() + std::to_string(r["n"].get<int>()));
    return out;
  };
  EXPECT_EQ(picked(OneRecordPerKey(records)), (std::vector<std::string>{"d7", "a6", "b5", "c2"}));
  EXPECT_EQ(picked(OneRecordPerKey(records, RepeatedRecord::kFirst)), (std::vector<std::string>{"d7", "a6", "b4", "c1"}));
}

// A tiny sweep on the random-weight preset: the baseline and one sink setting.
SweepConfig TinySweep(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "keys values cache ";
  std::ofstream(dir + "/text.txt") << text;
  return Parse(dir, "name = \"locked\"\nmodels = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [32]\nthreads = 1\n"
                    "[task.bpb]\ntext = \"text.txt\"\nprefill = 8\n"
                    "[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nn_sink = 2\nwindow = 8\n");
}

TEST(SweepLockTest, ASecondRunRefusesNamingTheHolder) {
  const std::string dir = TempDir("refuse");
  const SweepConfig c = TinySweep(dir);
  fs::create_directories(dir + "/out");
  std::unique_ptr<ResultsDirLock> held;  // this process plays the first run
  ASSERT_TRUE(ResultsDirLock::Acquire(dir + "/out", false, "run", &held).ok());
  std::string report;
  const Status s = RunSweep(c, Quiet(dir + "/out"), &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/out is in use by another kvlab process (pid " + std::to_string(getpid()) +
                             ", holding " + dir + "/out/.kvlab.lock); nothing was run"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(fs::exists(dir + "/out/results.jsonl"));
  held.reset();
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  EXPECT_EQ(Records(dir + "/out").size(), ExpandPoints(c).size());
  // A merge neither reads a shard that a run holds nor writes into a held directory.
  ASSERT_TRUE(ResultsDirLock::Acquire(dir + "/out", false, "run", &held).ok());
  std::string merged;
  Status m = MergeResults({dir + "/out"}, dir + "/m", &merged);
  EXPECT_NE(m.message().find(dir + "/out is in use by another kvlab process"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("nothing was merged"), std::string::npos) << m.message();
  held.reset();
  fs::create_directories(dir + "/m");
  ASSERT_TRUE(ResultsDirLock::Acquire(dir + "/m", false, "run", &held).ok());
  m = MergeResults({dir + "/out"}, dir + "/m", &merged);
  EXPECT_NE(m.message().find(dir + "/m is in use by another kvlab process"), std::string::npos) << m.message();
  held.reset();
  EXPECT_TRUE(MergeResults({dir + "/out"}, dir + "/m", &merged).ok());
  fs::remove_all(dir);
}

// Two runs on one directory at once: the second waits for the first, then
// finds every point recorded: no point twice, no torn line.
TEST(SweepLockTest, ASecondRunWaitsThenRunsNothingTwice) {
  const std::string dir = TempDir("wait");
  const SweepConfig c = TinySweep(dir);
  const size_t n = ExpandPoints(c).size();
  fs::create_directories(dir + "/out");
  std::unique_ptr<ResultsDirLock> held;
  ASSERT_TRUE(ResultsDirLock::Acquire(dir + "/out", false, "run", &held).ok());
  RunSweepOptions wait = Quiet(dir + "/out");
  wait.wait_if_locked = true;
  std::promise<std::string> waiting;
  wait.on_lock_wait = [&](const std::string& pid) { waiting.set_value(pid); };
  std::string first, second;
  Status s1, s2;
  std::thread waiter([&] { s2 = RunSweep(c, wait, &second); });
  // The waiter found the directory held (by this test, as by a first run), and
  // has written nothing; then the holder lets go.
  EXPECT_EQ(waiting.get_future().get(), std::to_string(getpid()));
  EXPECT_FALSE(fs::exists(dir + "/out/results.jsonl"));
  held.reset();
  waiter.join();
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_NE(second.find("ran " + std::to_string(n) + " of " + std::to_string(n) + " points"), std::string::npos)
      << second;
  EXPECT_NE(second.find("waited for pid " + std::to_string(getpid()) + " first"), std::string::npos) << second;
  s1 = RunSweep(c, Quiet(dir + "/out"), &first);  // a rerun finds everything done
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  EXPECT_NE(first.find("ran 0 of " + std::to_string(n) + " points"), std::string::npos) << first;
  const auto recs = Records(dir + "/out");
  std::set<std::string> keys;
  for (const auto& r : recs) keys.insert(r["key"].get<std::string>());
  EXPECT_EQ(recs.size(), n);
  EXPECT_EQ(keys.size(), n);
  fs::remove_all(dir);
}

TEST(SweepConfigNameTest, DotDotIsNotASweepName) {
  const std::string dir = TempDir("dotdot");
  std::ofstream(dir + "/s.toml") << "name = \"..\"\nmodels = [\"small\"]\ntasks = [\"bpb\"]\n";
  SweepConfig c;
  const Status s = LoadSweepConfig(dir + "/s.toml", {}, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/s.toml:1:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'name' must be a non-empty word (not '.' or '..', no '/')"), std::string::npos);
  const Status set = LoadSweepConfig(dir + "/s.toml", {"name=."}, &c);
  EXPECT_NE(set.message().find("not '.' or '..'"), std::string::npos) << set.message();
  // A config built in code with such a name is refused by the run, not written to ./
  SweepConfig built = TinySweep(dir);
  built.name = "..";
  std::string report;
  RunSweepOptions o = Quiet("");
  const Status run = RunSweep(built, o, &report);
  EXPECT_NE(run.message().find("sweep name '..' is not a directory name under results/"), std::string::npos)
      << run.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// Sizes a sweep config gives are bounded at parse time, before any point runs:
// one error at FILE:LINE:COL naming the key and both numbers.
TEST(SweepLimitsTest, SizesAndNumbersNameTheKeyAndBothNumbers) {
  const std::string dir = sweep_test::TempDir("sweep_records_test", "limits");
  const std::string head = "models = [\"small\"]\ntasks = [\"bpb\", \"passkey\", \"paging\", \"latency\"]\n";
  const std::pair<std::string, std::string> cases[] = {
      {"lengths = [9223372036854775807]\n", ":3:11: 'lengths' entry is 9223372036854775807, more than 16777216"},
      {"batch_sizes = [1, 100000000]\n", "'batch_sizes' entry is 100000000, more than 65536"},
      {"block_size = 4294967312\n", "'block_size' is 4294967312, more than 4096"},  // not wrapped to 16
      {"threads = 100000\n", "'threads' is 100000, more than 1024"},
      {"repetitions = 9223372036854775807\n", "'repetitions' is 9223372036854775807, more than 1048576"},
      {"[task.passkey]\ndepths = [0.5, nan]\n", "'task.passkey.depths' entry is nan; expected a finite number in [0, 1]"},
      {"[task.paging]\nsigma = inf\n", "'task.paging.sigma' is inf; expected a finite number in [0, 4]"},
      {"[task.paging]\nrequests = 9223372036854775807\n", "'task.paging.requests' is 9223372036854775807, more than"},
      {"[task.paging]\nblock_sizes = [16, 4294967312]\n", "'task.paging.block_sizes' entry is 4294967312, more than 4096"},
      {"[task.latency]\ndecode_tokens = 9223372036854775807\n", "'task.latency.decode_tokens' is 9223372036854775807"},
  };
  for (const auto& [text, want] : cases) {
    std::ofstream(dir + "/s.toml", std::ios::trunc) << head << text;
    SweepConfig c;
    const Status s = LoadSweepConfig(dir + "/s.toml", {}, &c);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(dir + "/s.toml:"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
  // Grids and points are counted before they are expanded.
  auto list = [](int n, int first) {
    std::string l = "[";
    for (int i = 0; i < n; ++i) l += (i ? ", " : "") + std::to_string(first + i);
    return l + "]";
  };
  const std::pair<std::string, std::string> counts[] = {
      {"[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nn_sink = " + list(1100, 1) + "\nwindow = " + list(1000, 16) + "\n",
       ": [[sweep]] 1 expands to 1100000 stacks, more than 1048576 (kvlab's limit)"},
      {"lengths = " + list(1100, 16) + "\nseeds = " + list(1000, 0) + "\n",
       ": the sweep expands to 4400000 points (models x stacks x tasks x lengths x batch_sizes x seeds x repetitions), "
       "more than 1048576"},
  };
  for (const auto& [text, want] : counts) {
    std::ofstream(dir + "/s.toml", std::ios::trunc) << head << text;
    SweepConfig c;
    const Status s = LoadSweepConfig(dir + "/s.toml", {}, &c);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(dir + "/s.toml: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
  // The same through --set.
  std::ofstream(dir + "/s.toml", std::ios::trunc) << head;
  SweepConfig c;
  const Status set = LoadSweepConfig(dir + "/s.toml", {"lengths=[1099511627776]"}, &c);
  EXPECT_NE(set.message().find("'lengths' entry is 1099511627776, more than 16777216"), std::string::npos)
      << set.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
