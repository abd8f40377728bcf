// BlockPool: fixed-size KV blocks of one storage format (one byte size), the
// only place KV memory comes from. All byte accounting (in use, reserved,
// peak) is read from here, never computed from a formula.
// Not thread-safe: core mutates pools from the engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace kvlab {

// Device memory for a pool's arena (the CUDA engine path: cudaMalloc and
// cudaFree, from core/engine/cuda_backend.h). Kept as two functions so that pools,
// and everything built on them, stay free of CUDA and libtorch.
struct DeviceArenaAllocator {
  std::string device;                                          // for messages, e.g. "cuda:0"
  std::function<Status(int64_t bytes, uint8_t** out)> allocate;  // ResourceExhausted when it cannot
  std::function<void(uint8_t*)> release;
};

class BlockPool {
 public:
  // Sets aside num_blocks blocks of block_bytes each. With with_storage, the
  // arena is an anonymous mapping (pages are committed by the OS on first
  // touch); without it the pool only accounts (model-free mode at real model
  // shapes) and data() is null. Fails (ResourceExhausted) if the mapping fails.
  static Status Create(std::string name, int64_t block_bytes, int64_t num_blocks, bool with_storage,
                       std::unique_ptr<BlockPool>* out);
  // A pool whose arena is device memory from `allocator` (allocated at once,
  // released with the pool). Host code must not touch its bytes, so data() is
  // null (core then keeps the books and skips the host-side data work, as for
  // a pool without storage) and device_data() is the arena; whoever owns the
  // device (the CUDA backend) moves the data.
  static Status CreateOnDevice(std::string name, int64_t block_bytes, int64_t num_blocks,
                               const DeviceArenaAllocator& allocator, std::unique_ptr<BlockPool>* out);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const std::string& name() const { return name_; }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  bool CanAllocate(int64_t n) const { return n <= num_free(); }

  // Returns a block id with reference count 1, or -1 when the pool is full.
  int32_t Allocate();
  // Adds a holder (prefix sharing). REQUIRES: id is allocated.
  void IncRef(int32_t id);
  // Drops a holder; the block returns to the free list at zero. REQUIRES: id is allocated.
  void DecRef(int32_t id);
  int32_t RefCount(int32_t id) const { return refcount_[static_cast<size_t>(id)]; }

  // Host arena; null without storage and for device pools.
  uint8_t* data() const { return arena_; }
  // Device arena (CreateOnDevice), else null.
  uint8_t* device_data() const { return device_arena_; }
  bool on_device() const { return device_arena_ != nullptr; }
  uint8_t* BlockData(int32_t id) const { return arena_ + static_cast<int64_t>(id) * block_bytes_; }

  int64_t bytes_in_use() const { return num_used() * block_bytes_; }
  int64_t bytes_reserved() const { return num_blocks_ * block_bytes_; }
  int64_t peak_bytes_in_use() const { return peak_used_ * block_bytes_; }
  void ResetPeak() { peak_used_ = num_used(); }

 private:
  std::string name_;
  int64_t block_bytes_;
  int64_t num_blocks_;
  BlockPool(std::string name, int64_t block_bytes, int64_t num_blocks);
  uint8_t* arena_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint8_t* device_arena_ = nullptr;
  std::function<void(uint8_t*)> device_release_;
  std::vector<int32_t> free_;      // LIFO; lowest ids handed out first initially
  std::vector<int32_t> refcount_;
  int64_t peak_used_ = 0;
};

}  // namespace kvlab
