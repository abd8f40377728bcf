// Scratch files for the fuzz targets whose parsers take a path (fuzz_target.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "evals/fuzz/fuzz_target.h"

namespace kvlab {
namespace fuzz {

namespace {

void RemoveScratch();

std::string MakeScratch() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kvlab-fuzz-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::perror("kvlab fuzz: mkdtemp");
    std::abort();
  }
  std::atexit(RemoveScratch);
  return templ;
}

void RemoveScratch() {
  std::error_code ec;
  std::filesystem::remove_all(ScratchDir(), ec);
}

}  // namespace

const std::string& ScratchDir() {
  // Never destroyed: RemoveScratch runs at exit, after the statics' destructors.
  static const std::string* dir = new std::string(MakeScratch());
  return *dir;
}

std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "kvlab fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace fuzz
}  // namespace kvlab
