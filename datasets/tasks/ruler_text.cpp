// RULER's text helpers; see ruler_text.h.
#include "datasets/tasks/ruler_text.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "datasets/tasks/ruler_internal.h"

namespace kvlab {
namespace ruler_internal {

// Python's str.replace: every occurrence, left to right.
std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Python's str.format for named fields: one pass over the template, so a
// value holding "{query}" is not formatted again. *context_at: where {context}
// went (npos if absent).
std::string Format(const std::string& t, const std::map<std::string, std::string>& fields, size_t* context_at) {
  std::string out;
  if (context_at != nullptr) *context_at = std::string::npos;
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '{') {
      const size_t close = t.find('}', i);
      const auto it = close == std::string::npos ? fields.end() : fields.find(t.substr(i + 1, close - i - 1));
      if (it != fields.end()) {
        if (it->first == "context" && context_at != nullptr) *context_at = out.size();
        out += it->second;
        i = close + 1;
        continue;
      }
    }
    out += t[i++];
  }
  return out;
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string Join(const std::vector<std::string>& v, const std::string& sep, size_t begin, size_t end) {
  std::string out;
  end = std::min(end, v.size());
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += sep;
    out += v[i];
  }
  return out;
}

const std::vector<std::string>& Adjectives() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerAdjectives);
  return w;
}
const std::vector<std::string>& Nouns() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerNouns);
  return w;
}
const std::vector<std::string>& Verbs() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerVerbs);
  return w;
}

// A seed for one purpose of a sample (SplitMix of the sample's seed and a tag).
uint64_t SubSeed(uint64_t seed, uint64_t tag) {
  SplitMix m(seed ^ (tag * 0x9e3779b97f4a7c15ull));
  return m.Next();
}

// ---- RULER's random values ----

std::string RandomNumber(SplitMix* rng) { return std::to_string(1000000 + rng->Below(9000000)); }  // 7 digits

std::string RandomWord(SplitMix* rng) {
  const std::vector<std::string>& adj = Adjectives();
  const std::vector<std::string>& noun = Nouns();
  return adj[static_cast<size_t>(rng->Below(adj.size()))] + "-" + noun[static_cast<size_t>(rng->Below(noun.size()))];
}

// uuid.UUID(int=random.getrandbits(128), version=4): version nibble 4, variant bits 10.
std::string RandomUuid(SplitMix* rng) {
  uint64_t hi = rng->Next(), lo = rng->Next();
  hi = (hi & ~0xf000ull) | 0x4000ull;
  lo = (lo & ~(0xc000ull << 48)) | (0x8000ull << 48);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(hi >> 32),
                static_cast<unsigned long long>((hi >> 16) & 0xffff), static_cast<unsigned long long>(hi & 0xffff),
                static_cast<unsigned long long>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffull));
  return buf;
}

std::string RandomOf(const std::string& type, SplitMix* rng) {
  if (type == "numbers") return RandomNumber(rng);
  if (type == "uuids") return RandomUuid(rng);
  return RandomWord(rng);
}

std::string RandomUpper(size_t k, SplitMix* rng) {
  std::string s;
  for (size_t i = 0; i < k; ++i) s += static_cast<char>('A' + rng->Below(26));
  return s;
}

double DrawnDepth(SplitMix* rng, std::vector<int>* pool) {
  if (pool->empty()) *pool = ruler_internal::RulerDepths();
  const size_t i = static_cast<size_t>(rng->Below(pool->size()));
  const int d = (*pool)[i];
  pool->erase(pool->begin() + static_cast<std::ptrdiff_t>(i));  // random.sample: distinct depths
  return d / 100.0;
}

// ---- haystacks sized in words ----

// The first `chars` bytes of `word` (at most all of it), not cutting a UTF-8 sequence.
std::string Prefix(const std::string& word, int64_t chars) {
  size_t n = std::min(word.size(), static_cast<size_t>(std::max<int64_t>(0, chars)));
  while (n > 0 && n < word.size() && (static_cast<unsigned char>(word[n]) & 0xc0) == 0x80) --n;
  return word.substr(0, n);
}

// An endless stream of units (noise blocks, or distractor needles) cut to
// `fill` words and `chars` characters of the next: whole units, then the
// next one's first words.
std::vector<std::string> UnitStream::Take(int64_t fill, int64_t chars) {
  std::vector<std::string> out;
  int64_t left = fill;
  for (size_t j = 0;; ++j) {
    const std::vector<std::string>& w = WordsOf(j);
    if (static_cast<int64_t>(w.size()) <= left) {
      if (left == 0 && chars <= 0) break;
      if (static_cast<int64_t>(w.size()) < left || chars <= 0) {
        out.push_back(Join(w, " "));
        left -= static_cast<int64_t>(w.size());
        if (left == 0 && chars <= 0) break;
        continue;
      }
    }
    // The last unit: `left` words, then part of the next word.
    std::string last = Join(w, " ", 0, static_cast<size_t>(left));
    const std::string part = static_cast<size_t>(left) < w.size() ? Prefix(w[static_cast<size_t>(left)], chars) : "";
    if (!part.empty()) last += (last.empty() ? "" : " ") + part;
    if (!last.empty()) out.push_back(last);
    break;
  }
  return out;
}

const std::vector<std::string>& UnitStream::WordsOf(size_t j) {
  while (words_.size() <= j) words_.push_back(SplitWords(unit_(words_.size())));
  return words_[j];
}


// The essay's words from a seeded sentence start, wrapping around (RULER
// starts at the essays' first word, and repeats them when a length needs more).
EssayStream::EssayStream(const std::string& text, uint64_t seed) : text_(text) {
  SplitMix rng(seed);
  pos_ = text_.empty() ? 0 : static_cast<size_t>(rng.Below(text_.size()));
  // To the start of a sentence: past the next newline or ". ", "? ", "! " before a capital.
  for (size_t i = pos_; i + 1 < text_.size(); ++i) {
    const bool end = text_[i] == '\n' || ((text_[i] == '.' || text_[i] == '?' || text_[i] == '!') && text_[i + 1] == ' ');
    if (!end) continue;
    size_t j = i + 1;
    while (j < text_.size() && std::isspace(static_cast<unsigned char>(text_[j]))) ++j;
    if (j < text_.size() && std::isupper(static_cast<unsigned char>(text_[j]))) {
      pos_ = j;
      break;
    }
  }
}
std::string EssayStream::Take(int64_t fill, int64_t chars) {
  while (static_cast<int64_t>(words_.size()) < fill + 1) Next();
  std::string out = Join(words_, " ", 0, static_cast<size_t>(fill));
  const std::string part = Prefix(words_[static_cast<size_t>(fill)], chars);
  if (!part.empty()) out += (out.empty() ? "" : " ") + part;
  return out;
}

void EssayStream::Next() {
  for (int wraps = 0; wraps < 2; ++wraps) {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ < text_.size()) break;
    pos_ = 0;
  }
  size_t j = pos_;
  while (j < text_.size() && !std::isspace(static_cast<unsigned char>(text_[j]))) ++j;
  words_.push_back(text_.substr(pos_, j - pos_));
  pos_ = j;
}


// One rendering of a sample at a haystack size.


// Appends items joined by `sep`; returns where item `mark` started (npos if none).
size_t JoinMarked(const std::vector<std::string>& items, const std::string& sep, size_t mark, std::string* out) {
  size_t at = std::string::npos;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) *out += sep;
    if (i == mark) at = out->size();
    *out += items[i];
  }
  return at;
}

}  // namespace ruler_internal
}  // namespace kvlab
