// Full disks and I/O errors on every write of a sweep, a merge and an export
// (FaultyResultsIO, evals/results_io_fault.h): for each write and each fsync
// in turn, failing with ENOSPC and then with EIO, the command returns an error
// naming the file and the cause, no complete record written before is lost
// or torn, results.csv, summary.md and config.toml are each the previous
// version or the new whole one, no temporary file is left, and a rerun
// without faults runs exactly the points that are missing.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "evals/export_kvpress.h"
#include "evals/results_io_fault.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Op = FaultyResultsIO::Op;

std::string TempDir(const std::string& name) { return sweep_test::TempDir("sweep_faults_test", name); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Copy(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// The file a failure is about: a temporary file ".NAME.tmp-PID-N" stands for NAME.
std::string Named(const std::string& failed) {
  const fs::path p(failed);
  const std::string b = p.filename().string();
  const size_t t = b.find(".tmp-");
  if (b.size() > 1 && b[0] == '.' && t != std::string::npos) return (p.parent_path() / b.substr(1, t - 1)).string();
  return failed;
}

// Every file under `dir` (recursive) and its bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().lexically_relative(dir).string()] = Slurp(e.path().string());
  }
  return out;
}

void ExpectNoTemporaryFile(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

// results.csv and summary.md as WriteReports makes them from `jsonl`.
std::pair<std::string, std::string> ReportsOf(const std::string& jsonl, const std::string& scratch) {
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  std::ofstream(scratch + "/results.jsonl", std::ios::binary) << jsonl;
  std::string summary;
  const Status s = WriteReports(scratch, &summary);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return {Slurp(scratch + "/results.csv"), Slurp(scratch + "/summary.md")};
}

// The keys of `jsonl`'s records; a line that is not a whole record fails the test.
std::vector<std::string> Keys(const std::string& jsonl) {
  std::vector<std::string> keys;
  std::istringstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(r.is_object() && r.contains("key")) << line;
    if (r.is_object() && r.contains("key")) keys.push_back(r["key"].get<std::string>());
  }
  return keys;
}

// Runs `command` once for each write and each fsync of a clean run (counted
// first), failing it with ENOSPC and with EIO; `check` gets the status and the
// path that failed. Returns the runs made.
template <typename Prepare, typename Command, typename Check>
int ForEveryFault(int64_t writes, int64_t fsyncs, Prepare prepare, Command command, Check check) {
  int runs = 0;
  for (const Op op : {Op::kWrite, Op::kFsync}) {
    for (const int err : {ENOSPC, EIO}) {
      for (int64_t i = 0; i < (op == Op::kWrite ? writes : fsyncs); ++i) {
        SCOPED_TRACE(std::string(op == Op::kWrite ? "write " : "fsync ") + std::to_string(i) + " fails with " +
                     std::strerror(err));
        prepare();
        FaultyResultsIO io(op, i, err);
        Status s;
        {
          ScopedResultsIO scope(&io);
          s = command();
        }
        EXPECT_TRUE(io.fired());
        EXPECT_FALSE(s.ok());
        EXPECT_NE(s.message().find(Named(io.failed_path())), std::string::npos) << s.message();
        EXPECT_NE(s.message().find(std::strerror(err)), std::string::npos) << s.message();
        check(s);
        ++runs;
      }
    }
  }
  return runs;
}

// The tiny sweep: `small`, bpb at one length, the full cache and two sink
// settings, seeds 0 and 1: 6 points. The previous run did seed 0 (3 points).
SweepConfig Sweep(const std::string& dir, const std::vector<std::string>& sets = {}) {
  std::string text;
  const char* words[] = {"keys ", "values ", "cache ", "tokens ", "heads ", "blocks "};
  for (size_t i = 0; text.size() < 400; ++i) text += words[(i * 7 + i / 3) % 6];
  std::ofstream(dir + "/text.txt") << text;
  return sweep_test::Parse(dir, "name = \"faults\"\nmodels = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [48]\n"
                                "seeds = [0, 1]\nthreads = 1\n[task.bpb]\ntext = \"text.txt\"\nprefill = 16\n"
                                "[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nn_sink = 4\nwindow = [16, 24]\n",
                           sets);
}

