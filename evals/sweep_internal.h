// Internals shared by sweep_run.cpp and sweep_report.cpp.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evals/sweep.h"

namespace kvlab {

class SweepRunner {
 public:
  explicit SweepRunner(const SweepConfig& config) : config_(config) {}
  // The point's metrics (a JSON object), or the error that stopped it.
  Status RunPoint(const SweepPoint& p, nlohmann::ordered_json* metrics);
  // "sha256:..." of model.safetensors, or the preset's name.
  std::string CheckpointHash(const std::string& model);

 private:
  Status CachedText(const std::string& path, std::string* out);
  // A task's text as token ids of the point's model, without BOS: a token-id
  // file's ids (path ends in .ids), or the text (the file's; the built-in one
  // when path is empty) encoded by the model's tokenizer (LoadTokenizer).
  struct TaskTokens {
    std::vector<int32_t> ids;
    int32_t bos = -1;          // what a window starts with; -1: nothing
    std::string unit = "byte"; // what one id is: "byte" (byte tokenizer) or "token"
  };
  Status CachedTokens(const SweepPoint& p, const std::string& path, const TaskTokens** out);
  Status Paging(const SweepPoint& p, const SweepTaskOptions& o, nlohmann::ordered_json* m);
  const SweepConfig& config_;
  std::map<std::string, std::string> texts_, hashes_;
  std::map<std::string, TaskTokens> tokens_;  // by model and path
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

// Reads results.jsonl; a partial last line (a run killed mid-write) is cut off the file.
Status LoadRecords(const std::string& path, std::vector<nlohmann::ordered_json>* records);
// Appends one record as a line, flushed and fsynced.
Status AppendRecord(const std::string& path, const nlohmann::ordered_json& record);
std::string GitRevision();
std::string MachineDescription();

}  // namespace kvlab
