// Room datasets/tasks/: the synthetic task generators, shared by training and the sweeps.
// Called by datasets/trainer and evals; includes core/base only.
//
// Synthetic long-context tasks, generated from a seed: passkey retrieval,
// multi-needle retrieval, associative recall, and the copy task that teaches a
// small model to retrieve at all. Used both in the training mix (`kvlab
// train`) and as evals (`kvlab run`). Texts are ASCII; with the byte
// tokenizer one character is one token. Torch-free.
//
// Formats (the filler never holds a digit or a colon, so the needle is the
// only place the answer can come from):
//   passkey:      filler ... "The pass key is 58213. Remember it. 58213 is the pass key." ... filler
//                 "What is the pass key? The pass key is " -> "58213"
//   multi-needle: n facts "The value of key qzwk is 40715." at random depths;
//                 "What is the value of key qzwk? The value of key qzwk is " -> "40715"
//   recall:       pairs "k:5 q:2 x:8 ..." then the query "q:" -> "2" (Zoology's MQAR, one query)
//   copy:         a random string, some filler, then the same string again
//                 (for training: the loss on the second copy is the go/no-go signal)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

enum class TaskKind { kPasskey, kMultiNeedle, kRecall, kCopy };

// Name <-> kind: "passkey", "multi-needle", "recall", "copy".
Status ParseTaskKind(const std::string& name, TaskKind* out);
const char* TaskKindName(TaskKind kind);

struct TaskSpec {
  TaskKind kind = TaskKind::kPasskey;
  int64_t length = 1024;  // prompt + answer, in characters (= byte tokens); BOS not counted
  double depth = 0.5;     // where the needle starts, as a fraction of the filler (passkey)
  int num_needles = 4;    // multi-needle: facts in the context
  int num_pairs = 0;      // recall: pairs (0: as many as fit)
  int digits = 5;         // passkey / multi-needle answer length
  uint64_t seed = 0;
};

struct TaskSample {
  std::string prompt;  // what the model reads
  std::string answer;  // what it must produce next
  // Per character of prompt + answer: 1 for the characters that test the task
  // (the answer, the second copy), else 0. Training weights the loss by it.
  std::vector<uint8_t> target_mask;
  double depth = 0;  // the needle's actual depth in [0, 1]
};

// Deterministic for a spec (same seed, same sample, on every platform).
Status MakeTask(const TaskSpec& spec, TaskSample* out);

// 1 when `generated` starts with the answer, else 0.
double ScoreExact(const TaskSample& sample, const std::string& generated);
// Fraction of the answer's characters reproduced at their position.
double ScoreChars(const TaskSample& sample, const std::string& generated);

// A small deterministic generator (SplitMix64), so that tasks and training
// data do not depend on the standard library's distributions.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t Next();
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t s_;
};

}  // namespace kvlab
