// `kvlab train` configs (TOML, datasets/trainer/train_config.h).
#include <string>

#include "datasets/trainer/train_config.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(train_config) {
  kvlab::TrainConfig c;
  (void)kvlab::ParseTrainConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml", &c);
  return 0;
}
