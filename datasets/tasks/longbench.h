// LongBench-format datasets from files (Bai et al. 2023, "LongBench"; Bai et
// al. 2024, "LongBench v2"; THUDM/LongBench): their JSONL records, their
// prompt templates per dataset (config/dataset2prompt.json, prompts/0shot.txt),
// their generation budgets (config/dataset2maxlen.json) and their metrics
// (metrics.py, eval.py's dataset2metric and scorer rules), as kvlab's own
// code. Called by evals/tasks/longbench.cpp and by the tests; torch-free.
// Where kvlab differs from LongBench's code, docs/sweeps.md ("LongBench") says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

// ---- metrics: one prediction against one reference, in [0, 1] ----

// SQuAD's normalisation (metrics.py normalize_answer): lower case, ASCII
// punctuation removed, the words a / an / the removed, whitespace collapsed.
std::string NormalizeAnswer(const std::string& s);
// Token F1 of the normalised texts' words (qa_f1_score).
double QaF1Score(const std::string& prediction, const std::string& reference);
// qa_f1_zh_score over characters (LongBench segments words with jieba):
// each ASCII letter/digit run is one token, every other non-space character
// one token; Chinese and ASCII punctuation dropped.
double QaF1ZhScore(const std::string& prediction, const std::string& reference);
// InfiniteBench's qa_f1_score_zh: normalize_zh_answer on the whole text
// (lower case, punctuation and whitespace removed), one character one token.
double QaF1ZhCharsScore(const std::string& prediction, const std::string& reference);
// ROUGE-L F, summary level, as the `rouge` package LongBench uses computes it
// (sentences split at '.', words at ' ', the union LCS over sets of words);
// 0 when either side has no sentence (the package raises, LongBench scores 0).
double RougeLScore(const std::string& prediction, const std::string& reference);
// rougeLsum as Google's rouge_score package computes it (InfiniteBench's
// longbook_sum_eng through the `evaluate` package): sentences at newlines,
// tokens the lower-cased runs of [a-z0-9], the union LCS per reference
// sentence counted without double counting; F = 2PR / (P + R).
double RougeLsumScore(const std::string& prediction, const std::string& reference);
// rouge_zh_score: the same over QaF1ZhScore's tokens (not normalised) joined by spaces.
double RougeLZhScore(const std::string& prediction, const std::string& reference);
// classification_score: 1 / (classes named in the prediction) when the
// reference is among them, after dropping named classes that are substrings of
// the reference (with LongBench's skip-after-removal of its loop).
double ClassificationScore(const std::string& prediction, const std::string& reference,
                           const std::vector<std::string>& all_classes);
// retrieval_score / retrieval_zh_score: the share of the prediction's numbers
// equal to the paragraph number in the reference ("Paragraph 12" / "段落12").
double RetrievalScore(const std::string& prediction, const std::string& reference, bool zh = false);
// count_score: the share of the prediction's numbers equal to the reference.
double CountScore(const std::string& prediction, const std::string& reference);
// fuzzywuzzy's fuzz.ratio / 100: round(100 * (|a| + |b| - indel distance) /
// (|a| + |b|)) over code points (Levenshtein's ratio), half to even; equal
// strings 1, one empty string 0.
double FuzzRatio(const std::string& a, const std::string& b);
// code_sim_score: FuzzRatio of the prediction's first line without ` # or //.
double CodeSimScore(const std::string& prediction, const std::string& reference);

// ---- LongBench's datasets ----

struct LongBenchDataset {
  std::string name;      // LongBench's dataset name (its file's stem: hotpotqa.jsonl, hotpotqa_e.jsonl)
  std::string metric;    // qa_f1 | qa_f1_zh | rouge | rouge_zh | classification | retrieval | retrieval_zh | count | code_sim
  int64_t max_gen = 0;   // dataset2maxlen.json
  std::string prompt;    // dataset2prompt.json: {context} and {input}
  bool first_line = false;  // eval.py: trec, triviaqa, samsum, lsht score the first line only
};
// LongBench's 21 datasets, in dataset2metric's order.
const std::vector<LongBenchDataset>& LongBenchDatasets();
const LongBenchDataset* FindLongBenchDataset(const std::string& name);
// The sweep's dataset tasks: "longbench-" + a dataset's name, "longbench-v2",
// and "infinitebench-" + an InfiniteBench task's name (infinitebench.h).
bool IsDatasetTask(const std::string& task);

// One record of a LongBench / LongBench-E file (the fields kvlab reads).
struct LongBenchRecord {
  int64_t line = 0;  // 1-based line in the file
  std::string context, input;
  std::vector<std::string> answers, all_classes;
  int64_t length = -1;  // words (characters in the Chinese sets); -1: absent
};

// eval.py's scorer for one sample: the first line of the prediction for the
// first_line datasets, then the maximum of the metric over the answers.
double LongBenchScore(const LongBenchDataset& d, const std::string& prediction, const LongBenchRecord& r);
// LongBench-E's length bucket: "0-4k" (< 4000), "4-8k" (< 8000), "8k+".
std::string LongBenchLengthBucket(int64_t length);

// A prompt split where the context ends: head (instructions and context) and
// tail (the question and the answer cue). The query-agnostic mode compresses
// the head before the tail is read.
struct SplitPrompt {
  std::string head, tail;
};
// Fills the dataset's template ({context}, {input}; each placeholder once, the
// values never re-scanned).
SplitPrompt LongBenchPrompt(const LongBenchDataset& d, const LongBenchRecord& r);

// ---- LongBench v2: multiple choice A-D ----

struct LongBenchV2Record {
  int64_t line = 0;
  std::string id, domain, sub_domain, difficulty, length;  // difficulty easy|hard; length short|medium|long
  std::string question, context, answer;                   // answer: "A" .. "D"
  std::string choices[4];
};
// prompts/0shot.txt with the fields stripped (pred.py), split at the context's end.
SplitPrompt LongBenchV2Prompt(const LongBenchV2Record& r);
// pred.py's extract_answer: '*' removed, then "The correct answer is (X)" or
// "The correct answer is X" for X in A-D; "" when neither matches.
std::string ExtractChoice(const std::string& response);
constexpr int64_t kLongBenchV2MaxGen = 128;  // pred.py's max_new_tokens (without CoT)

// ---- files ----

constexpr uint64_t kMaxDatasetBytes = uint64_t{4} << 30;         // a whole dataset file
constexpr uint64_t kMaxDatasetRecordBytes = uint64_t{64} << 20;  // one JSONL record (InfiniteBench's run to ~10 MB)

// Reads a LongBench / LongBench-E JSONL file: every line a JSON object with
// context, input (strings), answers (a non-empty list of strings), all_classes
// (null or a list of strings), length (optional integer). Errors name the file,
// the line and the field: "FILE:LINE: field 'answers' ...". `max_records` > 0
// keeps the first that many records (every line is still checked).
Status LoadLongBenchFile(const std::string& path, const std::string& text, const LongBenchDataset& d,
                         int64_t max_records, std::vector<LongBenchRecord>* out);
// The same for LongBench v2 (its data.json as JSONL, or a JSON array).
Status LoadLongBenchV2File(const std::string& path, const std::string& text, int64_t max_records,
                           std::vector<LongBenchV2Record>* out);

}  // namespace kvlab
