// The results directory's write path (evals/results_io.h) without faults:
// names from data mapped to one safe path component, and no write through a
// link: for each writer (`kvlab run`'s results.jsonl, results.csv,
// summary.md, config.toml and .kvlab.lock; `kvlab merge`'s; `kvlab export`'s
// directories and files, and its names from records) a link or a hostile name
// is refused or mapped, the file outside is untouched (content and mtime), and
// the error names the link. Also the torn-line repair of results.jsonl, which
// keeps a complete last record that lacks only its newline.
#include "evals/results_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "evals/export_kvpress.h"
#include "evals/sweep.h"
#include "evals/sweep_internal.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string TempDir(const std::string& name) { return sweep_test::TempDir("results_io_test", name); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file outside the directory under test, and what it must still be.
struct Outside {
  std::string path, content;
  fs::file_time_type mtime;
  explicit Outside(const std::string& p) : path(p), content("outside, not kvlab's: " + p + "\n") {
    std::ofstream(path, std::ios::binary) << content;
    // An mtime in the past, so that a write in the same clock tick still shows.
    mtime = fs::last_write_time(path) - std::chrono::hours(1);
    fs::last_write_time(path, mtime);
  }
  void ExpectUntouched() const {
    EXPECT_EQ(Slurp(path), content) << path;
    EXPECT_EQ(fs::last_write_time(path), mtime) << path;
  }
};

// Every path under `dir` (recursive), relative to it.
std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.insert(e.path().lexically_relative(dir).string());
  return out;
}

// The tiny sweep of these tests: the `small` preset, bpb at one length, the
// full cache and one sink setting.
SweepConfig TinySweep(const std::string& dir) {
  std::string text;
  const char* words[] = {"keys ", "values ", "cache ", "tokens ", "heads ", "blocks "};
  for (size_t i = 0; text.size() < 400; ++i) text += words[(i * 7 + i / 3) % 6];
  std::ofstream(dir + "/text.txt") << text;
  return sweep_test::Parse(dir, "name = \"tiny\"\nmodels = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [48]\nthreads = 1\n"
                                "[task.bpb]\ntext = \"text.txt\"\nprefill = 16\n"
                                "[[sweep]]\n[[sweep.policy]]\nname = \"sink\"\nn_sink = 4\nwindow = 16\n");
}

TEST(SafePathComponentTest, MapsEveryNameToOneComponent) {
  const std::pair<std::string, std::string> cases[] = {
      {"tiny-gqa", "tiny-gqa"},
      {"Qwen/Qwen3-0.6B", "Qwen--Qwen3-0.6B"},  // kvpress's own rule for a model id
      {"../../x", "..--..--x"},
      {"..", "_.."},
      {".", "_."},
      {"", "_"},
      {"...", "_..."},
      {".hidden", ".hidden"},
      {std::string("a\0b", 3), "a_b"},
      {"a\nb\x7f\\c", "a_b__c"},
      {"h\xc3\xa9llo", "h\xc3\xa9llo"},  // UTF-8 kept
  };
  for (const auto& [name, want] : cases) {
    EXPECT_EQ(SafePathComponent(name), want) << name;
    EXPECT_TRUE(IsSafePathComponent(want)) << want;
  }
  // Long names: bounded, cut at a UTF-8 boundary, told apart by the hash of the whole name.
  const std::string long_a = std::string(182, 'a') + "\xc3\xa9" + std::string(300, 'b');
  const std::string long_b = long_a + "c";
  const std::string a = SafePathComponent(long_a), b = SafePathComponent(long_b);
  EXPECT_EQ(a.size(), 182u + 17u);  // the 2-byte character at 182..183 is not split
  EXPECT_EQ(a.substr(0, 182), std::string(182, 'a'));
  EXPECT_EQ(a[182], '-');
  EXPECT_NE(a, b);
  EXPECT_LE(b.size(), kMaxPathComponent);
  EXPECT_TRUE(IsSafePathComponent(a));
  EXPECT_FALSE(IsSafePathComponent(long_a));
  // Whatever the bytes, the result is one component: no '/', not "." or "..", no NUL.
  for (int c = 0; c < 256; ++c) {
    for (const std::string& n : {std::string(1, static_cast<char>(c)), std::string(2, static_cast<char>(c)),
                                 std::string(".") + static_cast<char>(c) + "."}) {
      const std::string s = SafePathComponent(n);
      EXPECT_EQ(s.find('/'), std::string::npos) << c;
      EXPECT_EQ(s.find('\0'), std::string::npos) << c;
      EXPECT_NE(s, ".");
      EXPECT_NE(s, "..");
      EXPECT_FALSE(s.empty());
      EXPECT_EQ(SafePathComponent(s), s) << c;  // a safe name maps to itself
    }
  }
}

