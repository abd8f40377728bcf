// SampleTextLog: the bounded texts of a generation task's samples (sample_text.h).
#include "evals/tasks/sample_text.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

// The length of the valid UTF-8 sequence starting at s[i] (1 to 4), or 0.
size_t Utf8Length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  const unsigned char d = b(i + 1);
  if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F)) {
    return 0;  // overlong, a surrogate, or past U+10FFFF
  }
  return n;
}

}  // namespace

std::string KeptText(const std::string& text, size_t max_bytes) {
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Length(text, i);
    const size_t add = n > 0 ? n : kReplacement.size();
    if (out.size() + add > max_bytes) break;
    if (n > 0) {
      out.append(text, i, n);
    } else {
      out += kReplacement;
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

namespace {

std::string Kept(const std::string& text, size_t max_bytes) { return KeptText(text, max_bytes); }

}  // namespace

void SampleTextLog::Add(const std::string& prediction, const std::string& question,
                        const std::vector<std::string>& answers, const std::map<std::string, std::string>& labels) {
  const bool keep = bytes_ < kMaxSampleTextBytes;
  if (!keep) ++dropped_;
  const std::string p = keep ? Kept(prediction, kMaxPredictionBytes) : "";
  const std::string q = keep ? Kept(question, kMaxQuestionBytes) : "";
  json refs = json::array();
  size_t refs_bytes = 0;
  for (const std::string& a : answers) {
    if (!keep || refs.size() == kMaxAnswers || refs_bytes >= kMaxAnswersBytes) break;
    std::string kept = Kept(a, kMaxAnswersBytes - refs_bytes);
    refs_bytes += kept.size();
    refs.push_back(std::move(kept));
  }
  bytes_ += p.size() + q.size() + refs_bytes;
  predictions_.push_back(p);
  questions_.push_back(q);
  answers_.push_back(std::move(refs));
  for (const auto& [name, value] : labels) {
    std::string v = keep ? Kept(value, kMaxQuestionBytes) : "";
    bytes_ += v.size();
    labels_[name].push_back(std::move(v));
  }
}

void SampleTextLog::Put(json* m) const {
  (*m)["predictions"] = predictions_;
  json text = json::object();
  text["question"] = questions_;
  text["answers"] = answers_;
  for (const auto& [name, values] : labels_) text[name] = values;
  (*m)["sample_text"] = text;
  if (dropped_ > 0) (*m)["sample_text_dropped"] = dropped_;
}

}  // namespace kvlab