TEST(SweepFaultTest, EveryWriteOfARunFailingLosesNothing) {
  const std::string dir = TempDir("run");
  const SweepConfig prev = Sweep(dir, {"seeds=[0]"}), full = Sweep(dir);
  const size_t n = ExpandPoints(full).size();
  ASSERT_EQ(n, 6u);
  ASSERT_EQ(ExpandPoints(prev).size(), 3u);
  std::string report;
  ASSERT_TRUE(RunSweep(prev, sweep_test::Quiet(dir + "/prev"), &report).ok()) << report;
  const std::map<std::string, std::string> before = Files(dir + "/prev");
  const std::string jsonl0 = before.at("results.jsonl");
  ASSERT_EQ(Keys(jsonl0).size(), 3u);
  // A clean run from the same state, counted.
  Copy(dir + "/prev", dir + "/count");
  FaultyResultsIO counter(Op::kWrite, -1, 0);
  {
    ScopedResultsIO scope(&counter);
    ASSERT_TRUE(RunSweep(full, sweep_test::Quiet(dir + "/count"), &report).ok()) << report;
  }
  EXPECT_NE(report.find("ran 3 of 6 points"), std::string::npos) << report;
  // The lock's pid, config.toml, 3 records, results.csv, summary.md.
  EXPECT_EQ(counter.writes(), 7);
  // config.toml, results.csv and summary.md each with its directory; each record.
  EXPECT_EQ(counter.fsyncs(), 9);
  const std::string config1 = Slurp(dir + "/count/config.toml");
  ASSERT_NE(config1, before.at("config.toml"));  // the copy names the override of the previous run
  const std::string out = dir + "/f";
  const int runs = ForEveryFault(
      counter.writes(), counter.fsyncs(), [&] { Copy(dir + "/prev", out); },
      [&] { return RunSweep(full, sweep_test::Quiet(out), &report); },
      [&](const Status&) {
        EXPECT_EQ(report.find("wrote"), std::string::npos) << report;  // never claims what it did not do
        // Every record written before is there, byte for byte; none is torn or twice.
        const std::string jsonl = Slurp(out + "/results.jsonl");
        ASSERT_EQ(jsonl.compare(0, jsonl0.size(), jsonl0), 0) << jsonl;
        ASSERT_EQ(jsonl.back(), '\n');
        const std::vector<std::string> keys = Keys(jsonl);
        ASSERT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
        // Each derived file is the previous version or the new whole one.
        const auto [csv1, summary1] = ReportsOf(jsonl, dir + "/scratch");
        const std::string csv = Slurp(out + "/results.csv"), summary = Slurp(out + "/summary.md"),
                          config = Slurp(out + "/config.toml");
        EXPECT_TRUE(csv == before.at("results.csv") || csv == csv1) << csv;
        EXPECT_TRUE(summary == before.at("summary.md") || summary == summary1) << summary;
        EXPECT_TRUE(config == before.at("config.toml") || config == config1) << config;
        ExpectNoTemporaryFile(out);
        // A rerun without faults runs exactly the missing points, and keeps the rest.
        ASSERT_TRUE(RunSweep(full, sweep_test::Quiet(out), &report).ok()) << report;
        EXPECT_NE(report.find("ran " + std::to_string(n - keys.size()) + " of 6 points"), std::string::npos) << report;
        const std::string after = Slurp(out + "/results.jsonl");
        EXPECT_EQ(after.compare(0, jsonl.size(), jsonl), 0);
        const std::vector<std::string> all = Keys(after);
        EXPECT_EQ(all.size(), n);
        EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), n);
      });
  EXPECT_EQ(runs, 2 * (7 + 9));
  fs::remove_all(dir);
}

