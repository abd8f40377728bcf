// The file layer under every write kvlab makes in a results directory
// (`kvlab run`, `kvlab merge`, `kvlab export`): records appended durably,
// derived files (results.csv, summary.md, config.toml, the export's files)
// replaced atomically, and the lock file, none of them opened through a link.
//
// Every call that can fail is checked, and a failure is one Status naming the
// file and the cause (strerror's words: "No space left on device",
// "Input/output error"). The system calls go through one small interface,
// ResultsIO (as LevelDB's Env does), so that a test can swap in an
// implementation that fails the Nth write or fsync (evals/results_io_fault.h).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "core/base/status.h"

namespace kvlab {

// POSIX-shaped: each returns what the system call returns (-1 with errno set
// on failure). PosixResultsIO calls the system; tests wrap it.
class ResultsIO {
 public:
  virtual ~ResultsIO() = default;
  virtual int Open(const std::string& path, int flags, mode_t mode) = 0;
  virtual ssize_t Write(int fd, const void* data, size_t n) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Ftruncate(int fd, off_t size) = 0;
  virtual int Close(int fd) = 0;
  virtual int Rename(const std::string& from, const std::string& to) = 0;
  virtual int Unlink(const std::string& path) = 0;

  // The implementation every write goes through (PosixResultsIO unless a
  // ScopedResultsIO has replaced it).
  static ResultsIO* Current();
};

class PosixResultsIO : public ResultsIO {
 public:
  int Open(const std::string& path, int flags, mode_t mode) override;
  ssize_t Write(int fd, const void* data, size_t n) override;
  int Fsync(int fd) override;
  int Ftruncate(int fd, off_t size) override;
  int Close(int fd) override;
  int Rename(const std::string& from, const std::string& to) override;
  int Unlink(const std::string& path) override;
};

// Makes `io` ResultsIO::Current() for its lifetime (tests; not thread-safe).
class ScopedResultsIO {
 public:
  explicit ScopedResultsIO(ResultsIO* io);
  ~ScopedResultsIO();
  ScopedResultsIO(const ScopedResultsIO&) = delete;
  ScopedResultsIO& operator=(const ScopedResultsIO&) = delete;

 private:
  ResultsIO* previous_;
};

// Appends `bytes` to `path` (created 0644 if missing) in one piece: written,
// fsynced and closed, and the directory fsynced when the file was created.
// Any failure truncates the file back to its size before the call (so a
// record is either whole in the file or not there) and is an IOError
// "PATH: cannot append WHAT: CAUSE". A link at `path`, or a file that is not
// a regular file with one name, is an error naming it; nothing is written.
Status AppendDurable(const std::string& path, const std::string& bytes, const std::string& what);

// Replaces `path` with `bytes`: written to a new temporary file in the same
// directory (".NAME.tmp-PID-N", created with O_EXCL | O_NOFOLLOW), fsynced,
// closed, renamed over `path`, and the directory fsynced. A failure removes
// the temporary file and leaves `path` as it was (an IOError
// "PATH: cannot write: CAUSE (PATH is as it was)"), except when only the
// directory's fsync fails: then `path` holds the new bytes and the error says
// so. A link at `path` is an error naming it (rename would replace the link,
// not write through it, but the user asked for a file there).
Status WriteFileAtomic(const std::string& path, const std::string& bytes);

// Cuts `path` to `size` bytes and fsyncs it, opened without following a link.
Status TruncateDurable(const std::string& path, uint64_t size);

// Opens `path` read-write (created 0644 if missing) without following a link,
// for a lock. A link, or anything but a regular file with one name, is an
// InvalidArgument naming it; a file that cannot be opened (a read-only
// directory) is an IOError with errno's words.
Status OpenLockFile(const std::string& path, int* fd);

// Replaces the lock file's contents (open as `fd`) with `text`.
Status WriteLockText(int fd, const std::string& path, const std::string& text);

// OK when `path` does not exist or is not a symbolic link; else an error
// naming it. Used to check a results directory's files before a run starts.
Status CheckNotALink(const std::string& path);

// OK when `path` does not exist or AppendDurable would write it: an error
// naming a link, a file that is not regular or one with a second hard link.
Status CheckAppendable(const std::string& path);

// Creates directory `path` (its parent must exist), or accepts an existing
// directory; a link or another kind of file there is an error naming it.
Status MakeDirNoFollow(const std::string& path);

// A name from data (a record's model, stack or task; a sweep's name) as one
// safe path component, the rule docs/cli.md gives for `kvlab export`:
//  - each '/' becomes "--" (as kvpress writes a Hugging Face model id);
//  - each NUL, other control byte (0x01-0x1f, 0x7f) and '\\' becomes '_';
//  - a name that is empty or only dots ("", ".", "..") gets '_' in front;
//  - a name longer than kMaxPathComponent bytes keeps its first bytes (cut at
//    a UTF-8 character boundary) and ends in '-' and 16 hex digits of a
//    64-bit FNV-1a hash of the whole name, at most kMaxPathComponent bytes.
// Every other byte is kept. The result has no '/', is not "." or "..", holds
// no NUL and is at most kMaxPathComponent bytes; a safe name maps to itself.
constexpr size_t kMaxPathComponent = 200;
std::string SafePathComponent(const std::string& name);
inline bool IsSafePathComponent(const std::string& name) { return SafePathComponent(name) == name; }

}  // namespace kvlab
