#include "core/cache/offload_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/base/untrusted.h"

namespace kvlab {

Status OffloadStore::Create(const std::vector<int64_t>& block_bytes, int64_t host_budget_bytes,
                            const std::string& disk_dir, std::unique_ptr<OffloadStore>* out) {
  std::unique_ptr<OffloadStore> s(new OffloadStore());
  s->block_bytes_ = block_bytes;
  const int64_t per_format = host_budget_bytes / static_cast<int64_t>(std::max<size_t>(1, block_bytes.size()));
  // The host tier is one pool per block format, sized by the placement
  // policy's host_budget: a budget past what the host can give (or past a
  // pool's 2^31 blocks) is refused naming that parameter, not the pool.
  KVLAB_RETURN_IF_ERROR(CheckHostMemory("the placement policy's parameter 'host_budget' (" +
                                            std::to_string(host_budget_bytes) + " bytes of host tier)",
                                        host_budget_bytes));
  for (int64_t b : block_bytes) {
    if (b > 0 && per_format / b >= (int64_t{1} << 31)) {
      return Status::InvalidArgument("the placement policy's parameter 'host_budget' (" +
                                     std::to_string(host_budget_bytes) + " bytes) makes more than 2^31 host blocks of " +
                                     std::to_string(b) + " bytes; lower it");
    }
  }
  std::string dir = disk_dir;
  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir = t != nullptr ? t : "/tmp";
  }
  for (size_t f = 0; f < block_bytes.size(); ++f) {
    std::unique_ptr<BlockPool> pool;
    KVLAB_RETURN_IF_ERROR(BlockPool::Create("host-" + std::to_string(f), block_bytes[f],
                                            std::max<int64_t>(0, per_format / block_bytes[f]), true, &pool));
    s->host_.push_back(std::move(pool));
    // An unlinked temporary file: nothing is left behind if the process dies.
    std::string tmpl = dir + "/kvlab-offload-XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0) return Status::IOError(dir + ": cannot create the disk tier's file: " + std::strerror(errno));
    unlink(name.data());
    s->fds_.push_back(fd);
  }
  s->disk_free_.resize(block_bytes.size());
  s->disk_next_.assign(block_bytes.size(), 0);
  *out = std::move(s);
  return Status::OK();
}

OffloadStore::~OffloadStore() {
  for (int fd : fds_) close(fd);
}

int64_t OffloadStore::host_bytes() const {
  int64_t n = 0;
  for (const auto& p : host_) n += p->bytes_in_use();
  return n;
}

Status OffloadStore::Put(int format, const uint8_t* src, int64_t* handle) {
  Entry e;
  e.format = format;
  e.live = true;
  const size_t f = static_cast<size_t>(format);
  const int32_t hb = host_[f]->Allocate();
  if (hb >= 0) {
    e.where = Where::kHost;
    e.slot = hb;
    if (src != nullptr) std::memcpy(host_[f]->BlockData(hb), src, static_cast<size_t>(block_bytes_[f]));
  } else {
    e.where = Where::kDisk;
    if (!disk_free_[f].empty()) {
      e.slot = disk_free_[f].back();
      disk_free_[f].pop_back();
    } else {
      e.slot = disk_next_[f]++;
    }
    if (src != nullptr) {
      const ssize_t n = pwrite(fds_[f], src, static_cast<size_t>(block_bytes_[f]), e.slot * block_bytes_[f]);
      if (n != block_bytes_[f]) {
        disk_free_[f].push_back(e.slot);
        return Status::IOError(std::string("disk tier: pwrite failed: ") + std::strerror(errno));
      }
    }
    disk_bytes_ += block_bytes_[f];
  }
  if (!free_handles_.empty()) {
    *handle = free_handles_.back();
    free_handles_.pop_back();
    entries_[static_cast<size_t>(*handle)] = e;
  } else {
    *handle = static_cast<int64_t>(entries_.size());
    entries_.push_back(e);
  }
  ++num_live_;
  return Status::OK();
}

Status OffloadStore::Get(int64_t handle, uint8_t* dst) const {
  const Entry& e = entries_[static_cast<size_t>(handle)];
  const size_t f = static_cast<size_t>(e.format);
  if (e.where == Where::kHost) {
    std::memcpy(dst, host_[f]->BlockData(static_cast<int32_t>(e.slot)), static_cast<size_t>(block_bytes_[f]));
    return Status::OK();
  }
  const ssize_t n = pread(fds_[f], dst, static_cast<size_t>(block_bytes_[f]), e.slot * block_bytes_[f]);
  if (n < 0) return Status::IOError(std::string("disk tier: pread failed: ") + std::strerror(errno));
  if (n != block_bytes_[f]) {  // a short read is lost data too, never a partly zero block
    return Status::IOError("disk tier: read " + std::to_string(n) + " of a block's " + std::to_string(block_bytes_[f]) +
                           " bytes at offset " + std::to_string(e.slot * block_bytes_[f]) + " (its file was cut short)");
  }
  return Status::OK();
}

void OffloadStore::Free(int64_t handle) {
  Entry& e = entries_[static_cast<size_t>(handle)];
  if (!e.live) return;
  const size_t f = static_cast<size_t>(e.format);
  if (e.where == Where::kHost) {
    host_[f]->DecRef(static_cast<int32_t>(e.slot));
  } else {
    disk_free_[f].push_back(e.slot);
    disk_bytes_ -= block_bytes_[f];
  }
  e.live = false;
  free_handles_.push_back(handle);
  --num_live_;
}

}  // namespace kvlab
