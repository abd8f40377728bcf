// Room datasets/trainer/: `kvlab train` and `kvlab convert` (the testbed's own models).
// Called by evals (the CLI); includes core/engine, core/model and below.
//
// `kvlab train` and `kvlab convert`: training the testbed's own small Llama
// models with libtorch autograd, and pooling KV heads of a checkpoint (the
// GQA paper's MHA -> GQA conversion). Checkpoints are Hugging Face layout
// (config.json + model.safetensors, fp32) that the engine loads as they are;
// the optimizer state (optimizer.pt) and trainer_state.json sit beside them.
// The header is torch-free; trainer.cpp holds the libtorch code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "datasets/trainer/train_config.h"

namespace kvlab {

struct TrainOptions {
  bool quiet = false;        // no progress lines
  int64_t max_steps = -1;    // stop after this many steps (>= 0), checkpointing; for tests
  bool resume = true;        // continue from out/trainer_state.json when present
};

struct TrainResult {
  int64_t steps_done = 0;           // total steps in the checkpoint after this run
  std::vector<double> step_losses;  // the weighted training loss of each step run now
  double heldout_bpb = -1;          // last held-out evaluation (-1: none)
};

Status Train(const TrainConfig& config, const TrainOptions& options, TrainResult* result);

// A process-wide malloc setting for programs that train (kvlab's `train`
// calls it before Train; Train itself leaves the allocator alone): freed
// memory stays in the heap instead of going back to the kernel. Every training
// step frees and re-allocates the same activations (4-34 MB each at 256 x 16);
// glibc serves blocks that large with mmap and unmaps them on free, so each
// step would fault in fresh zeroed pages (a quarter of a step in the kernel,
// by perf). With it, steps are ~30% faster (1,950 against 1,490 tokens/s,
// one thread, tiny-gqa shape; docs/performance.md, "Training (CPU)") with
// identical losses. A no-op where the C library is not glibc.
void KeepFreedMemoryInHeap();

// Mean-pools (or takes the first of) each group of `group` adjacent KV heads of
// the checkpoint in `in_dir`, writing a new checkpoint with
// num_key_value_heads / group KV heads to `out_dir`.
Status ConvertPoolKvHeads(const std::string& in_dir, const std::string& out_dir, int group, bool mean);

// The token rows (BOS then seq_len bytes or task tokens) of the training batch
// at a 0-based step, exactly as Train draws them from these texts (the train,
// [data] boost and [data] essay files' contents); for tests and for
// inspecting the data mix. With `weights`, each row's per-target loss weights
// too (weights[b][t] for predicting rows[b][t + 1]).
std::vector<std::vector<int32_t>> TrainingBatchRows(const TrainConfig& config, int64_t step, const std::string& train_text,
                                                   const std::string& boost_text, const std::string& essay_text = "",
                                                   std::vector<std::vector<float>>* weights = nullptr);

// Next-token logits [tokens, vocab] of the checkpoint in `dir` through the
// trainer's own batched forward (the one gradients flow through), so tests
// can hold it equal to the engine's.
Status TrainerLogits(const std::string& dir, const std::vector<int32_t>& tokens, std::vector<float>* out);


}  // namespace kvlab
