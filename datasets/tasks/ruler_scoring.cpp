// RULER's task names, its scoring (scripts/eval/synthetic/constants.py,
// scripts/eval/evaluate.py's postprocess_pred) and the text helpers its
// generators share (datasets/tasks/ruler.cpp): the depths and the sentence splitter.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "datasets/tasks/ruler.h"
#include "datasets/tasks/ruler_internal.h"

namespace kvlab {

const std::vector<std::string>& RulerTaskNames() {
  static const std::vector<std::string> names = {
      "niah_single_1",   "niah_single_2",   "niah_single_3",   "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
      "niah_multivalue", "niah_multiquery", "vt",              "cwe",             "fwe"};
  return names;
}

bool IsRulerTask(const std::string& name) {
  const std::vector<std::string>& n = RulerTaskNames();
  return std::find(n.begin(), n.end(), name) != n.end();
}

namespace ruler_internal {

const std::vector<int>& RulerDepths() {
  static const std::vector<int> d = [] {
    std::vector<int> v;
    for (int i = 0; i < 40; ++i) v.push_back(static_cast<int>(std::lround(i * 100.0 / 39.0)));
    return v;
  }();
  return d;
}

std::vector<std::string> SplitSentences(const std::string& text) {
  static const std::set<std::string> kTitles = {"Mr.", "Mrs.", "Ms.", "Dr.", "St.", "Jr.", "Sr.", "Prof.", "Gen.",
                                                "Col.", "Gov.", "Rep.", "Sen.", "Rev.", "Mt.", "vs.", "etc.", "Co.",
                                                "Inc.", "Ltd.", "No.", "Vol.", "Fig.", "Jan.", "Feb.", "Aug.", "Sept.",
                                                "Oct.", "Nov.", "Dec."};
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '.' && c != '!' && c != '?') continue;
    size_t j = i + 1;
    while (j < text.size() && (text[j] == '"' || text[j] == '\'' || text[j] == ')' || text[j] == ']')) ++j;
    if (j >= text.size() || text[j] != ' ' || j + 1 >= text.size()) continue;
    const unsigned char next = static_cast<unsigned char>(text[j + 1]);
    if (!(std::isupper(next) || std::isdigit(next) || next == '"' || next == '\'' || next == '(')) continue;
    if (c == '.') {
      size_t w = i;
      while (w > start && text[w - 1] != ' ') --w;
      const std::string word = text.substr(w, i + 1 - w);
      if (kTitles.count(word) || (word.size() == 2 && std::isupper(static_cast<unsigned char>(word[0])))) continue;
    }
    out.push_back(text.substr(start, j - start));
    start = j + 1;
    i = j;
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

}  // namespace ruler_internal

std::string RulerPostprocess(const std::string& prediction) {
  auto strip = [](const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
  };
  std::string s = strip(prediction);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) <= 0x1f) c = '\n';
  }
  return strip(s);
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

double StringMatchAll(const std::string& prediction, const std::vector<std::string>& references) {
  if (references.empty()) return 0;
  const std::string p = Lower(prediction);
  double hits = 0;
  for (const std::string& r : references) hits += p.find(Lower(r)) != std::string::npos ? 1 : 0;
  return hits / static_cast<double>(references.size());
}

double StringMatchPart(const std::string& prediction, const std::vector<std::string>& references) {
  const std::string p = Lower(prediction);
  for (const std::string& r : references) {
    if (p.find(Lower(r)) != std::string::npos) return 1;
  }
  return 0;
}

double RulerScore(const RulerSample& sample, const std::string& generated) {
  const std::string p = RulerPostprocess(generated);
  return sample.metric == "string_match_part" ? StringMatchPart(p, sample.outputs) : StringMatchAll(p, sample.outputs);
}

}  // namespace kvlab
