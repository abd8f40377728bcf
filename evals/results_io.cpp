// The checked, link-refusing write path of a results directory (results_io.h).
#include "evals/results_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/base/untrusted.h"

namespace kvlab {

namespace {

ResultsIO* g_current = nullptr;

std::string Cause(int err) { return std::strerror(err); }

std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status LinkError(const std::string& path) {
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target));
  const std::string to = n > 0 ? " (to " + QuoteBytes(std::string_view(target, static_cast<size_t>(n))) + ")" : "";
  return Status::InvalidArgument(path + " is a symbolic link" + to +
                                 "; kvlab writes no file through a link: remove the link or write to another "
                                 "directory (nothing was written through it)");
}

// What an open of `path` without following links that failed with `err` means.
Status OpenError(const std::string& path, int err, const std::string& doing) {
  struct stat st;
  if (err == ELOOP && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return LinkError(path);
  return Status::IOError(path + ": cannot " + doing + ": " + Cause(err));
}

// A file opened for writing must be a regular file with one name: a FIFO or a
// device is not a results file, and a second hard link would carry the write
// to a file outside the directory.
Status CheckFileKind(const struct stat& st, const std::string& path) {
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is not a regular file; kvlab writes only regular files there (nothing "
                                   "was written)");
  }
  if (st.st_nlink != 1) {
    return Status::InvalidArgument(path + " has " + std::to_string(st.st_nlink) +
                                   " hard links; kvlab writes no file that another name shares: copy it "
                                   "(cp FILE FILE.new && mv FILE.new FILE) or write to another directory (nothing "
                                   "was written)");
  }
  return Status::OK();
}

Status CheckOpened(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(path + ": cannot stat: " + Cause(errno));
  return CheckFileKind(st, path);
}

// Writes all of `bytes`; -1 with errno on failure (a write that makes no
// progress is ENOSPC, as a full disk gives).
int WriteAll(ResultsIO* io, int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = io->Write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) {
      errno = ENOSPC;
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

// fsync of a directory, so that a file created or renamed in it survives a
// crash. File systems that cannot sync a directory (EINVAL) count as synced.
int SyncDir(ResultsIO* io, const std::string& dir) {
  const int fd = io->Open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc = io->Fsync(fd);
  const int err = errno;
  if (rc != 0 && err == EINVAL) rc = 0;
  io->Close(fd);
  errno = err;
  return rc;
}

}  // namespace

ResultsIO* ResultsIO::Current() {
  static PosixResultsIO posix;
  return g_current != nullptr ? g_current : &posix;
}

int PosixResultsIO::Open(const std::string& path, int flags, mode_t mode) { return ::open(path.c_str(), flags, mode); }
ssize_t PosixResultsIO::Write(int fd, const void* data, size_t n) { return ::write(fd, data, n); }
int PosixResultsIO::Fsync(int fd) { return ::fsync(fd); }
int PosixResultsIO::Ftruncate(int fd, off_t size) { return ::ftruncate(fd, size); }
int PosixResultsIO::Close(int fd) { return ::close(fd); }
int PosixResultsIO::Rename(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str());
}
int PosixResultsIO::Unlink(const std::string& path) { return ::unlink(path.c_str()); }

ScopedResultsIO::ScopedResultsIO(ResultsIO* io) : previous_(g_current) { g_current = io; }
ScopedResultsIO::~ScopedResultsIO() { g_current = previous_; }

