#include "core/cache/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstdint>

namespace kvlab {

Status BlockPool::Create(std::string name, int64_t block_bytes, int64_t num_blocks, bool with_storage,
                         std::unique_ptr<BlockPool>* out) {
  if (block_bytes <= 0 || num_blocks < 0 || num_blocks > INT32_MAX) {
    return Status::InvalidArgument("block pool '" + name + "': block_bytes must be > 0 and num_blocks in [0, 2^31)");
  }
  std::unique_ptr<BlockPool> pool(new BlockPool(std::move(name), block_bytes, num_blocks));
  if (with_storage && num_blocks > 0) {
    pool->mapped_bytes_ = static_cast<size_t>(block_bytes * num_blocks);
    void* p = mmap(nullptr, pool->mapped_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return Status::ResourceExhausted("block pool '" + pool->name_ + "': cannot map " +
                                       std::to_string(pool->mapped_bytes_) + " bytes");
    }
    pool->arena_ = static_cast<uint8_t*>(p);
    // Transparent huge pages: blocks of a stream are scattered over the
    // arena, and 4 KiB pages make every block a TLB miss (16K-token decode
    // attention at llama-3.1-8b shape: 7.2 ms -> 5.7 ms here). Advice only.
    madvise(p, pool->mapped_bytes_, MADV_HUGEPAGE);
  }
  *out = std::move(pool);
  return Status::OK();
}

Status BlockPool::CreateOnDevice(std::string name, int64_t block_bytes, int64_t num_blocks,
                                 const DeviceArenaAllocator& allocator, std::unique_ptr<BlockPool>* out) {
  std::unique_ptr<BlockPool> pool;
  KVLAB_RETURN_IF_ERROR(Create(std::move(name), block_bytes, num_blocks, /*with_storage=*/false, &pool));
  if (!allocator.allocate || !allocator.release) {
    return Status::InvalidArgument("block pool '" + pool->name_ + "': device allocator without allocate/release");
  }
  // One block at least, so that the arena pointer exists for kernels' checks.
  const int64_t bytes = block_bytes * std::max<int64_t>(num_blocks, 1);
  uint8_t* p = nullptr;
  Status s = allocator.allocate(bytes, &p);
  if (!s.ok()) {
    return Status::ResourceExhausted("block pool '" + pool->name_ + "': cannot allocate " + std::to_string(bytes) +
                                     " bytes on " + allocator.device + ": " + s.message());
  }
  pool->device_arena_ = p;
  pool->device_release_ = allocator.release;
  *out = std::move(pool);
  return Status::OK();
}

BlockPool::BlockPool(std::string name, int64_t block_bytes, int64_t num_blocks)
    : name_(std::move(name)), block_bytes_(block_bytes), num_blocks_(num_blocks) {
  free_.reserve(static_cast<size_t>(num_blocks));
  free_pos_.assign(static_cast<size_t>(num_blocks), -1);
  for (int64_t i = num_blocks - 1; i >= 0; --i) PushFree(static_cast<int32_t>(i));
  refcount_.assign(static_cast<size_t>(num_blocks), 0);
}

BlockPool::~BlockPool() {
  if (arena_ != nullptr) munmap(arena_, mapped_bytes_);
  if (device_arena_ != nullptr) device_release_(device_arena_);
}

void BlockPool::PushFree(int32_t id) {
  free_pos_[static_cast<size_t>(id)] = static_cast<int32_t>(free_.size());
  free_.push_back(id);
  failed_run_ = INT64_MAX;  // a run may exist now
}

void BlockPool::RemoveFree(int32_t id) {
  // The last entry takes the removed one's place: O(1), and the LIFO order
  // of the others is kept except for that one entry.
  const int32_t pos = free_pos_[static_cast<size_t>(id)];
  const int32_t last = free_.back();
  free_[static_cast<size_t>(pos)] = last;
  free_pos_[static_cast<size_t>(last)] = pos;
  free_.pop_back();
  free_pos_[static_cast<size_t>(id)] = -1;
}

int32_t BlockPool::Allocate() {
  if (free_.empty()) return -1;
  const int32_t id = free_.back();
  free_.pop_back();
  free_pos_[static_cast<size_t>(id)] = -1;
  refcount_[static_cast<size_t>(id)] = 1;
  if (num_used() > peak_used_) peak_used_ = num_used();
  return id;
}

void BlockPool::IncRef(int32_t id) {
  assert(refcount_[static_cast<size_t>(id)] > 0);
  ++refcount_[static_cast<size_t>(id)];
}

void BlockPool::DecRef(int32_t id) {
  int32_t& rc = refcount_[static_cast<size_t>(id)];
  assert(rc > 0);
  if (--rc == 0) PushFree(id);
}

int64_t BlockPool::FindFreeRun(int64_t lo, int64_t hi, int64_t n) const {
  int64_t len = 0;
  for (int64_t i = lo; i < hi; ++i) {
    len = free_pos_[static_cast<size_t>(i)] >= 0 ? len + 1 : 0;
    if (len == n) return i - n + 1;
  }
  return -1;
}

int32_t BlockPool::ReserveRun(int64_t n) {
  if (n <= 0 || n > num_free() || n >= failed_run_) return -1;
  // Next fit: from where the last run ended, then from the start (a run may
  // cross the cursor).
  int64_t first = FindFreeRun(run_cursor_, num_blocks_, n);
  if (first < 0) first = FindFreeRun(0, std::min(num_blocks_, run_cursor_ + n - 1), n);
  if (first < 0) {
    failed_run_ = n;
    return -1;
  }
  for (int64_t i = first; i < first + n; ++i) RemoveFree(static_cast<int32_t>(i));
  num_run_reserve_ += n;
  peak_run_reserve_ = std::max(peak_run_reserve_, num_run_reserve_);
  run_cursor_ = first + n == num_blocks_ ? 0 : first + n;
  return static_cast<int32_t>(first);
}

void BlockPool::TakeReserved(int32_t id) {
  assert(InRunReserve(id));
  refcount_[static_cast<size_t>(id)] = 1;
  --num_run_reserve_;
  if (num_used() > peak_used_) peak_used_ = num_used();
}

void BlockPool::ReleaseReserved(int32_t id) {
  assert(InRunReserve(id));
  --num_run_reserve_;
  PushFree(id);
}

}  // namespace kvlab
