// config.json (core/model/model_config.h): the full loader of the known
// families, and the KV-shape reader `kvlab memory` uses for any decoder.
#include <string>

#include "core/model/model_config.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(model_config) {
  const std::string path = kvlab::fuzz::WriteScratchFile("config.json", data, size);
  kvlab::ModelConfig c;
  (void)kvlab::LoadModelConfig(path, &c);
  kvlab::ModelConfig shape;
  std::string unverified;
  (void)kvlab::LoadKvShape(path, &shape, &unverified);
  return 0;
}
