// Tests' ResultsIO (evals/results_io.h) that fails on purpose, as LevelDB's
// fault-injection test environment does: it counts the writes and the fsyncs
// that reach it, and makes the Nth of one kind fail with a chosen errno. From
// then on the disk stays broken: every later write, fsync and rename fails
// with the same errno (cutting a file shorter, closing and unlinking still
// work, as on a full disk). An ENOSPC write first lands half its bytes and
// returns that short count, as a filling disk does; the next write fails.
#pragma once

#include <cerrno>
#include <map>
#include <string>

#include "evals/results_io.h"

namespace kvlab {

class FaultyResultsIO : public ResultsIO {
 public:
  enum class Op { kWrite, kFsync };
  // fail_at < 0: count only, never fail.
  FaultyResultsIO(Op op, int64_t fail_at, int err) : op_(op), fail_at_(fail_at), err_(err) {}

  int Open(const std::string& path, int flags, mode_t mode) override {
    const int fd = base_.Open(path, flags, mode);
    if (fd >= 0) paths_[fd] = path;
    return fd;
  }
  ssize_t Write(int fd, const void* data, size_t n) override {
    if (broken_) return Fail();
    if (op_ == Op::kWrite && writes_ == fail_at_) {
      ++writes_;
      Break(fd);
      if (err_ == ENOSPC && n > 1) return base_.Write(fd, data, n / 2);
      return Fail();
    }
    ++writes_;
    return base_.Write(fd, data, n);
  }
  int Fsync(int fd) override {
    if (broken_) return Fail();
    if (op_ == Op::kFsync && fsyncs_ == fail_at_) {
      ++fsyncs_;
      Break(fd);
      return Fail();
    }
    ++fsyncs_;
    return base_.Fsync(fd);
  }
  int Ftruncate(int fd, off_t size) override { return base_.Ftruncate(fd, size); }
  int Close(int fd) override {
    paths_.erase(fd);
    return base_.Close(fd);
  }
  int Rename(const std::string& from, const std::string& to) override {
    if (broken_) return Fail();
    return base_.Rename(from, to);
  }
  int Unlink(const std::string& path) override { return base_.Unlink(path); }

  int64_t writes() const { return writes_; }
  int64_t fsyncs() const { return fsyncs_; }
  bool fired() const { return !failed_path_.empty(); }
  // The file (or directory) whose write or fsync failed first.
  const std::string& failed_path() const { return failed_path_; }

 private:
  void Break(int fd) {
    broken_ = true;
    auto it = paths_.find(fd);
    failed_path_ = it == paths_.end() ? "?" : it->second;
  }
  int Fail() {
    errno = err_;
    return -1;
  }
  PosixResultsIO base_;
  Op op_;
  int64_t fail_at_;
  int err_;
  int64_t writes_ = 0, fsyncs_ = 0;
  bool broken_ = false;
  std::string failed_path_;
  std::map<int, std::string> paths_;
};

}  // namespace kvlab