// The primitives, each on a link, a dangling link and a second hard link.
TEST(ResultsIOTest, NoPrimitiveWritesThroughALink) {
  const std::string dir = TempDir("primitives");
  fs::create_directories(dir + "/in");
  const Outside victim(dir + "/victim.txt");
  const std::string link = dir + "/in/f";
  fs::create_symlink(victim.path, link);
  Status s = AppendDurable(link, "x\n", "a line");
  EXPECT_NE(s.message().find(link + " is a symbolic link"), std::string::npos) << s.message();
  s = WriteFileAtomic(link, "x\n");
  EXPECT_NE(s.message().find(link + " is a symbolic link"), std::string::npos) << s.message();
  s = TruncateDurable(link, 0);
  EXPECT_NE(s.message().find(link + " is a symbolic link"), std::string::npos) << s.message();
  int fd = -1;
  s = OpenLockFile(link, &fd);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find(link + " is a symbolic link"), std::string::npos) << s.message();
  EXPECT_EQ(fd, -1);
  victim.ExpectUntouched();
  EXPECT_TRUE(fs::is_symlink(link));  // refused, not replaced
  // A dangling link: its target is not created.
  fs::remove(link);
  fs::create_symlink(dir + "/made.txt", link);
  EXPECT_FALSE(AppendDurable(link, "x\n", "a line").ok());
  EXPECT_FALSE(OpenLockFile(link, &fd).ok());
  EXPECT_FALSE(WriteFileAtomic(link, "x\n").ok());
  EXPECT_FALSE(fs::exists(dir + "/made.txt"));
  // A second name for the outside file: appending would write it.
  fs::remove(link);
  fs::create_hard_link(victim.path, link);
  s = AppendDurable(link, "x\n", "a line");
  EXPECT_NE(s.message().find(link + " has 2 hard links"), std::string::npos) << s.message();
  s = OpenLockFile(link, &fd);
  EXPECT_NE(s.message().find(link + " has 2 hard links"), std::string::npos) << s.message();
  victim.ExpectUntouched();
  // Replacing a hard-linked file is fine: rename gives the name a new file.
  ASSERT_TRUE(WriteFileAtomic(link, "new\n").ok());
  EXPECT_EQ(Slurp(link), "new\n");
  victim.ExpectUntouched();
  // A link to a directory where a directory is made.
  fs::create_directories(dir + "/elsewhere");
  fs::create_directory_symlink(dir + "/elsewhere", dir + "/in/d");
  s = MakeDirNoFollow(dir + "/in/d");
  EXPECT_NE(s.message().find(dir + "/in/d is a symbolic link"), std::string::npos) << s.message();
  // Nothing else in the directory: no temporary file left behind.
  EXPECT_EQ(Listing(dir + "/in"), (std::set<std::string>{"f", "d"}));
  fs::remove_all(dir);
}

// `kvlab run` on a results directory holding a link where it writes: an error
// naming the link before any point runs, the link's target untouched.
TEST(ResultsIOTest, RunRefusesALinkInItsDirectory) {
  for (const char* name : {"results.jsonl", "results.csv", "summary.md", "config.toml", ".kvlab.lock"}) {
    const std::string dir = TempDir(std::string("run-link") + name);
    const SweepConfig c = TinySweep(dir);
    const std::string out = dir + "/out";
    fs::create_directories(out);
    const Outside victim(dir + "/victim.txt");
    fs::create_symlink(victim.path, out + "/" + name);
    std::string report;
    const Status s = RunSweep(c, sweep_test::Quiet(out), &report);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(out + "/" + name + " is a symbolic link"), std::string::npos) << s.message();
    EXPECT_EQ(report, "");
    victim.ExpectUntouched();
    EXPECT_FALSE(fs::exists(out + "/results.jsonl") && !fs::is_symlink(out + "/results.jsonl")) << name;
    fs::remove_all(dir);
  }
  // A dangling link: no file is created at its target.
  const std::string dir = TempDir("run-dangling");
  const SweepConfig c = TinySweep(dir);
  fs::create_directories(dir + "/out");
  fs::create_symlink(dir + "/made.jsonl", dir + "/out/results.jsonl");
  std::string report;
  EXPECT_FALSE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok());
  EXPECT_FALSE(fs::exists(dir + "/made.jsonl"));
  // results.jsonl a second name of a file outside: refused before any point runs.
  fs::remove(dir + "/out/results.jsonl");
  const Outside victim(dir + "/victim.jsonl");
  fs::create_hard_link(victim.path, dir + "/out/results.jsonl");
  const Status s = RunSweep(c, sweep_test::Quiet(dir + "/out"), &report);
  EXPECT_NE(s.message().find(dir + "/out/results.jsonl has 2 hard links"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir + "/out/results.csv"));
  victim.ExpectUntouched();
  fs::remove_all(dir);
}

