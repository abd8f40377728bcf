// Next-token sampling from logits: greedy, or temperature plus nucleus (top-p)
// from a seeded generator, one Sampler per sequence so results do not depend
// on batch composition. Torch-free.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kvlab {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  // `stream` distinguishes sequences sharing one seed.
  Sampler(const SamplingParams& params, uint64_t stream);
  int32_t Sample(const float* logits, int64_t vocab);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

// Index of the largest logit (lowest index on ties).
int32_t Argmax(const float* logits, int64_t vocab);

}  // namespace kvlab
