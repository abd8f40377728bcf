// Helpers shared by the sweep harness's tests: a fresh temp directory, the
// records of a results.jsonl, quiet run options, a config written and parsed.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"
#include "evals/sweep.h"

namespace kvlab {
namespace sweep_test {

// The repository root: KVLAB_SOURCE_DIR (ctest sets it), else the working directory.
inline std::string Source() {
  const char* src = std::getenv("KVLAB_SOURCE_DIR");
  return std::filesystem::absolute(src ? src : ".").string();
}

// An empty directory under this program's scratch directory (ProcessTempDir(),
// removed when the program exits).
inline std::string TempDir(const std::string& suite, const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(ProcessTempDir()) / (suite + "_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::vector<nlohmann::json> Records(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/results.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline RunSweepOptions Quiet(const std::string& out) {
  RunSweepOptions o;
  o.out_dir = out;
  o.progress = false;
  o.print_summary = false;
  return o;
}

// Writes `text` to DIR/sweep.toml and parses it (a failure fails the test).
inline SweepConfig Parse(const std::string& dir, const std::string& text, const std::vector<std::string>& sets = {}) {
  const std::string path = dir + "/sweep.toml";
  std::ofstream(path) << text;
  SweepConfig c;
  const Status s = LoadSweepConfig(path, sets, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

}  // namespace sweep_test
}  // namespace kvlab