TEST(SweepFaultTest, EveryWriteOfAMergeFailingLosesNothing) {
  const std::string dir = TempDir("merge");
  const SweepConfig c = Sweep(dir);
  std::string report;
  for (int shard = 0; shard < 2; ++shard) {
    RunSweepOptions o = sweep_test::Quiet(dir + "/s" + std::to_string(shard));
    o.shard = shard;
    o.num_shards = 2;
    ASSERT_TRUE(RunSweep(c, o, &report).ok()) << report;
  }
  const std::vector<std::string> shards = {dir + "/s0", dir + "/s1"};
  ASSERT_TRUE(MergeResults({shards[0]}, dir + "/prev", &report).ok()) << report;
  ASSERT_TRUE(MergeResults(shards, dir + "/whole", &report).ok()) << report;
  const std::map<std::string, std::string> before = Files(dir + "/prev"), whole = Files(dir + "/whole");
  ASSERT_EQ(Keys(whole.at("results.jsonl")).size(), 6u);
  Copy(dir + "/prev", dir + "/count");
  FaultyResultsIO counter(Op::kWrite, -1, 0);
  {
    ScopedResultsIO scope(&counter);
    ASSERT_TRUE(MergeResults(shards, dir + "/count", &report).ok()) << report;
  }
  // Three locks' pids (two shards, the output), results.jsonl, results.csv, summary.md; each file with its directory.
  EXPECT_EQ(counter.writes(), 6);
  EXPECT_EQ(counter.fsyncs(), 6);
  const std::string out = dir + "/f";
  const int runs = ForEveryFault(
      counter.writes(), counter.fsyncs(), [&] { Copy(dir + "/prev", out); },
      [&] { return MergeResults(shards, out, &report); },
      [&](const Status&) {
        const std::map<std::string, std::string> now = Files(out);
        for (const char* f : {"results.jsonl", "results.csv", "summary.md"}) {
          EXPECT_TRUE(now.at(f) == before.at(f) || now.at(f) == whole.at(f)) << f;
        }
        ExpectNoTemporaryFile(out);
        ASSERT_TRUE(MergeResults(shards, out, &report).ok()) << report;
        EXPECT_EQ(Slurp(out + "/results.jsonl"), whole.at("results.jsonl"));
      });
  EXPECT_EQ(runs, 2 * (6 + 6));
  fs::remove_all(dir);
}

TEST(SweepFaultTest, EveryWriteOfAnExportFailingLeavesWholeFiles) {
  const std::string dir = TempDir("export");
  std::string report;
  ASSERT_TRUE(RunSweep(Sweep(dir), sweep_test::Quiet(dir + "/run"), &report).ok()) << report;
  ExportOptions o;
  o.out_dir = dir + "/f";
  ASSERT_TRUE(ExportResults(dir + "/run", o, &report).ok()) << report;
  const std::map<std::string, std::string> whole = Files(o.out_dir);
  fs::remove_all(o.out_dir);
  FaultyResultsIO counter(Op::kWrite, -1, 0);
  {
    ScopedResultsIO scope(&counter);
    ASSERT_TRUE(ExportResults(dir + "/run", o, &report).ok()) << report;
  }
  // Three runs (the full cache and two sink windows), three files each, each with its directory.
  EXPECT_EQ(whole.size(), 9u);
  EXPECT_EQ(counter.writes(), 9);
  EXPECT_EQ(counter.fsyncs(), 18);
  const int runs = ForEveryFault(
      counter.writes(), counter.fsyncs(), [&] { fs::remove_all(o.out_dir); },
      [&] { return ExportResults(dir + "/run", o, &report); },
      [&](const Status&) {
        for (const auto& [f, bytes] : Files(o.out_dir)) {
          ASSERT_TRUE(whole.count(f)) << f;
          EXPECT_EQ(bytes, whole.at(f)) << f;
        }
        ExpectNoTemporaryFile(o.out_dir);
        ASSERT_TRUE(ExportResults(dir + "/run", o, &report).ok()) << report;
        EXPECT_EQ(Files(o.out_dir), whole);
      });
  EXPECT_EQ(runs, 2 * (9 + 18));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
