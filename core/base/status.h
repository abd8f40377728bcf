// Room core/base/: the vocabulary every room shares (Status, storage dtypes).
// Anyone may include it; it includes nothing of the project's.
//
// Status: the error value of kvlab's library code (LevelDB style). Library code
// never exits or aborts on bad input; it returns a Status naming the file, the
// key or tensor, and what was expected. The CLI prints it and exits non-zero.
#pragma once

#include <string>
#include <utility>

namespace kvlab {

class Status {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kNotFound, kIOError, kCorruption, kResourceExhausted, kInternal };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status ResourceExhausted(std::string msg) { return Status(Code::kResourceExhausted, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

inline std::string Status::ToString() const {
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument: " + message_;
    case Code::kNotFound: return "not found: " + message_;
    case Code::kIOError: return "I/O error: " + message_;
    case Code::kCorruption: return "corrupt input: " + message_;
    case Code::kResourceExhausted: return "out of resources: " + message_;
    case Code::kInternal: return "internal error: " + message_;
  }
  return message_;
}

// Propagates a non-OK Status to the caller.
#define KVLAB_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::kvlab::Status _kvlab_st = (expr);        \
    if (!_kvlab_st.ok()) return _kvlab_st;     \
  } while (0)

}  // namespace kvlab
