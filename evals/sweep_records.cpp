// results.jsonl as data from outside: records read back bounded (size, depth)
// and checked field by field, appended whole and durably (evals/results_io.h),
// one kept per point where a point was recorded more than once, and the lock
// that keeps two runs from writing one results directory at once.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/base/untrusted_json.h"
#include "evals/results_io.h"
#include "evals/sweep_internal.h"

namespace kvlab {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The fields the reports, resume and merge read, and the type each must have.
enum class Kind { kString, kInteger, kBool, kNumber, kObject };
struct FieldSpec {
  const char* name;
  Kind kind;
};
constexpr FieldSpec kFields[] = {
    {"key", Kind::kString},        {"sweep", Kind::kString},       {"config", Kind::kString},
    {"status", Kind::kString},     {"error", Kind::kString},       {"model", Kind::kString},
    {"model_type", Kind::kString}, {"checkpoint", Kind::kString},  {"stack", Kind::kString},
    {"policy", Kind::kString},     {"task", Kind::kString},        {"kv_dtype", Kind::kString},
    {"git_revision", Kind::kString}, {"machine", Kind::kString},   {"index", Kind::kInteger},
    {"length", Kind::kInteger},    {"batch", Kind::kInteger},      {"seed", Kind::kInteger},
    {"repetition", Kind::kInteger}, {"block_size", Kind::kInteger}, {"baseline", Kind::kBool},
    {"allow_long_context", Kind::kBool}, {"wall_s", Kind::kNumber}, {"metrics", Kind::kObject},
};

bool HasKind(const json& v, Kind k) {
  switch (k) {
    case Kind::kString: return v.is_string();
    case Kind::kInteger: return v.is_number_integer();
    case Kind::kBool: return v.is_boolean();
    case Kind::kNumber: return v.is_number();
    case Kind::kObject: return v.is_object();
  }
  return false;
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kString: return "a string";
    case Kind::kInteger: return "an integer";
    case Kind::kBool: return "true or false";
    case Kind::kNumber: return "a number";
    case Kind::kObject: return "an object";
  }
  return "?";
}

bool IsDecimal(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) if (c < '0' || c > '9') return false;
  return true;
}

Status CheckMetrics(const json& r, const std::string& where);

// `where` is "PATH:LINE".
Status CheckRecord(const json& r, const std::string& where) {
  if (!r.is_object()) return Status::InvalidArgument(where + ": a record must be a JSON object, got " + QuoteJson(r));
  for (const FieldSpec& f : kFields) {
    const auto it = r.find(f.name);
    if (it != r.end() && !HasKind(*it, f.kind)) {
      return Status::InvalidArgument(where + ": field '" + f.name + "' is " + QuoteJson(*it) + ", expected " +
                                     KindName(f.kind));
    }
  }
  KVLAB_RETURN_IF_ERROR(CheckMetrics(r, where));
  // What resume and the reports count a record by: a record without its key,
  // or with a status other than the two `kvlab run` writes, would be run
  // again and reported beside the point it belongs to.
  const auto key = r.find("key");
  if (key == r.end() || key->get_ref<const std::string&>().empty()) {
    return Status::InvalidArgument(where + ": the record has no 'key' (the point it records; edit or remove "
                                   "that line, nothing was changed)");
  }
  // A key is the JSON text of the point's settings (an object), as `kvlab run`
  // writes it; any other text matches no point, so resume would run the point
  // again and the reports would count both records.
  const std::string& key_text = key->get_ref<const std::string&>();
  const bool key_ok = CheckJsonText(key_text, where, kMaxRecordBytes).ok() &&
                      json::parse(key_text, nullptr, /*allow_exceptions=*/false).is_object();
  if (!key_ok) {
    return Status::InvalidArgument(where + ": field 'key' is " + QuoteJson(*key) +
                                   ", expected the JSON text of a point's settings (an object), as kvlab run writes "
                                   "it (edit or remove that line, nothing was changed)");
  }
  const auto status = r.find("status");
  if (status == r.end()) {
    return Status::InvalidArgument(where + ": the record has no 'status' (\"ok\" or \"error\"; edit or remove "
                                   "that line, nothing was changed)");
  }
  if (*status != "ok" && *status != "error") {
    return Status::InvalidArgument(where + ": field 'status' is " + QuoteJson(*status) +
                                   ", expected \"ok\" or \"error\" (edit or remove that line, nothing was changed)");
  }
  return Status::OK();
}

