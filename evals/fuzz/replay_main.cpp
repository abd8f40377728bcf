// fuzz_replay: every committed input through the fuzz targets, without
// libFuzzer (ctest fuzz_replay_test). For each target compiled in, every file
// of ROOT/corpus/NAME/ and ROOT/regressions/NAME/ is fed to it; a crash, an
// uncaught exception or a sanitizer report ends the process (the file is named
// on stderr first). Fails too when a target has no corpus, or a corpus or
// regression folder names no target.
//   fuzz_replay [ROOT]     ROOT defaults to evals/fuzz
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "evals/fuzz/fuzz_target.h"

namespace fs = std::filesystem;

namespace kvlab {
namespace fuzz {

std::map<std::string, TargetFn>& Targets() {
  static std::map<std::string, TargetFn> targets;
  return targets;
}

bool RegisterTarget(const char* name, TargetFn fn) {
  Targets()[name] = fn;
  return true;
}

namespace {

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

int Replay(const fs::path& root) {
  int failures = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    std::error_code ec;
    if (!fs::is_directory(root / kind, ec)) continue;
    for (const auto& e : fs::directory_iterator(root / kind)) {
      if (e.is_directory() && Targets().count(e.path().filename().string()) == 0) {
        std::fprintf(stderr, "fuzz_replay: %s names no fuzz target\n", e.path().c_str());
        ++failures;
      }
    }
  }
  for (const auto& [name, fn] : Targets()) {
    int64_t counts[2] = {0, 0};
    int k = 0;
    for (const char* kind : {"corpus", "regressions"}) {
      for (const fs::path& file : FilesIn(root / kind / name)) {
        std::ifstream in(file, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::fprintf(stderr, "fuzz_replay: %s < %s\n", name.c_str(), file.c_str());
        fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        ++counts[k];
      }
      ++k;
    }
    std::printf("%-20s %3ld corpus inputs, %3ld regression inputs: all returned\n", name.c_str(),
                static_cast<long>(counts[0]), static_cast<long>(counts[1]));
    if (counts[0] == 0) {
      std::fprintf(stderr, "fuzz_replay: no seed corpus in %s\n", (root / "corpus" / name).c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace fuzz
}  // namespace kvlab

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "evals/fuzz";
  if (kvlab::fuzz::Targets().empty()) {
    std::fprintf(stderr, "fuzz_replay: no targets compiled in\n");
    return 1;
  }
  return kvlab::fuzz::Replay(root);
}
