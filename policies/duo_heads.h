// DuoAttention's head split as a file (policies/duo.cpp reads it; `kvlab
// calibrate-heads`, evals/calibrate_heads.cpp, writes it): one score per
// (layer, KV head), the higher the more the model's output moves when that
// head alone keeps only sinks + a recent window (a retrieval head). TOML:
//
//   format = "kvlab-duo-heads"
//   model = "tiny-gqa"            # an identifier of the model it was measured on
//   num_layers = 4
//   num_kv_heads = 2
//   sinks = 4                     # the window the calibration measured with
//   recent = 64
//   metric = "kl"                 # what a score is (kl: mean KL of the answer's logits)
//   samples = 8
//   length = 512
//   scores = [[0.12, 0.0031], [0.9, 0.02], ...]   # [layer][kv head]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

struct DuoHeadScores {
  std::string model;
  int num_layers = 0;
  int num_kv_heads = 0;
  int64_t sinks = 0, recent = 0;  // the calibration's streaming window
  std::string metric = "kl";
  int64_t samples = 0, length = 0;
  std::vector<double> scores;  // [layer * num_kv_heads + head], finite and >= 0
};

// Reads and checks a split file; every error names `policy`, the parameter
// `param` and the file (a missing file, a key missing or of the wrong type, a
// scores table not num_layers x num_kv_heads, a negative or non-finite score).
Status ReadDuoHeads(const std::string& path, const char* policy, const char* param, DuoHeadScores* out);
// Writes one (TOML, the layout above).
Status WriteDuoHeads(const std::string& path, const DuoHeadScores& s);

// The retrieval heads for a kept share `fraction` in (0, 1] of the N scored
// heads: the max(1, round(fraction x N)) highest scores (ties: the lower
// index), as a mask over [layer * heads + head].
std::vector<char> DuoRetrievalMask(const std::vector<double>& scores, double fraction);
int DuoRetrievalCount(size_t num_heads, double fraction);

// An explicit list of streaming heads, "L.H+L.H" ("0.1+3.0": layer 0 head 1
// and layer 3 head 0); "" is none. Pairs are returned as (layer, head), in
// the order given; an error names `policy` and the parameter `param`.
Status ParseDuoHeadList(const std::string& text, const char* policy, const char* param,
                        std::vector<std::pair<int, int>>* out);

}  // namespace kvlab
