// InfiniteBench's tasks from files (Zhang et al. 2024, "∞Bench: Extending
// Long Context Evaluation Beyond 100K Tokens"; OpenBMB/InfiniteBench): its
// JSONL records (id, context, input, answer, options), its prompts for base
// models (src/prompt.py's yarn_mistral_templates, filled as
// src/eval_utils.py's create_prompt does), its generation budgets
// (DATA_NAME_TO_MAX_NEW_TOKENS) and its scoring (src/compute_scores.py), as
// kvlab's own code. Called by evals/tasks/longbench.cpp and the tests; torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "datasets/tasks/longbench.h"

namespace kvlab {

struct InfiniteBenchTask {
  std::string name;     // InfiniteBench's (its file's stem: passkey.jsonl, ...)
  std::string metric;   // the scorer: passkey | kv_retrieval | choice | qa_f1 | qa_f1_zh | dialogue | math_find
                        // | math_calc | code_run | code_debug | rouge_lsum
  int64_t max_gen = 0;  // DATA_NAME_TO_MAX_NEW_TOKENS
};
// passkey, number_string, kv_retrieval, longbook_choice_eng, longbook_qa_eng,
// longbook_qa_chn, longdialogue_qa_eng, math_find, math_calc, code_run, code_debug, longbook_sum_eng.
const std::vector<InfiniteBenchTask>& InfiniteBenchTasks();
const InfiniteBenchTask* FindInfiniteBenchTask(const std::string& name);

struct InfiniteBenchRecord {
  int64_t line = 0;
  std::string context, input;
  std::vector<std::string> options;  // choice tasks: 4
  // The labels as text (a number as its JSON text): get_answer's list; for the
  // choice tasks [the answer's option text, its letter].
  std::vector<std::string> labels;
  std::vector<std::string> values;   // math_calc: the intermediate values, as integers' text
  bool float_label = false;          // math_find: the label is a float
  std::string func, func_call;       // code_run: from input, "func_12(-3)"
  std::string target;                // math_find: "the largest number", from input
};

// The template filled, split where the context ends.
SplitPrompt InfiniteBenchPrompt(const InfiniteBenchTask& t, const InfiniteBenchRecord& r);
// compute_scores.py's get_score_one: 0 or 1, or a fraction (qa_f1, math_calc).
double InfiniteBenchScore(const InfiniteBenchTask& t, const std::string& prediction, const InfiniteBenchRecord& r);

// Reads an InfiniteBench JSONL file: context, input (strings), answer (a
// string, a number or a non-empty list of them; math_calc a list of
// integers), options (4 strings for the choice tasks, the answer among them).
// Errors name the file, the line and the field.
Status LoadInfiniteBenchFile(const std::string& path, const std::string& text, const InfiniteBenchTask& t,
                             int64_t max_records, std::vector<InfiniteBenchRecord>* out);

}  // namespace kvlab
