// The retrieval tasks' prompts (passkey, multi-needle, recall) in any model's
// tokenizer: a prompt of a length in tokens, the answer scored on decoded text.
// Called by evals/tasks/retrieval.cpp and its tests.
//
// The generator (datasets/tasks/tasks.h) builds text to a length in
// characters. With another tokenizer the prompt is regenerated at other
// character lengths (same seed, so the same needle, answer and filler
// sentences) until it tokenizes to exactly the tokens wanted; with the byte
// tokenizer the first try (the generator's prompt, byte for byte) fits. The
// rule, in docs/sweeps.md ("passkey, multi-needle, recall").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/tokenizer/tokenizer.h"
#include "datasets/tasks/tasks.h"

namespace kvlab {

struct RetrievalPrompt {
  TaskSample sample;           // the prompt and answer texts
  std::vector<int32_t> ids;    // the prompt encoded with the tokenizer's BOS / template tokens
  int64_t answer_tokens = 0;   // the answer's tokens (encoded alone, no special tokens)
  int64_t max_new_tokens = 0;  // tokens generated: enough for any tokenization of the answer
  int64_t characters = 0;      // the generator's length (spec.length) that gave the prompt
};

// Builds the prompt of `spec` (its length is chosen here) so that
// ids.size() + answer_tokens == length: the smallest character length found
// by bisection whose prompt has at least length - answer_tokens tokens, then,
// where one character added two tokens, the next lengths until one gives
// exactly that many. An error when no length does (names the task and length).
Status BuildRetrievalPrompt(TaskSpec spec, int64_t length, const Tokenizer& tokenizer, RetrievalPrompt* out);

// The text of `generated` as it continues the prompt: Decode(prompt + generated)
// past Decode(prompt) (decoders that act on context, such as a leading-space
// strip or byte fallback, see the whole text), else Decode(generated).
Status GeneratedText(const RetrievalPrompt& prompt, const Tokenizer& tokenizer, const std::vector<int32_t>& generated,
                     std::string* text);

}  // namespace kvlab
