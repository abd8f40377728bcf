// serve-bench configs (TOML, core/serve/serve_bench.h).
#include <string>

#include "core/serve/serve_bench.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(serve_bench_config) {
  kvlab::ServeBenchConfig c;
  (void)kvlab::ParseServeBenchConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml", &c);
  return 0;
}
