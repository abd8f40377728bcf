// Scratch directories for tests, removed when they are done with. Test-only.
//
// ScopedTempDir makes a new directory under the system's temporary directory
// (std::filesystem::temp_directory_path(): $TMPDIR when set, else /tmp) and
// removes it, with everything in it, when it is destroyed. ProcessTempDir() is
// one such directory for a whole program, removed at its normal exit: for
// files that outlive one scope (a model written once and shared by a test
// program's tests). ctest runs every test with TMPDIR set to a folder of the
// build, and its tmpdir_empty_check fails when a test leaves anything there.
#pragma once

#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

namespace kvlab {

class ScopedTempDir {
 public:
  // The directory is PREFIX followed by six random characters; throws
  // std::system_error when it cannot be made.
  explicit ScopedTempDir(const std::string& prefix = "kvlab_") : owner_(::getpid()) {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp " + name);
    path_ = std::move(name);
  }
  ~ScopedTempDir() { Remove(); }

  ScopedTempDir(ScopedTempDir&& other) noexcept : path_(std::move(other.path_)), owner_(other.owner_) {
    other.path_.clear();
  }
  ScopedTempDir& operator=(ScopedTempDir&& other) noexcept {
    if (this != &other) {
      Remove();
      path_ = std::move(other.path_);
      owner_ = other.owner_;
      other.path_.clear();
    }
    return *this;
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes TEXT (bytes as they are) to path()/NAME and returns that file's path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  // Only the process that made the directory removes it, so that a forked
  // child that exits (a death test's) leaves its parent's files alone.
  void Remove() noexcept {
    if (path_.empty() || ::getpid() != owner_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  std::string path_;
  pid_t owner_;
};

// This program's scratch directory, made on first use and removed when the
// program exits normally. Named after the program, so that one left by a
// crash says whose it is.
inline const std::string& ProcessTempDir() {
#ifdef __GLIBC__
  static const ScopedTempDir dir(std::string("kvlab_") + program_invocation_short_name + "_");
#else
  static const ScopedTempDir dir("kvlab_process_");
#endif
  return dir.path();
}

}  // namespace kvlab