// `kvlab merge` into a directory holding a link where it writes.
TEST(ResultsIOTest, MergeRefusesALinkInItsOutput) {
  const std::string dir = TempDir("merge-link");
  const SweepConfig c = TinySweep(dir);
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/shard"), &report).ok()) << report;
  int i = 0;
  for (const char* name : {"results.jsonl", "results.csv", "summary.md", ".kvlab.lock"}) {
    const std::string out = dir + "/merged" + std::to_string(++i);
    fs::create_directories(out);
    const Outside victim(dir + "/victim" + std::to_string(i));
    fs::create_symlink(victim.path, out + "/" + name);
    const Status s = MergeResults({dir + "/shard"}, out, &report);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(out + "/" + name + " is a symbolic link"), std::string::npos) << s.message();
    victim.ExpectUntouched();
  }
  fs::remove_all(dir);
}

// `kvlab export`: a link where it makes a run's directory or writes a file.
TEST(ResultsIOTest, ExportRefusesALinkWhereItWrites) {
  const std::string dir = TempDir("export-link");
  const SweepConfig c = TinySweep(dir);
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/run"), &report).ok()) << report;
  const std::string run = "kvlab_bpb__48__small__no_press__0.00";
  ExportOptions o;
  o.out_dir = dir + "/clean";
  ASSERT_TRUE(ExportResults(dir + "/run", o, &report).ok()) << report;
  ASSERT_TRUE(fs::exists(dir + "/clean/" + run + "/metrics.json")) << report;
  fs::create_directories(dir + "/elsewhere");
  const Outside victim(dir + "/elsewhere/metrics.json");
  // The run's directory a link to another directory.
  o.out_dir = dir + "/x1";
  fs::create_directories(o.out_dir);
  fs::create_directory_symlink(dir + "/elsewhere", o.out_dir + "/" + run);
  Status s = ExportResults(dir + "/run", o, &report);
  EXPECT_NE(s.message().find(o.out_dir + "/" + run + " is a symbolic link"), std::string::npos) << s.message();
  // A file in it a link.
  o.out_dir = dir + "/x2";
  fs::create_directories(o.out_dir + "/" + run);
  fs::create_symlink(victim.path, o.out_dir + "/" + run + "/metrics.json");
  s = ExportResults(dir + "/run", o, &report);
  EXPECT_NE(s.message().find(o.out_dir + "/" + run + "/metrics.json is a symbolic link"), std::string::npos)
      << s.message();
  // The default output, DIR/kvpress, a link out of the results directory.
  o.out_dir = "";
  fs::create_directory_symlink(dir + "/elsewhere", dir + "/run/kvpress");
  s = ExportResults(dir + "/run", o, &report);
  EXPECT_NE(s.message().find(dir + "/run/kvpress is a symbolic link"), std::string::npos) << s.message();
  victim.ExpectUntouched();
  EXPECT_EQ(Listing(dir + "/elsewhere"), std::set<std::string>{"metrics.json"});
  fs::remove_all(dir);
}

