// The safetensors parser (core/model/safetensors.h) on a whole file's bytes:
// the 8-byte header length, the header JSON, the data. A file it accepts has
// every tensor's bytes read, so a view outside the input is an ASan report.
#include <map>
#include <string>

#include "core/model/safetensors.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(safetensors) {
  std::map<std::string, kvlab::TensorView> tensors;
  std::map<std::string, std::string> metadata;
  const kvlab::Status s = kvlab::ParseSafetensorsBytes(data, size, "fuzz.safetensors", &tensors, &metadata);
  if (!s.ok()) return 0;
  volatile uint8_t sum = 0;
  for (const auto& [name, t] : tensors) {
    for (int64_t i = 0; i < t.nbytes; ++i) sum = static_cast<uint8_t>(sum + t.data[i]);
  }
  return 0;
}
