// One fuzz target per parser of untrusted input (evals/fuzz/README.md). Each
// fuzz_NAME.cpp body is written once, as KVLAB_FUZZ_TARGET(NAME) { ... }:
//   - in the libFuzzer build (KVLAB_FUZZ=ON, clang) it is LLVMFuzzerTestOneInput,
//     one executable per target;
//   - in the ordinary build (KVLAB_FUZZ_REPLAY) it registers itself under NAME,
//     and fuzz_replay (replay_main.cpp) feeds it every file of corpus/NAME/ and
//     regressions/NAME/ (ctest fuzz_replay_test).
// A body returns 0 whatever the parser says: errors are expected; a crash, a
// sanitizer report, an uncaught exception or a hang is the finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlab {
namespace fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);
// Adds a target to the replay table (replay_main.cpp); returns true.
bool RegisterTarget(const char* name, TargetFn fn);

// Writes the bytes to DIR/NAME in a directory of this process's own (made on
// first use, removed at exit) and returns the path: for the parsers whose
// entry point is a file path.
std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size);
// The scratch directory itself (for entry points that take a directory).
const std::string& ScratchDir();

}  // namespace fuzz
}  // namespace kvlab

#ifdef KVLAB_FUZZ_REPLAY
#define KVLAB_FUZZ_TARGET(name)                                                                          \
  static int KvlabFuzz_##name(const uint8_t* data, size_t size);                                          \
  [[maybe_unused]] static const bool kvlab_fuzz_registered_##name =                                        \
      ::kvlab::fuzz::RegisterTarget(#name, KvlabFuzz_##name);                                             \
  static int KvlabFuzz_##name(const uint8_t* data, size_t size)
#else
#define KVLAB_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif
