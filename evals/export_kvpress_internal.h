// Internals of the kvpress export shared by evals/export_kvpress.cpp (grouping)
// and evals/export_kvpress_write.cpp (the files of one run).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/status.h"
#include "evals/export_kvpress.h"

namespace kvlab {

// kvpress's dataset for a kvlab task.
struct ExportFamily {
  std::string dataset;   // ruler, longbench, longbench-e, longbench-v2, infinitebench, or kvlab_TASK
  std::string data_dir;  // ruler: the length; longbench*: the dataset; infinitebench: the task
  std::string task;      // predictions.csv's task column
  bool predictions = true;   // false: teacher-forced (bpb), nothing generated
  bool max_context = false;  // the length enters the name as max_contextN (dataset tasks)
};

// One predictions.csv row (evaluate.py's columns, `context` dropped as it drops it).
struct ExportRow {
  std::string question, answer_prefix, answers, task, predicted_answer;  // answers: a JSON list
  std::string all_classes, length, difficulty;  // longbench (JSON list; LongBench-E's words), longbench-v2
  int64_t max_new_tokens = -1;
  double compression_ratio = NAN, kvlab_score = NAN;
  bool has_prediction = false;
};

// One kvpress run: the records of one (dataset, data_dir, model, stack, length, mode).
struct ExportGroup {
  ExportFamily family;
  KvpressPress press;
  std::string model;
  int64_t length = 0;
  bool query_aware = true;
  std::vector<const nlohmann::ordered_json*> recs, baselines;  // baselines[i]: recs[i]'s (or null)
  std::vector<double> bytes_ratios;                             // per record (NaN: no baseline)
  // Filled by CollectRows.
  std::vector<ExportRow> rows;
  double compression_ratio = NAN;  // the mean over samples (over records for bpb)
  int64_t samples_without_prediction = 0;
};

// j[key], or null when j is not an object or has no such key (records are read as untrusted data).
const nlohmann::ordered_json& ExportField(const nlohmann::ordered_json& j, const char* key);

// The baseline a record compares with (same model, task, length, batch, seed, repetition).
std::string PeerKeyOf(const nlohmann::ordered_json& r);

// Reads each record's samples into g->rows (checking the types of the fields
// read; errors name `path`, the point's key and the field) and sets the
// compression ratio.
Status CollectRows(const std::string& path, ExportGroup* g);

// Writes predictions.csv (unless the family has none), metrics.json,
// config.yaml and kvlab.json into `dir` (created); `out_root` is config.yaml's output_dir.
Status WriteGroup(const std::string& dir, const std::string& out_root, const ExportGroup& g);

}  // namespace kvlab
