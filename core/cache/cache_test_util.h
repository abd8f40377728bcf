// Helpers the KV cache's tests share (and tests of the rooms above that build
// caches by hand). Test-only.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/cache/cache_shape.h"

namespace kvlab {

// A cache shape small enough to check by hand: head_dim 4, fp32 by default.
inline CacheShape TinyCacheShape(int layers, int heads, int block_size, DType dtype = DType::kF32) {
  CacheShape s;
  s.num_layers = layers;
  s.num_kv_heads = heads;
  s.head_dim = 4;
  s.block_size = block_size;
  s.dtype = dtype;
  return s;
}

// Positions start, start + 1, ..., start + n - 1 (what Reserve takes).
inline std::vector<int32_t> Iota(int64_t start, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), static_cast<int32_t>(start));
  return v;
}

}  // namespace kvlab
