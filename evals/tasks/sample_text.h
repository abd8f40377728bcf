// The texts of a generation task's samples, kept in its record so that a
// point's outputs can be read (and exported: evals/export_kvpress.h) after
// the run: what the model generated (metrics.predictions) and, per sample,
// the question, the references and labels (metrics.sample_text). Called by
// the generation tasks (RULER, LongBench, InfiniteBench, passkey, ...).
//
// Bounded so that records stay small: a prediction is kept to 2,000 bytes,
// a question to 1,000, a sample's references to 4,000 bytes together (16 at
// most), each as valid UTF-8 (KeptText); once a record's texts pass 4 MiB
// the later samples keep empty texts and metrics.sample_text_dropped counts
// them (the record line limit is 16 MiB).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvlab {

constexpr size_t kMaxPredictionBytes = 2000;
constexpr size_t kMaxQuestionBytes = 1000;
constexpr size_t kMaxAnswersBytes = 4000;
constexpr size_t kMaxAnswers = 16;
constexpr size_t kMaxSampleTextBytes = size_t{4} << 20;

// `text` as valid UTF-8 (a byte-level model may stop mid-character; each byte
// that does not start a valid sequence becomes U+FFFD), newlines and other
// control characters kept, cut at a character to at most max_bytes.
std::string KeptText(const std::string& text, size_t max_bytes);

class SampleTextLog {
 public:
  // One sample, in the order of metrics.per_sample. `labels` are further
  // per-sample strings (RULER's answer_prefix, LongBench v2's difficulty and
  // length); every sample of a record must give the same label names.
  void Add(const std::string& prediction, const std::string& question, const std::vector<std::string>& answers,
           const std::map<std::string, std::string>& labels = {});
  // Writes metrics["predictions"], metrics["sample_text"] and, when some
  // samples' texts were dropped, metrics["sample_text_dropped"].
  void Put(nlohmann::ordered_json* metrics) const;

 private:
  nlohmann::ordered_json predictions_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json questions_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json answers_ = nlohmann::ordered_json::array();
  std::map<std::string, nlohmann::ordered_json> labels_;
  size_t bytes_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace kvlab
