#include "core/cache/cache_shape.h"

#include <string>

namespace kvlab {

Status CacheShape::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return Status::InvalidArgument("cache shape: num_layers, num_kv_heads and head_dim must be positive");
  }
  if (block_size <= 0 || block_size > 4096) {
    return Status::InvalidArgument("cache shape: block_size must be in [1, 4096], got " + std::to_string(block_size));
  }
  if (encoded) {
    const std::string err = enc.Validate();
    if (!err.empty()) return Status::InvalidArgument(err);
    if (enc.head_dim != head_dim) return Status::InvalidArgument("cache shape: encoding head_dim differs from the cache's");
    if (enc.tokens_per_block % block_size != 0) {
      return Status::InvalidArgument("cache shape: encoded blocks hold " + std::to_string(enc.tokens_per_block) +
                                     " tokens, not a multiple of block_size " + std::to_string(block_size));
    }
    if (residual < 0) return Status::InvalidArgument("cache shape: residual must be >= 0");
  }
  if (!layer_window.empty() && static_cast<int>(layer_window.size()) != num_layers) {
    return Status::InvalidArgument("cache shape: layer_window has " + std::to_string(layer_window.size()) +
                                   " entries for " + std::to_string(num_layers) + " layers");
  }
  for (size_t l = 0; l < layer_window.size(); ++l) {
    if (layer_window[l] < 0) {
      return Status::InvalidArgument("cache shape: layer " + std::to_string(l) + "'s sliding window is " +
                                     std::to_string(layer_window[l]) + " (0: global, else positive)");
    }
  }
  return Status::OK();
}

Status DeriveCacheShape(const ModelKvShape& model, const PolicyStack& stack, int block_size, DType kv_dtype,
                        CacheShape* out) {
  KVLAB_RETURN_IF_ERROR(stack.CheckShape(model.num_kv_heads, model.head_dim, block_size));
  CacheShape shape;
  shape.num_layers = model.num_layers;
  shape.num_kv_heads = stack.StoredKvHeads(model.num_kv_heads);
  KVLAB_RETURN_IF_ERROR(stack.CheckLayout(model.num_layers, shape.num_kv_heads));
  shape.head_dim = model.head_dim;
  shape.block_size = block_size;
  shape.dtype = stack.StorageDType(kv_dtype);
  shape.layer_window = model.layer_window;
  if (model.num_layers >= 0 && shape.layer_window.size() > static_cast<size_t>(model.num_layers)) {
    shape.layer_window.resize(static_cast<size_t>(model.num_layers));
  }
  shape.encoded = stack.SealedEncoding(shape.head_dim, shape.block_size, &shape.enc, &shape.residual);
  shape.enc.dtype = shape.dtype;  // the plain blocks' (formats that store numbers unquantized use it)
  KVLAB_RETURN_IF_ERROR(shape.Validate());
  *out = std::move(shape);
  return Status::OK();
}

}  // namespace kvlab
