// Internals shared by sweep_run.cpp and sweep_report.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evals/stats.h"
#include "evals/sweep.h"
#include "evals/tasks/task.h"

namespace kvlab {

// Runs points through the task registry (evals/tasks/task.h), lending each
// task the caches below.
class SweepRunner final : public TaskContext {
 public:
  explicit SweepRunner(const SweepConfig& config) : config_(config) {}
  // The point's metrics (a JSON object), or the error that stopped it.
  Status RunPoint(const SweepPoint& p, nlohmann::ordered_json* metrics);
  // "sha256:..." of model.safetensors, or the preset's name.
  std::string CheckpointHash(const std::string& model);

  // TaskContext
  const SweepConfig& config() const override { return config_; }
  Status Tokens(const SweepPoint& p, const std::string& path, const TaskTokens** out) override;
  Status ModelTokenizer(const SweepPoint& p, const Tokenizer** out) override;
  Status Text(const std::string& path, const std::string** out) override;
  std::map<std::string, std::vector<float>>* logits_cache() override { return &baseline_logits_; }

 private:
  Status CachedText(const std::string& path, std::string* out);
  const SweepConfig& config_;
  std::map<std::string, std::string> texts_, hashes_;
  std::map<std::string, TaskTokens> tokens_;  // by model and path
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers_;  // by model
  std::map<std::string, std::vector<float>> baseline_logits_;
};

// One line on stderr, rewritten in place: bar, points done, ETA, current point.
class ProgressBar {
 public:
  ProgressBar(int64_t total, bool on) : total_(total), on_(on), start_(std::chrono::steady_clock::now()) {}
  void Update(const std::string& what, double est_done, double est_total);
  void Done(const std::string& message);
  void Finish(double seconds);

 private:
  int64_t total_, done_ = 0;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

// Reads results.jsonl (evals/sweep_records.cpp); a partial last line (a run
// killed mid-write) is cut off the file, while a complete last record that
// lacks only its newline is kept and the newline written. Each line is bounded
// (kMaxRecordBytes, kMaxNestingDepth) and its fields checked for the types the
// reports read, so a bad record is one error naming PATH:LINE and the field.
Status LoadRecords(const std::string& path, std::vector<nlohmann::ordered_json>* records);
// Appends one record as a line: written, fsynced and closed, or, on any
// failure, taken back out and an error naming the file, the point and the
// cause (AppendDurable, evals/results_io.h).
Status AppendRecord(const std::string& path, const nlohmann::ordered_json& record);
// One record per point ("key") of `records`, taken in the order they were
// written: an ok record wins over an error, and of two alike the latest wins
// (the first with kFirst: a merge keeps the first directory's). Ordered by
// "index", then by key.
enum class RepeatedRecord { kLatest, kFirst };
std::vector<nlohmann::ordered_json> OneRecordPerKey(const std::vector<nlohmann::ordered_json>& records,
                                                    RepeatedRecord keep = RepeatedRecord::kLatest);

// An error naming the first of DIR's results.jsonl, results.csv, summary.md and
// config.toml that is a symbolic link (a run or a merge writes them), or a
// results.jsonl that an append could not write (CheckAppendable).
Status CheckResultsDirFiles(const std::string& dir);

// An exclusive flock on DIR/.kvlab.lock, held while a run (or a merge) reads and
// writes DIR, so that two processes never compute and append the same points.
// The holder's pid is written in the file for the message a second process gets.
class ResultsDirLock {
 public:
  static constexpr const char* kLockFileName = ".kvlab.lock";
  // Locks DIR (which must exist). Held by another process: with `wait`, calls
  // on_wait(holder's pid) (default: a line on stderr) and blocks until it is
  // free; without, an error naming the holder's pid ("nothing was WHAT").
  // Where the file system has no locks: a warning, and OK.
  static Status Acquire(const std::string& dir, bool wait, const std::string& what,
                        std::unique_ptr<ResultsDirLock>* out,
                        const std::function<void(const std::string&)>& on_wait = nullptr);
  ~ResultsDirLock();
  // The pid that held the lock when this process had to wait for it ("" if it did not).
  const std::string& waited_for() const { return waited_for_; }

 private:
  ResultsDirLock() = default;
  std::string path_, waited_for_;
  int fd_ = -1;
};

// ---- the reports' intervals (evals/sweep_intervals.cpp, on evals/stats.h) ----

// The units a record contributes to the mean of `metric`: its
// metrics.per_sample[metric] (one value per sample, or per window for bpb)
// when recorded, else the point's own value as one unit (records made before
// per-sample values were kept; *per_sample false); empty when it has neither.
std::vector<double> MetricUnits(const nlohmann::ordered_json& r, const std::string& metric, bool* per_sample = nullptr);

// A report cell: the mean of a metric over the units of its records, with its
// interval (MeanInterval: Wilson for per-sample exact-match `accuracy` of 0s
// and 1s, else the bootstrap), and the
// paired difference from the baseline: the bootstrap of the per-unit
// differences from each record's baseline record (same model, task, length,
// seed and repetition, hence the same samples). delta.n is 0 when no record
// pairs (a baseline row, or no baseline). Seeded by `seed_text`.
struct CellStats {
  Interval value, delta;
  int64_t groups = 0;  // ComputeAverage: the groups (tasks) averaged
};
using BaselineOf = std::function<const nlohmann::ordered_json*(const nlohmann::ordered_json&)>;
CellStats ComputeCell(const std::vector<const nlohmann::ordered_json*>& recs, const std::string& metric,
                      const BaselineOf& base_of, const std::string& seed_text);
// The unweighted average over groups (RULER's average over its tasks) of each
// group's mean: a stratified bootstrap, each group resampled within itself;
// the difference likewise, when every group pairs with its baseline.
CellStats ComputeAverage(const std::vector<std::vector<const nlohmann::ordered_json*>>& groups, const std::string& metric,
                         const BaselineOf& base_of, const std::string& seed_text);
// "0.812 [0.710, 0.890] n=40" (f: printf format of one number; values times
// scale); "0.812 n=1" without an interval; "–" without an estimate.
std::string FormatInterval(const Interval& i, const char* f, double scale = 1.0);
// "+0.012 [+0.004, +0.020] n=8", ending in " ~" when the interval contains 0
// (or there is none): the data cannot tell the setting from the baseline.
std::string FormatDifference(const Interval& i, const char* f, double scale = 1.0);

std::string GitRevision();
std::string MachineDescription(int64_t threads);

}  // namespace kvlab
