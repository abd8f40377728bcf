// RULER's text helpers (datasets/tasks/ruler_text.cpp), shared by its
// generators (ruler.cpp): Python's str.format and str.replace, the word lists,
// RULER's random values, and the haystack streams sized in words.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "datasets/tasks/tasks.h"

namespace kvlab {
namespace ruler_internal {

// Python's str.replace: every occurrence, left to right.
std::string ReplaceAll(std::string s, const std::string& from, const std::string& to);
// Python's str.format for named fields: one pass over the template, so a
// value holding "{query}" is not formatted again. *context_at: where {context}
// went (npos if absent).
std::string Format(const std::string& t, const std::map<std::string, std::string>& fields,
                   size_t* context_at = nullptr);
std::vector<std::string> SplitWords(const std::string& s);
std::string Join(const std::vector<std::string>& v, const std::string& sep, size_t begin = 0,
                 size_t end = std::string::npos);
const std::vector<std::string>& Adjectives();
const std::vector<std::string>& Nouns();
const std::vector<std::string>& Verbs();

template <typename T>
void Shuffle(std::vector<T>* v, SplitMix* rng) {
  for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[static_cast<size_t>(rng->Below(i))]);
}

// A seed for one purpose of a sample (SplitMix of the sample's seed and a tag).
uint64_t SubSeed(uint64_t seed, uint64_t tag);

// RULER's random values: 7-digit numbers, adjective-noun words, version-4 UUIDs.
std::string RandomNumber(SplitMix* rng);
std::string RandomWord(SplitMix* rng);
std::string RandomUuid(SplitMix* rng);
std::string RandomOf(const std::string& type, SplitMix* rng);  // numbers | uuids | words
std::string RandomUpper(size_t k, SplitMix* rng);
// A depth drawn from RULER's DEPTHS without repeats (refilled when empty).
double DrawnDepth(SplitMix* rng, std::vector<int>* pool);

// The first `chars` bytes of `word` (at most all of it), not cutting a UTF-8 sequence.
std::string Prefix(const std::string& word, int64_t chars);

// An endless stream of units (noise blocks, or distractor needles) cut to
// `fill` words and `chars` characters of the next: whole units, then the
// next one's first words.
class UnitStream {
 public:
  explicit UnitStream(std::function<std::string(size_t)> unit) : unit_(std::move(unit)) {}
  std::vector<std::string> Take(int64_t fill, int64_t chars);

 private:
  const std::vector<std::string>& WordsOf(size_t j);
  std::function<std::string(size_t)> unit_;
  std::vector<std::vector<std::string>> words_;
};

// The essay's words from a seeded sentence start, wrapping around (RULER
// starts at the essays' first word, and repeats them when a length needs more).
class EssayStream {
 public:
  EssayStream(const std::string& text, uint64_t seed);
  std::string Take(int64_t fill, int64_t chars);

 private:
  void Next();
  const std::string& text_;
  size_t pos_ = 0;
  std::vector<std::string> words_;
};

// One rendering of a sample at a haystack size.
struct Rendered {
  std::string prompt, answer_prefix, needle;
  std::vector<std::string> outputs;
  int64_t needle_offset = -1, context_begin = 0, context_end = 0;
};

// Appends items joined by `sep`; returns where item `mark` started (npos if none).
size_t JoinMarked(const std::vector<std::string>& items, const std::string& sep, size_t mark, std::string* out);

}  // namespace ruler_internal
}  // namespace kvlab
