// CacheShape: the shape of a paged KV cache (layers, stored heads, head_dim,
// block size, storage dtype, sealed encoding, per-layer windows), and the one
// rule that derives it from a model's KV shape and a policy stack. The engine,
// the model-free executor and the memory calculator all call DeriveCacheShape.
// Plain values only: the cache sits below core/model, so the model's side
// comes in as a ModelKvShape (core/model's KvShapeOf builds one).
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "kernels/kv_encoding.h"
#include "policies/kv_policy.h"

namespace kvlab {

struct CacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;  // stored KV heads per layer (after any head sharing)
  int head_dim = 0;
  int block_size = 16;
  DType dtype = DType::kBF16;
  // Representation: when `encoded`, the oldest plain tokens beyond the most
  // recent `residual` are sealed into encoded blocks of enc.tokens_per_block
  // tokens (REQUIRES: a multiple of block_size), kept in a second pool.
  bool encoded = false;
  KvEncoding enc;
  int64_t residual = 0;
  // Sliding windows: per layer, 0 for a global layer, else the window in
  // positions (ModelConfig::layer_sliding_window). Empty: every layer global.
  // A window layer's streams keep only what the next queries can see (whole
  // leading blocks are freed), and its page table carries first_visible.
  std::vector<int64_t> layer_window;

  int64_t Window(int layer) const {
    return layer_window.empty() ? 0 : layer_window[static_cast<size_t>(layer)];
  }
  bool HasWindows() const {
    for (int64_t w : layer_window) {
      if (w > 0) return true;
    }
    return false;
  }
  int64_t BlockBytes() const { return 2LL * block_size * head_dim * DTypeBytes(dtype); }
  int StreamsPerSequence() const { return num_layers * num_kv_heads; }
  Status Validate() const;
};

// What the cache needs of a model: its layers, KV heads (before any head
// sharing), head_dim and per-layer sliding windows (0: global; empty: all
// global; entries past num_layers are ignored, as when a preset is cut to
// fewer layers).
struct ModelKvShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::vector<int64_t> layer_window;
};

// The cache shape of `stack` on `model` with `block_size` tokens per block and
// the run's `kv_dtype`: the stack's CheckShape, stored heads, storage dtype and
// sealed encoding, then CacheShape::Validate. The error names the parameter.
Status DeriveCacheShape(const ModelKvShape& model, const PolicyStack& stack, int block_size, DType kv_dtype,
                        CacheShape* out);

}  // namespace kvlab
