// Helpers the KV cache's tests share (and tests of the rooms above that build
// caches by hand). Test-only.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace kvlab {

// Positions start, start + 1, ..., start + n - 1 (what Reserve takes).
inline std::vector<int32_t> Iota(int64_t start, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), static_cast<int32_t>(start));
  return v;
}

}  // namespace kvlab
