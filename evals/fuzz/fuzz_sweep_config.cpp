// `kvlab run` sweep configs (TOML, evals/sweep.h).
#include <string>
#include <vector>

#include "evals/fuzz/fuzz_target.h"
#include "evals/sweep.h"

KVLAB_FUZZ_TARGET(sweep_config) {
  kvlab::SweepConfig c;
  (void)kvlab::ParseSweepConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml", {}, &c);
  return 0;
}
