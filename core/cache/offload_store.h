// OffloadStore: the host and disk tiers of the KV cache. Holds copies of
// blocks moved off the device: in a host BlockPool up to a byte budget, then
// in a file read and written with pread/pwrite. Core (KVCache) is its only
// caller. Get() may run on a prefetch thread concurrently with other Get()s;
// Put/Free only from the engine thread between steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/block_pool.h"
#include "core/base/status.h"

namespace kvlab {

class OffloadStore {
 public:
  enum class Where : uint8_t { kHost = 0, kDisk = 1 };

  // Two block formats (plain and encoded) share the store; format f has
  // block_bytes[f]. host_budget_bytes bounds the host tier.
  static Status Create(const std::vector<int64_t>& block_bytes, int64_t host_budget_bytes, const std::string& disk_dir,
                       std::unique_ptr<OffloadStore>* out);
  ~OffloadStore();

  // Copies one block of format f out of `src`; returns its handle.
  Status Put(int format, const uint8_t* src, int64_t* handle);
  // Copies a block back into `dst`.
  Status Get(int64_t handle, uint8_t* dst) const;
  void Free(int64_t handle);
  Where WhereIs(int64_t handle) const { return entries_[static_cast<size_t>(handle)].where; }

  int64_t host_bytes() const;
  int64_t disk_bytes() const { return disk_bytes_; }
  int64_t num_blocks() const { return num_live_; }

 private:
  struct Entry {
    int format = 0;
    Where where = Where::kHost;
    int64_t slot = -1;  // host pool block id or disk slot index (per format)
    bool live = false;
  };
  OffloadStore() = default;
  std::vector<int64_t> block_bytes_;
  std::vector<std::unique_ptr<BlockPool>> host_;  // per format
  std::vector<int> fds_;                          // disk file per format
  std::vector<std::vector<int64_t>> disk_free_;   // free disk slots per format
  std::vector<int64_t> disk_next_;                // next never-used disk slot per format
  std::vector<Entry> entries_;
  std::vector<int64_t> free_handles_;
  int64_t disk_bytes_ = 0;
  int64_t num_live_ = 0;
};

}  // namespace kvlab
