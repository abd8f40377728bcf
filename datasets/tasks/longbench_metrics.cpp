// LongBench's metrics (metrics.py), written from their definitions: the SQuAD
// normalisation and token F1, the `rouge` package's summary-level ROUGE-L,
// classification, retrieval and count scores, and fuzzywuzzy's ratio for code.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "datasets/tasks/longbench.h"

namespace kvlab {

namespace {

bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.split(): runs of whitespace, no empty pieces.
std::vector<std::string> SplitWhitespace(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t b = i;
    while (i < s.size() && !IsSpace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// The UTF-8 code points of s, each as its bytes (an invalid byte stands alone).
std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    }
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool IsAsciiPunct(unsigned char c) { return c < 0x80 && std::ispunct(c); }

// Python's \w for kvlab's purpose: ASCII letters, digits, '_', and any non-ASCII byte.
bool IsWordByte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }

// Counter(a) & Counter(b), summed; then LongBench's f1_score.
double TokenF1(const std::vector<std::string>& pred, const std::vector<std::string>& ref) {
  std::map<std::string, int64_t> count;
  for (const std::string& t : ref) ++count[t];
  int64_t same = 0;
  for (const std::string& t : pred) {
    auto it = count.find(t);
    if (it != count.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0;
  const double p = static_cast<double>(same) / static_cast<double>(pred.size());
  const double r = static_cast<double>(same) / static_cast<double>(ref.size());
  return 2 * p * r / (p + r);
}

// normalize_zh_answer's punctuation: ASCII's and these.
const std::set<std::string>& ZhPunctuation() {
  static const std::set<std::string> p = [] {
    std::set<std::string> s;
    const std::string cn =
        "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.";
    for (const std::string& c : CodePoints(cn)) s.insert(c);
    return s;
  }();
  return p;
}

// The tokens kvlab puts where LongBench has jieba's words: each ASCII
// letter/digit run one token, every other non-space character one. With
// `normalize` (qa_f1_zh's normalize_zh_answer) lower case, punctuation
// dropped; without (rouge_zh), as written.
std::vector<std::string> ZhTokens(const std::string& s, bool normalize = true) {
  std::vector<std::string> out;
  std::string run;
  auto flush = [&] {
    if (!run.empty()) out.push_back(run);
    run.clear();
  };
  for (const std::string& cp : CodePoints(s)) {
    const unsigned char c = static_cast<unsigned char>(cp[0]);
    if (cp.size() == 1 && std::isalnum(c)) {
      run += normalize ? static_cast<char>(std::tolower(c)) : cp[0];
      continue;
    }
    flush();
    if (cp.size() == 1 && IsSpace(c)) continue;
    if (normalize && ((cp.size() == 1 && IsAsciiPunct(c)) || ZhPunctuation().count(cp))) continue;
    out.push_back(cp);
  }
  flush();
  return out;
}

// The `rouge` package's sentences: split at '.', empty pieces dropped, each
// piece's whitespace collapsed (a piece of only spaces becomes "").
std::vector<std::string> RougeSentences(const std::string& text) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '.') continue;
    if (i > b) out.push_back(Join(SplitWhitespace(text.substr(b, i - b)), " "));
    b = i + 1;
  }
  return out;
}

// str.split(" ") of a collapsed sentence ("" gives one empty word).
std::vector<std::string> RougeWords(const std::string& sentence) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= sentence.size(); ++i) {
    if (i == sentence.size() || sentence[i] == ' ') {
      out.push_back(sentence.substr(b, i - b));
      b = i + 1;
    }
  }
  return out;
}

