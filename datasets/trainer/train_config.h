// `kvlab train` configs (TOML), parsed with file:line:column errors. Torch-free.
//
//   out = "datasets/models/tiny-gqa"   # relative paths: to the config's directory
//   init = "..."                       # optional HF checkpoint to start from (uptraining)
//   [model]                            # a preset (`preset = "small"`) and/or fields
//   hidden_size = 256                  # vocab is the byte tokenizer's 259
//   intermediate_size = 704
//   num_hidden_layers = 4
//   num_attention_heads = 8
//   num_key_value_heads = 2
//   rope_theta = 10000.0
//   max_position_embeddings = 2048
//   [train]
//   seed = 1; lr = 2e-3; min_lr = 2e-4; warmup_steps = 100; weight_decay = 0.1
//   beta1 = 0.9; beta2 = 0.95; grad_clip = 1.0; threads = 0 (all cores)
//   log_every = 10; eval_every = 200; checkpoint_every = 200; eval_tokens = 65536
//   [data]
//   train = "../../corpus/train.txt"; heldout = "../../corpus/heldout.txt"
//   essay = "../../corpus/brown-train.txt"   # the essay haystack of RULER's essay tasks (ruler_tasks)
//   [[phase]]                          # run in order; the LR schedule spans them all
//   schedule_steps = 4000              # optional: from this phase on, the LR schedule is computed as
//                                      # if the run were this many steps long (a plan lengthened mid-run)
//   steps = 1000; seq_len = 256; batch = 16
//   text = 1.0; passkey = 0.0; multi_needle = 0.0; recall = 0.0; copy = 0.0   # mix weights
//   ruler = 0.0                        # mix weight of RULER's synthetic tasks (datasets/tasks/ruler.h),
//   ruler_tasks = ["niah_single_1", "vt"]   # drawn uniformly from these; the essay tasks read [data] essay
//   answer_weight = 1.0                # loss weight of the task-testing tokens
//   filler_weight = 1.0                # loss weight of the other tokens of task samples
//   min_length = 0.25                  # task samples' lengths are uniform in [min_length, 1] x seq_len
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/base/status.h"

namespace kvlab {

struct TrainPhase {
  int64_t steps = 0, seq_len = 256, batch = 16;
  double text = 1.0, passkey = 0.0, multi_needle = 0.0, recall = 0.0, copy = 0.0, ruler = 0.0;
  std::vector<std::string> ruler_tasks;  // RULER task names the ruler weight draws from, uniformly
  double answer_weight = 1.0, filler_weight = 1.0;
  double min_length = 0.25;  // shortest task sample, as a fraction of seq_len
  int64_t schedule_steps = 0;  // > 0: from this phase on, the schedule's length (0: inherit)
  std::string where;  // file:line:col, for messages
};

struct TrainConfig {
  std::string path;  // the config file
  std::string out, init;
  ModelConfig model;
  uint64_t seed = 1;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0;
  int64_t warmup_steps = 100, threads = 0, log_every = 10, eval_every = 200, checkpoint_every = 200,
          eval_tokens = 65536, eval_seq_len = 0;  // 0: the last phase's seq_len
  std::string train_data, heldout_data;
  // [data] boost, boost_share: when set, each text row is drawn from the
  // boost file with probability boost_share and from train otherwise (to
  // weight one part of the corpus more than its size would). Unset, the rows
  // come from train alone and the random stream is as without the option.
  std::string boost_data;
  double boost_share = 0;
  std::string essay_data;  // [data] essay: RULER's essay haystack for the ruler mix's essay tasks
  std::vector<TrainPhase> phases;

  int64_t TotalSteps() const;
  // The learning rate at a 0-based step: linear warm-up over warmup_steps to
  // lr, then one cosine down to min_lr at the schedule's last step. The
  // schedule is TotalSteps() long unless a phase at or before the step sets
  // schedule_steps (the latest such phase wins): a run whose plan was
  // lengthened while it ran records, phase by phase, the plan each part ran
  // under, and a fresh run of the config follows the same rates exactly.
  double LearningRateAt(int64_t step) const;
  // The phase a 0-based step belongs to.
  const TrainPhase& PhaseAt(int64_t step) const;
};

Status LoadTrainConfig(const std::string& path, TrainConfig* out);
// `path` is used in messages and to resolve relative paths.
Status ParseTrainConfig(const std::string& text, const std::string& path, TrainConfig* out);

}  // namespace kvlab
