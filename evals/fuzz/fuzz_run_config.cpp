// `kvlab generate --config` run configs (TOML, core/engine/run_config.h).
#include <string>

#include "core/engine/run_config.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(run_config) {
  kvlab::RunConfig rc;
  (void)kvlab::ParseRunConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml", &rc);
  return 0;
}
