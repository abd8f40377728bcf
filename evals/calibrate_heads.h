// `kvlab calibrate-heads`: DuoAttention's head split measured on a model
// (policies/duo.cpp reads the file it writes, policies/duo_heads.h).
//
// On `samples` passkey prompts of `length` tokens (the needle at depths spread
// evenly over [0, 1]; seeds from 2^40 up, apart from the sweeps' passkey
// seeds), each prompt and its answer are teacher-forced through the engine
// (the prompt in max_step_tokens steps, then the answer a token a step) once
// under `full` and once per (layer, KV head) under duo with only that head
// streaming (sinks + recent). A head's score is the KL(full || that run) of
// the next-token distributions at the answer's positions, averaged over the
// positions and the samples: how much the output moves when that head alone
// loses its long context. The paper instead optimises a gate per head with a
// distillation loss on such data; this is a direct, cheaper proxy.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "policies/duo_heads.h"

namespace kvlab {

struct CalibrateHeadsOptions {
  std::string model;     // a model directory (its tokenizer makes the prompts)
  int64_t samples = 8;   // passkey prompts
  int64_t length = 1024; // tokens per prompt, answer included
  int64_t sinks = 4, recent = 252;  // the streaming window measured
  int threads = 0;       // 0: all cores
  int block_size = 16;
  std::string kv_dtype = "bf16";
};

// Scores every (layer, KV head) of o.model; out->model is the directory's
// last path component. `progress` (may be null) gets one line per head.
Status CalibrateHeads(const CalibrateHeadsOptions& o, DuoHeadScores* out, void (*progress)(const std::string&));

}  // namespace kvlab