// The words of one longest common subsequence of x and y, reconstructed as
// the package does (from the end; on a tie it moves along y).
std::vector<std::string> ReconLcs(const std::vector<std::string>& x, const std::vector<std::string>& y) {
  const size_t n = x.size(), m = y.size();
  std::vector<int32_t> t((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> int32_t& { return t[i * (m + 1) + j]; };
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      at(i, j) = x[i - 1] == y[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
    }
  }
  std::vector<std::string> out;
  size_t i = n, j = m;
  while (i > 0 && j > 0) {
    if (x[i - 1] == y[j - 1]) {
      out.push_back(x[i - 1]);
      --i;
      --j;
    } else if (at(i - 1, j) > at(i, j - 1)) {
      --i;
    } else {
      --j;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Every maximal run of ASCII digits in s (re.findall(r"\d+")).
std::vector<std::string> Numbers(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    const size_t b = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    out.push_back(s.substr(b, i - b));
  }
  return out;
}

double ShareEqual(const std::vector<std::string>& numbers, const std::string& want) {
  if (numbers.empty()) return 0;
  double right = 0;
  for (const std::string& n : numbers) right += n == want ? 1 : 0;
  return right / static_cast<double>(numbers.size());
}

}  // namespace

std::string NormalizeAnswer(const std::string& s) {
  std::string t;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (IsAsciiPunct(c)) continue;
    t += c < 0x80 ? static_cast<char>(std::tolower(c)) : ch;
  }
  // \b(a|an|the)\b -> " ": whole words only.
  std::string u;
  for (size_t i = 0; i < t.size();) {
    if (!IsWordByte(static_cast<unsigned char>(t[i]))) {
      u += t[i++];
      continue;
    }
    const size_t b = i;
    while (i < t.size() && IsWordByte(static_cast<unsigned char>(t[i]))) ++i;
    const std::string w = t.substr(b, i - b);
    u += (w == "a" || w == "an" || w == "the") ? " " : w;
  }
  return Join(SplitWhitespace(u), " ");
}

double QaF1Score(const std::string& prediction, const std::string& reference) {
  return TokenF1(SplitWhitespace(NormalizeAnswer(prediction)), SplitWhitespace(NormalizeAnswer(reference)));
}

double QaF1ZhScore(const std::string& prediction, const std::string& reference) {
  return TokenF1(ZhTokens(prediction), ZhTokens(reference));
}

double QaF1ZhCharsScore(const std::string& prediction, const std::string& reference) {
  auto chars = [](const std::string& s) {
    std::vector<std::string> out;
    for (const std::string& cp : CodePoints(s)) {
      const unsigned char c = static_cast<unsigned char>(cp[0]);
      if (cp.size() == 1 && (IsSpace(c) || IsAsciiPunct(c))) continue;
      if (ZhPunctuation().count(cp)) continue;
      out.push_back(cp.size() == 1 ? std::string(1, static_cast<char>(std::tolower(c))) : cp);
    }
    return out;
  };
  return TokenF1(chars(prediction), chars(reference));
}

double RougeLScore(const std::string& prediction, const std::string& reference) {
  const std::vector<std::string> hyp = RougeSentences(prediction), ref = RougeSentences(reference);
  if (hyp.empty() || ref.empty()) return 0;
  std::set<std::string> ref_words, hyp_words, lcs_union;
  std::vector<std::vector<std::string>> hyp_split;
  for (const std::string& s : ref) {
    for (std::string& w : RougeWords(s)) ref_words.insert(std::move(w));
  }
  for (const std::string& s : hyp) {
    hyp_split.push_back(RougeWords(s));
    hyp_words.insert(hyp_split.back().begin(), hyp_split.back().end());
  }
  for (const std::string& r : ref) {
    const std::vector<std::string> rw = RougeWords(r);
    for (const std::vector<std::string>& hw : hyp_split) {
      for (std::string& w : ReconLcs(rw, hw)) lcs_union.insert(std::move(w));
    }
  }
  const double llcs = static_cast<double>(lcs_union.size());
  const double r = llcs / static_cast<double>(ref_words.size());
  const double p = llcs / static_cast<double>(hyp_words.size());
  return 2.0 * (p * r / (p + r + 1e-8));
}

double RougeLsumScore(const std::string& prediction, const std::string& reference) {
  // Sentences at newlines (empty ones dropped); tokens: lower case, runs of [a-z0-9].
  auto sentences = [](const std::string& text) {
    std::vector<std::vector<std::string>> out;
    size_t b = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (i < text.size() && text[i] != '\n') continue;
      if (i > b) {
        std::vector<std::string> toks;
        std::string t;
        for (size_t k = b; k <= i; ++k) {
          const unsigned char c = k < i ? static_cast<unsigned char>(text[k]) : ' ';
          if (c < 0x80 && std::isalnum(c)) {
            t += static_cast<char>(std::tolower(c));
          } else if (!t.empty()) {
            toks.push_back(t);
            t.clear();
          }
        }
        out.push_back(std::move(toks));
      }
      b = i + 1;
    }
    return out;
  };
  const auto ref = sentences(reference), can = sentences(prediction);
  size_t m = 0, n = 0;
  std::map<std::string, int64_t> count_r, count_c;
  for (const auto& s : ref) {
    m += s.size();
    for (const std::string& t : s) ++count_r[t];
  }
  for (const auto& s : can) {
    n += s.size();
    for (const std::string& t : s) ++count_c[t];
  }
  if (m == 0 || n == 0) return 0;
  int64_t hits = 0;
  for (const auto& r : ref) {
    std::vector<bool> selected(r.size(), false);  // the union of the LCS's positions in r
    for (const auto& c : can) {
      const size_t R = r.size(), C = c.size();
      std::vector<int32_t> t((R + 1) * (C + 1), 0);
      auto at = [&](size_t i, size_t j) -> int32_t& { return t[i * (C + 1) + j]; };
      for (size_t i = 1; i <= R; ++i) {
        for (size_t j = 1; j <= C; ++j) at(i, j) = r[i - 1] == c[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
      }
      size_t i = R, j = C;
      while (i > 0 && j > 0) {  // rouge_score's _backtrack_norec
        if (r[i - 1] == c[j - 1]) {
          selected[i - 1] = true;
          --i;
          --j;
        } else if (at(i, j - 1) > at(i - 1, j)) {
          --j;
        } else {
          --i;
        }
      }
    }
    for (size_t k = 0; k < r.size(); ++k) {
      if (selected[k] && count_c[r[k]] > 0 && count_r[r[k]] > 0) {
        ++hits;
        --count_c[r[k]];
        --count_r[r[k]];
      }
    }
  }
  const double recall = static_cast<double>(hits) / static_cast<double>(m);
  const double precision = static_cast<double>(hits) / static_cast<double>(n);
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

double RougeLZhScore(const std::string& prediction, const std::string& reference) {
  return RougeLScore(Join(ZhTokens(prediction, false), " "), Join(ZhTokens(reference, false), " "));
}

double ClassificationScore(const std::string& prediction, const std::string& reference,
                           const std::vector<std::string>& all_classes) {
  std::vector<std::string> named;
  for (const std::string& c : all_classes) {
    if (prediction.find(c) != std::string::npos) named.push_back(c);
  }
  // LongBench removes from the list it iterates: the entry after a removed one is skipped.
  for (size_t i = 0; i < named.size(); ++i) {
    if (reference.find(named[i]) != std::string::npos && named[i] != reference) named.erase(named.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (std::find(named.begin(), named.end(), reference) == named.end()) return 0;
  return 1.0 / static_cast<double>(named.size());
}

double RetrievalScore(const std::string& prediction, const std::string& reference, bool zh) {
  const std::string cue = zh ? "段落" : "Paragraph ";
  size_t at = 0;
  std::string id;
  while ((at = reference.find(cue, at)) != std::string::npos) {
    at += cue.size();
    size_t e = at;
    while (e < reference.size() && std::isdigit(static_cast<unsigned char>(reference[e]))) ++e;
    if (e > at) {
      id = reference.substr(at, e - at);
      break;
    }
  }
  if (id.empty()) return 0;  // LongBench raises (IndexError); the loader refuses such answers
  return ShareEqual(Numbers(prediction), id);
}

double CountScore(const std::string& prediction, const std::string& reference) {
  return ShareEqual(Numbers(prediction), reference);
}

double FuzzRatio(const std::string& a, const std::string& b) {
  if (a == b) return 1;
  if (a.empty() || b.empty()) return 0;
  const std::vector<std::string> x = CodePoints(a), y = CodePoints(b);
  // Indel distance = |x| + |y| - 2 LCS; Levenshtein's ratio = 2 LCS / (|x| + |y|).
  std::vector<int32_t> prev(y.size() + 1, 0), cur(y.size() + 1, 0);
  for (size_t i = 1; i <= x.size(); ++i) {
    for (size_t j = 1; j <= y.size(); ++j) {
      cur[j] = x[i - 1] == y[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  const double total = static_cast<double>(x.size() + y.size());
  const double ratio = 2.0 * static_cast<double>(prev[y.size()]) / total;
  return std::nearbyint(100 * ratio) / 100;  // Python's round: half to even
}

double CodeSimScore(const std::string& prediction, const std::string& reference) {
  size_t b = 0;
  while (b < prediction.size() && prediction[b] == '\n') ++b;
  std::string line;
  size_t i = b;
  while (i <= prediction.size()) {
    const size_t e = std::min(prediction.find('\n', i), prediction.size());
    const std::string l = prediction.substr(i, e - i);
    if (l.find('`') == std::string::npos && l.find('#') == std::string::npos && l.find("//") == std::string::npos) {
      line = l;
      break;
    }
    i = e + 1;
  }
  return FuzzRatio(line, reference);
}

}  // namespace kvlab
