// BlockPool: fixed-size KV blocks of one storage format (one byte size), the
// only place KV memory comes from. All byte accounting (in use, reserved,
// peak, the run reserve) is read from here, never computed from a formula.
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
// cudaFree, from core/attention/cuda_backend.h). Kept as two functions so that pools,
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
  // Every block is in exactly one state: free (on the free list), held
  // (reference count > 0: KV of some stream, or the prefix cache's), or in
  // the run reserve (taken off the free list for a stream's next blocks,
  // holding no KV yet).
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_run_reserve() const { return num_run_reserve_; }
  int64_t num_used() const { return num_blocks_ - num_free() - num_run_reserve_; }
  bool CanAllocate(int64_t n) const { return n <= num_free(); }

  // Returns a block id with reference count 1, or -1 when the pool is full.
  int32_t Allocate();
  // Adds a holder (prefix sharing). REQUIRES: id is allocated.
  void IncRef(int32_t id);
  // Drops a holder; the block returns to the free list at zero. REQUIRES: id is allocated.
  void DecRef(int32_t id);
  int32_t RefCount(int32_t id) const { return refcount_[static_cast<size_t>(id)]; }

  // --- runs reserved ahead (KVCache's decode-time growth) ---
  // Moves n free blocks with consecutive ids [first, first + n) from the free
  // list into the run reserve and returns first; -1, changing nothing, when
  // no n consecutive ids are free. Scans the ids from where the last run
  // ended (O(num_blocks) at worst); after a failed scan, runs at least as
  // long fail at once until a block returns to the free list.
  int32_t ReserveRun(int64_t n);
  // A reserved block becomes held, with reference count 1. REQUIRES: id is in the run reserve.
  void TakeReserved(int32_t id);
  // A reserved block returns to the free list. REQUIRES: id is in the run reserve.
  void ReleaseReserved(int32_t id);
  bool InRunReserve(int32_t id) const {
    return refcount_[static_cast<size_t>(id)] == 0 && free_pos_[static_cast<size_t>(id)] < 0;
  }

  // Host arena; null without storage and for device pools.
  uint8_t* data() const { return arena_; }
  // Device arena (CreateOnDevice), else null.
  uint8_t* device_data() const { return device_arena_; }
  bool on_device() const { return device_arena_ != nullptr; }
  uint8_t* BlockData(int32_t id) const { return arena_ + static_cast<int64_t>(id) * block_bytes_; }

  // Held blocks only: the run reserve is not KV (bytes_run_reserve says it).
  int64_t bytes_in_use() const { return num_used() * block_bytes_; }
  // The pool's capacity (every block, whatever its state).
  int64_t bytes_reserved() const { return num_blocks_ * block_bytes_; }
  int64_t peak_bytes_in_use() const { return peak_used_ * block_bytes_; }
  int64_t bytes_run_reserve() const { return num_run_reserve_ * block_bytes_; }
  int64_t peak_bytes_run_reserve() const { return peak_run_reserve_ * block_bytes_; }
  void ResetPeak() {
    peak_used_ = num_used();
    peak_run_reserve_ = num_run_reserve_;
  }

 private:
  std::string name_;
  int64_t block_bytes_;
  int64_t num_blocks_;
  BlockPool(std::string name, int64_t block_bytes, int64_t num_blocks);
  uint8_t* arena_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint8_t* device_arena_ = nullptr;
  std::function<void(uint8_t*)> device_release_;
  void PushFree(int32_t id);
  void RemoveFree(int32_t id);
  // The first id of n consecutive free ids in [lo, hi), or -1.
  int64_t FindFreeRun(int64_t lo, int64_t hi, int64_t n) const;
  std::vector<int32_t> free_;      // LIFO; lowest ids handed out first initially
  std::vector<int32_t> free_pos_;  // index of each id in free_, -1 when not free
  std::vector<int32_t> refcount_;
  int64_t peak_used_ = 0;
  int64_t num_run_reserve_ = 0;
  int64_t peak_run_reserve_ = 0;
  int64_t run_cursor_ = 0;          // where the next run search starts
  int64_t failed_run_ = INT64_MAX;  // shortest run a scan failed to find since the last free
};

}  // namespace kvlab