// Names from records (results.jsonl is untrusted input) never leave --out:
// each run's directory is one component, mapped by SafePathComponent.
TEST(ResultsIOTest, ExportNamesFromRecordsStayInsideOut) {
  const std::string dir = TempDir("export-names");
  fs::create_directories(dir + "/a/b/c/results");
  std::ifstream in(sweep_test::Source() + "/evals/fixtures/export/results.jsonl");
  std::string line, ok;
  while (std::getline(in, line)) {
    if (json::parse(line)["task"] == "longbench-hotpotqa") ok = line;
  }
  ASSERT_FALSE(ok.empty());
  // The names a hostile file could give: the model, the task (the run's
  // DATA_DIR), the stack (an unmapped press's name), long and odd bytes.
  const std::string up = "x/../../../../victim";
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"model", up}, {"model", "../../../victim"}, {"task", "longbench-" + up},
      {"model", std::string(400, '.') + "/victim"}, {"model", std::string("a\0/../b", 7)}};
  std::ofstream jsonl(dir + "/a/b/c/results/results.jsonl");
  for (size_t i = 0; i < fields.size(); ++i) {
    json r = json::parse(ok);
    r[fields[i].first] = fields[i].second;
    r["key"] = json{{"point", i}}.dump();  // a point's settings, as a run writes them
    r["index"] = i;
    jsonl << r.dump() << "\n";
  }
  jsonl.close();
  const Outside victim(dir + "/victim.txt");
  const std::set<std::string> before = Listing(dir);
  ExportOptions o;
  o.out_dir = dir + "/a/b/c/out";
  std::string report;
  const Status s = ExportResults(dir + "/a/b/c/results", o, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  victim.ExpectUntouched();
  // Everything new is under out/, and every run directory is a direct child.
  std::set<std::string> added;
  for (const std::string& p : Listing(dir)) {
    if (!before.count(p)) added.insert(p);
  }
  std::set<std::string> runs;
  for (const std::string& p : added) {
    ASSERT_EQ(p.rfind("a/b/c/out", 0), 0u) << p;
    const fs::path rel = fs::path(dir + "/" + p).lexically_relative(o.out_dir);
    if (rel.string() != "." && std::distance(rel.begin(), rel.end()) == 1) runs.insert(rel.string());
  }
  EXPECT_EQ(runs.size(), fields.size()) << report;
  for (const std::string& r : runs) {
    EXPECT_TRUE(IsSafePathComponent(r)) << r;
    EXPECT_TRUE(fs::exists(o.out_dir + "/" + r + "/metrics.json")) << r;
  }
  EXPECT_TRUE(runs.count("longbench__hotpotqa__x--..--..--..--..--victim__no_press__0.00__max_context1024__query_aware"))
      << report;
  fs::remove_all(dir);
}

// The torn-line repair: a cut-off last line is dropped, a complete last record
// without its newline is kept (and the newline written), nothing before it moves.
TEST(ResultsIOTest, TornLineRepairKeepsEveryCompleteRecord) {
  const std::string dir = TempDir("torn");
  const SweepConfig c = TinySweep(dir);
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok()) << report;
  const std::string path = dir + "/out/results.jsonl";
  const std::string full = Slurp(path);
  const size_t second = full.find('\n') + 1;
  ASSERT_EQ(full.back(), '\n');
  // The last record whole but for its newline.
  std::ofstream(path, std::ios::trunc) << full.substr(0, full.size() - 1);
  std::vector<nlohmann::ordered_json> recs;
  ASSERT_TRUE(LoadRecords(path, &recs).ok());
  EXPECT_EQ(recs.size(), 2u);
  EXPECT_EQ(Slurp(path), full);
  // The last record cut: dropped, the first kept byte for byte.
  std::ofstream(path, std::ios::trunc) << full.substr(0, full.size() - 10);
  ASSERT_TRUE(LoadRecords(path, &recs).ok());
  EXPECT_EQ(recs.size(), 1u);
  EXPECT_EQ(Slurp(path), full.substr(0, second));
  // A last line that is JSON but not a record is an error naming it; the file is unchanged.
  std::ofstream(path, std::ios::trunc) << full.substr(0, second) << "[1, 2]";
  const Status s = LoadRecords(path, &recs);
  EXPECT_NE(s.message().find(path + ":2: a record must be a JSON object"), std::string::npos) << s.message();
  EXPECT_EQ(Slurp(path), full.substr(0, second) + "[1, 2]");
  // A run resumes from the repaired file: only the dropped point runs again.
  std::ofstream(path, std::ios::trunc) << full.substr(0, full.size() - 10);
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok()) << report;
  EXPECT_NE(report.find("ran 1 of 2 points"), std::string::npos) << report;
  EXPECT_EQ(sweep_test::Records(dir + "/out").size(), 2u);
  EXPECT_EQ(Slurp(path).substr(0, second), full.substr(0, second));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