// The metrics' nested parts the reports read.
Status CheckMetrics(const json& r, const std::string& where) {
  const auto m = r.find("metrics");
  if (m == r.end()) return Status::OK();
  for (const char* sub : {"memory", "paged_utilization_by_block_size"}) {
    const auto it = m->find(sub);
    if (it != m->end() && !it->is_object()) {
      return Status::InvalidArgument(where + ": field 'metrics." + sub + "' is " + QuoteJson(*it) +
                                     ", expected an object");
    }
  }
  // Per-sample values (the reports' intervals): arrays of numbers, one entry per sample, all as long.
  const auto per = m->find("per_sample");
  if (per != m->end()) {
    if (!per->is_object()) {
      return Status::InvalidArgument(where + ": field 'metrics.per_sample' is " + QuoteJson(*per) + ", expected an object");
    }
    size_t n = 0;
    bool first = true;
    for (const auto& kv : per->items()) {
      const std::string field = "metrics.per_sample." + QuoteBytes(kv.key());
      if (!kv.value().is_array()) {
        return Status::InvalidArgument(where + ": field '" + field + "' is " + QuoteJson(kv.value()) +
                                       ", expected an array of numbers");
      }
      for (const auto& v : kv.value()) {
        if (!v.is_number()) {
          return Status::InvalidArgument(where + ": field '" + field + "' holds " + QuoteJson(v) + ", expected numbers");
        }
      }
      if (!first && kv.value().size() != n) {
        return Status::InvalidArgument(where + ": field '" + field + "' has " + std::to_string(kv.value().size()) +
                                       " entries, the other per-sample fields " + std::to_string(n));
      }
      n = kv.value().size();
      first = false;
    }
  }
  const auto paged = m->find("paged_utilization_by_block_size");
  if (paged != m->end()) {
    for (const auto& kv : paged->items()) {
      if (!IsDecimal(kv.key())) {
        return Status::InvalidArgument(where + ": metrics.paged_utilization_by_block_size has key '" +
                                       QuoteBytes(kv.key()) + "', expected a block size");
      }
    }
  }
  return Status::OK();
}

}  // namespace

Status LoadRecords(const std::string& path, std::vector<json>* records) {
  records->clear();
  std::error_code exists_ec;
  if (!fs::exists(path, exists_ec)) return Status::OK();  // no file yet
  std::string data;
  KVLAB_RETURN_IF_ERROR(ReadFileBounded(path, kMaxResultsBytes, &data));
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    if (nl == std::string::npos) {
      // No newline at the end. A whole JSON text there is a complete record
      // (a proper prefix of a record's object never parses): it is kept, and
      // its newline written. Anything else is the cut-off last record of a
      // killed run (a failed append takes its bytes back itself): dropped.
      const std::string_view tail(data.data() + pos, data.size() - pos);
      const json whole = CheckJsonText(tail, path, kMaxRecordBytes, kMaxNestingDepth, line_no).ok()
                             ? json::parse(tail.begin(), tail.end(), nullptr, /*allow_exceptions=*/false)
                             : json(json::value_t::discarded);
      if (whole.is_discarded()) {
        KVLAB_RETURN_IF_ERROR(TruncateDurable(path, pos));
        std::fprintf(stderr, "kvlab: %s: dropped a partial last record (a run killed while writing it)\n",
                     where.c_str());
        break;
      }
      KVLAB_RETURN_IF_ERROR(CheckRecord(whole, where));
      KVLAB_RETURN_IF_ERROR(AppendDurable(path, "\n", "the newline that ends its last record (line " +
                                                           std::to_string(line_no) + ")"));
      nl = data.size();
    }
    const std::string_view line(data.data() + pos, nl - pos);
    if (!line.empty()) {
      KVLAB_RETURN_IF_ERROR(CheckJsonText(line, path, kMaxRecordBytes, kMaxNestingDepth, line_no));
      json r;
      try {
        r = json::parse(line.begin(), line.end());
      } catch (const std::exception&) {
        return Status::InvalidArgument(where + ": not a JSON record (edit or remove that line; nothing was changed)");
      }
      KVLAB_RETURN_IF_ERROR(CheckRecord(r, where));
      records->push_back(std::move(r));
    }
    pos = nl + 1;
  }
  return Status::OK();
}

