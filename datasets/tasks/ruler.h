// RULER's synthetic tasks (Hsieh et al. 2024, "RULER: What's the Real Context
// Size of Your Long-Context Language Models?"; NVIDIA/RULER
// scripts/data/synthetic), generated offline from a seed at a length in the
// tokens of any tokenizer, and scored as RULER scores them
// (scripts/eval/synthetic/constants.py). Called by evals/tasks/ruler.cpp and
// by training; torch-free (the tokenizer comes in as a counting function).
//
// The tasks, with RULER's settings (scripts/synthetic.yaml):
//   niah_single_1   noise haystack, word key, 7-digit number value
//   niah_single_2   essay haystack, word key, number value
//   niah_single_3   essay haystack, word key, UUID value
//   niah_multikey_1 essay haystack, 4 word keys (one asked), number values
//   niah_multikey_2 a haystack of distractor needles, word keys, number values
//   niah_multikey_3 a haystack of distractor needles, UUID keys, UUID values
//   niah_multivalue essay haystack, one key with 4 values (all asked)
//   niah_multiquery essay haystack, 4 keys, all 4 asked
//   vt              variable tracking: one chain of 4 hops in noise (VAR A = 12345, VAR B = VAR A, ...)
//   cwe             common words extraction: the 10 words repeated most in a numbered list
//   fwe             frequent words extraction: the 3 most frequent coded words of a Zipf (alpha 2) text
// Templates and answer prefixes are RULER's (scripts/data/synthetic/constants.py);
// where kvlab differs from RULER, docs/sweeps.md ("RULER") says so.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

// RULER's 11 synthetic tasks without a QA dataset, in RULER's order (above).
const std::vector<std::string>& RulerTaskNames();
bool IsRulerTask(const std::string& name);

// What a task is, beyond its name.
struct RulerTaskInfo {
  std::string name;
  int64_t tokens_to_generate = 0;  // RULER's generation budget: niah 128, vt 30, cwe 120, fwe 50
  bool needs_essay = false;        // reads RulerSpec::essay
  bool has_depth = false;          // places a needle at RulerSpec::depth (the niah tasks)
  int default_fewshot = 0;         // RULER's worked examples before the question: vt and cwe 1
  std::string metric = "string_match_all";
};
Status GetRulerTask(const std::string& name, RulerTaskInfo* out);

struct RulerSpec {
  std::string task;        // one of RulerTaskNames()
  // The sequence length: prompt tokens (as counted, BOS included) +
  // tokens_to_generate, at most. The haystack is the largest that fits
  // (RULER's rule), filled to a word, so the prompt lands just below.
  int64_t length = 4096;
  // niah: where the queried needle (the first value of the first key asked)
  // starts, as a fraction of the haystack; the other needles go at depths
  // drawn from RULER's 40 (0, 3, 5, ..., 100 percent). < 0: drawn too.
  double depth = -1;
  int64_t tokens_to_generate = 0;  // 0: the task's (RulerTaskInfo)
  int fewshot = -1;                // vt, cwe: 0 or 1 worked example; -1: RULER's (1)
  const std::string* essay = nullptr;  // the essay haystack's text (needs_essay tasks)
  uint64_t seed = 0;
};

// Counts the tokens of a prompt as the model reads it (BOS and template tokens included).
using TokenCounter = std::function<Status(const std::string& text, int64_t* tokens)>;

struct RulerSample {
  std::string prompt;                 // RULER's input + answer_prefix: what the model reads
  std::string answer_prefix;          // the end of prompt the answer continues
  std::vector<std::string> outputs;   // the references
  std::string metric;                 // "string_match_all"
  int64_t tokens_to_generate = 0;
  int64_t prompt_tokens = 0;          // the counter's count of prompt
  double depth = -1;                  // niah: the queried needle's depth (asked for, or drawn)
  int64_t needle_offset = -1;         // niah: where the queried needle starts in prompt; vt: the chain's first line
  std::string needle;                 // that needle's text (niah, vt)
  int64_t context_begin = 0, context_end = 0;  // the main haystack and its needles, in prompt
  int64_t fill = 0;                   // haystack size chosen: words (niah, vt), list entries (cwe, fwe)
  int64_t fill_chars = 0;             // niah, vt: then this many characters of the next word
};

// Generates `spec`'s sample: deterministic for the spec and the counter (the
// same seed gives the same keys, values and positions at every length).
// Errors name the task and length: an unknown task, a missing essay, a length
// too short for the template, needles and generation budget.
Status MakeRulerSample(const RulerSpec& spec, const TokenCounter& count, RulerSample* out);

// RULER's postprocess_pred: strip, control characters to newlines, strip.
std::string RulerPostprocess(const std::string& prediction);
// RULER's per-sample scores in [0, 1] (its reports multiply the mean by 100):
// string_match_all, the fraction of references found in the prediction;
// string_match_part, 1 if any is. Case-insensitive (ASCII letters).
double StringMatchAll(const std::string& prediction, const std::vector<std::string>& references);
double StringMatchPart(const std::string& prediction, const std::vector<std::string>& references);
// The sample's score of a generated text: postprocessed, then its metric.
double RulerScore(const RulerSample& sample, const std::string& generated);

}  // namespace kvlab