Status AppendDurable(const std::string& path, const std::string& bytes, const std::string& what) {
  ResultsIO* io = ResultsIO::Current();
  bool created = false;
  int fd = io->Open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0 && errno == ENOENT) {
    fd = io->Open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    created = fd >= 0;
  }
  if (fd < 0) return OpenError(path, errno, "open it to append " + what);
  const Status opened = CheckOpened(fd, path);
  struct stat st;
  if (!opened.ok() || ::fstat(fd, &st) != 0) {
    io->Close(fd);
    return opened.ok() ? Status::IOError(path + ": cannot stat: " + Cause(errno)) : opened;
  }
  const off_t before = st.st_size;
  const char* step = "write";
  int rc = WriteAll(io, fd, bytes);
  if (rc == 0) {
    step = "fsync";
    rc = io->Fsync(fd);
  }
  if (rc == 0 && created) {
    step = "fsync of its directory";
    rc = SyncDir(io, ParentDir(path));
  }
  int err = errno;
  if (rc == 0) {
    step = "close";
    if (io->Close(fd) == 0) return Status::OK();
    err = errno;
    fd = io->Open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);  // to take the bytes back out
  }
  // Take back what this call wrote, so the file ends where it ended before.
  std::string after = "; the file is as it was before";
  if (fd < 0 || io->Ftruncate(fd, before) != 0) {
    after = "; the bytes written could not be taken back (" + Cause(errno) +
            "): the next run cuts a partial last line off";
  } else {
    io->Fsync(fd);
  }
  if (fd >= 0) io->Close(fd);
  return Status::IOError(path + ": cannot append " + what + ": " + step + ": " + Cause(err) + after);
}

Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  KVLAB_RETURN_IF_ERROR(CheckNotALink(path));
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is not a regular file; kvlab replaces only regular files (nothing was "
                                   "written)");
  }
  ResultsIO* io = ResultsIO::Current();
  const std::string dir = ParentDir(path), base = BaseName(path);
  static int counter = 0;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = dir + "/." + base + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd = io->Open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  const std::string unchanged = " (" + path + " is as it was)";
  if (fd < 0) return Status::IOError(path + ": cannot write: cannot create " + tmp + ": " + Cause(errno) + unchanged);
  const char* step = "write";
  int rc = WriteAll(io, fd, bytes);
  if (rc == 0) {
    step = "fsync";
    rc = io->Fsync(fd);
  }
  int err = errno;
  if (rc != 0) io->Close(fd);
  if (rc == 0 && io->Close(fd) != 0) {
    step = "close";
    rc = -1;
    err = errno;
  }
  if (rc == 0 && io->Rename(tmp, path) != 0) {
    step = "rename";
    rc = -1;
    err = errno;
  }
  if (rc != 0) {
    io->Unlink(tmp);
    return Status::IOError(path + ": cannot write: " + step + ": " + Cause(err) + unchanged);
  }
  if (SyncDir(io, dir) != 0) {
    return Status::IOError(path + ": written, but the fsync of its directory " + dir + " failed: " + Cause(errno) +
                           " (the new " + base + " may not survive a crash)");
  }
  return Status::OK();
}

Status TruncateDurable(const std::string& path, uint64_t size) {
  ResultsIO* io = ResultsIO::Current();
  const int fd = io->Open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return OpenError(path, errno, "open it to cut it");
  Status s = CheckOpened(fd, path);
  if (s.ok() && (io->Ftruncate(fd, static_cast<off_t>(size)) != 0 || io->Fsync(fd) != 0)) {
    s = Status::IOError(path + ": cannot cut it to " + std::to_string(size) + " bytes: " + Cause(errno));
  }
  if (io->Close(fd) != 0 && s.ok()) s = Status::IOError(path + ": cannot close: " + Cause(errno));
  return s;
}

Status OpenLockFile(const std::string& path, int* fd) {
  *fd = ResultsIO::Current()->Open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (*fd < 0) {
    const Status s = OpenError(path, errno, "open");
    return s;
  }
  const Status s = CheckOpened(*fd, path);
  if (!s.ok()) {
    ResultsIO::Current()->Close(*fd);
    *fd = -1;
  }
  return s;
}

Status WriteLockText(int fd, const std::string& path, const std::string& text) {
  ResultsIO* io = ResultsIO::Current();
  if (io->Ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0 || WriteAll(io, fd, text) != 0) {
    return Status::IOError(path + ": cannot write: " + Cause(errno));
  }
  return Status::OK();
}

Status CheckNotALink(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return LinkError(path);
  return Status::OK();
}

Status CheckAppendable(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::OK();
  if (S_ISLNK(st.st_mode)) return LinkError(path);
  return CheckFileKind(st, path);
}

Status MakeDirNoFollow(const std::string& path) {
  if (::mkdir(path.c_str(), 0777) == 0) return Status::OK();
  const int err = errno;
  struct stat st;
  if (err != EEXIST || ::lstat(path.c_str(), &st) != 0) {
    return Status::IOError(path + ": cannot create directory: " + Cause(err));
  }
  if (S_ISLNK(st.st_mode)) return LinkError(path);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + " exists and is not a directory (nothing was written)");
  return Status::OK();
}

std::string SafePathComponent(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (const char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '/') {
      out += "--";
    } else if (u < 0x20 || u == 0x7f || c == '\\') {
      out += '_';
    } else {
      out += c;
    }
  }
  if (out.find_first_not_of('.') == std::string::npos) out.insert(0, "_");
  if (out.size() <= kMaxPathComponent) return out;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, h);
  size_t keep = kMaxPathComponent - 17;
  while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 character
  return out.substr(0, keep) + "-" + hex;
}

}  // namespace kvlab
