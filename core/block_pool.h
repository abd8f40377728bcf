// BlockPool: fixed-size KV blocks of one storage format (one byte size), the
// only place KV memory comes from. All byte accounting (in use, reserved,
// peak) is read from here, never computed from a formula.
// Not thread-safe: core mutates pools from the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvlab {

class BlockPool {
 public:
  // Sets aside num_blocks blocks of block_bytes each. With with_storage, the
  // arena is an anonymous mapping (pages are committed by the OS on first
  // touch); without it the pool only accounts (model-free mode at real model
  // shapes) and data() is null. Fails (ResourceExhausted) if the mapping fails.
  static Status Create(std::string name, int64_t block_bytes, int64_t num_blocks, bool with_storage,
                       std::unique_ptr<BlockPool>* out);
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

  uint8_t* data() const { return arena_; }
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
  std::vector<int32_t> free_;      // LIFO; lowest ids handed out first initially
  std::vector<int32_t> refcount_;
  int64_t peak_used_ = 0;
};

}  // namespace kvlab
