// Internals of RULER's generators (datasets/tasks/ruler.cpp), visible to its
// test: the word lists and the essay haystack's sentence splitter.
#pragma once

#include <string>
#include <vector>

namespace kvlab {
namespace ruler_internal {

// Space-separated, sorted, no repeats (ruler_words.cpp).
extern const char kRulerAdjectives[];
extern const char kRulerNouns[];
extern const char kRulerVerbs[];

// Splits whitespace-normalised prose into sentences, in place of nltk's
// sent_tokenize: a sentence ends at '.', '!' or '?' (and any closing quotes or
// brackets) before a space and a capital letter, digit or opening quote,
// except after a title (Mr. Mrs. Dr. St. ...) or an initial.
std::vector<std::string> SplitSentences(const std::string& text);

// RULER's DEPTHS: np.round(np.linspace(0, 100, 40)), in percent.
const std::vector<int>& RulerDepths();

}  // namespace ruler_internal
}  // namespace kvlab