Status AppendRecord(const std::string& path, const json& record) {
  const json& index = record.contains("index") ? record["index"] : json();
  return AppendDurable(path, record.dump() + "\n",
                       "the record of point " + (index.is_number_integer() ? index.dump() : std::string("?")));
}

Status CheckResultsDirFiles(const std::string& dir) {
  KVLAB_RETURN_IF_ERROR(CheckAppendable(dir + "/results.jsonl"));
  for (const char* name : {"results.csv", "summary.md", "config.toml"}) {
    KVLAB_RETURN_IF_ERROR(CheckNotALink(dir + "/" + name));
  }
  return Status::OK();
}

std::vector<json> OneRecordPerKey(const std::vector<json>& records, RepeatedRecord keep) {
  std::map<std::string, json> by_key;
  for (const json& r : records) {
    const std::string k = r.value("key", "");
    auto it = by_key.find(k);
    if (it == by_key.end()) {
      by_key.emplace(k, r);
      continue;
    }
    const bool ok = r.value("status", "") == "ok", kept_ok = it->second.value("status", "") == "ok";
    if ((ok && !kept_ok) || (ok == kept_ok && keep == RepeatedRecord::kLatest)) it->second = r;
  }
  std::vector<json> out;
  out.reserve(by_key.size());
  for (auto& kv : by_key) out.push_back(std::move(kv.second));
  std::stable_sort(out.begin(), out.end(),
                   [](const json& a, const json& b) { return a.value("index", 0) < b.value("index", 0); });
  return out;
}

// ---- the results directory's lock ----

ResultsDirLock::~ResultsDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock; the file stays (unlinking it would race a waiter)
}

namespace {

std::string HolderPid(int fd) {
  char buf[32] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos ? "unknown" : pid;
}

}  // namespace

Status ResultsDirLock::Acquire(const std::string& dir, bool wait, const std::string& what,
                               std::unique_ptr<ResultsDirLock>* out,
                               const std::function<void(const std::string&)>& on_wait) {
  std::unique_ptr<ResultsDirLock> lock(new ResultsDirLock());
  lock->path_ = dir + "/" + kLockFileName;
  // Not through a link: the lock file is truncated and written below.
  const Status opened_status = OpenLockFile(lock->path_, &lock->fd_);
  if (opened_status.code() == Status::Code::kInvalidArgument) return opened_status;
  const bool opened = lock->fd_ >= 0;
  if (!opened || ::flock(lock->fd_, LOCK_EX | LOCK_NB) != 0) {
    if (!opened || errno != EWOULDBLOCK) {
      // A file system without locks, or a read-only directory: go on unguarded, and say so.
      const std::string why = opened ? "cannot lock " + lock->path_ + " (" + std::strerror(errno) + ")"
                                     : opened_status.message();
      std::fprintf(stderr, "kvlab: warning: %s; a second process on %s would not be detected\n", why.c_str(),
                   dir.c_str());
      *out = std::move(lock);
      return Status::OK();
    }
    const std::string pid = HolderPid(lock->fd_);
    if (!wait) {
      return Status::ResourceExhausted(dir + " is in use by another kvlab process (pid " + pid + ", holding " +
                                       lock->path_ + "); nothing was " + what + ": wait for it to finish, pass "
                                       "--if-locked wait to queue behind it, or write elsewhere (--out DIR; "
                                       "shards: --shard I/N with one --out per shard, then kvlab merge)");
    }
    if (on_wait) {
      on_wait(pid);
    } else {
      std::fprintf(stderr, "kvlab: %s is in use by another kvlab process (pid %s); waiting for it (--if-locked wait)\n",
                   dir.c_str(), pid.c_str());
    }
    lock->waited_for_ = pid;
    while (::flock(lock->fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return Status::IOError(lock->path_ + ": cannot lock: " + std::strerror(errno));
    }
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  const Status wrote = WriteLockText(lock->fd_, lock->path_, me);
  if (!wrote.ok()) return Status::IOError(wrote.message() + " (recording this process's pid)");
  *out = std::move(lock);
  return Status::OK();
}

}  // namespace kvlab
