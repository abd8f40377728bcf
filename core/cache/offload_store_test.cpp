// The disk tier's reads: a block that cannot be read back whole is an error,
// never a block of zeros (the offload policy promises bit-identical output).
#include "core/cache/offload_store.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kvlab {
namespace {

// The descriptors of this process's open disk-tier files (unlinked temp files).
std::vector<int> DiskTierFds() {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  while (dirent* e = readdir(d)) {
    char target[512];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)).find("kvlab-offload-") != std::string::npos) {
      fds.push_back(std::stoi(e->d_name));
    }
  }
  closedir(d);
  return fds;
}

TEST(OffloadStoreTest, ACutShortDiskFileIsAnErrorNotZeros) {
  const std::vector<int> before = DiskTierFds();
  std::unique_ptr<OffloadStore> store;
  ASSERT_TRUE(OffloadStore::Create({64}, /*host_budget_bytes=*/0, "", &store).ok());  // every block on disk
  std::vector<uint8_t> block(64), back(64, 0xAB);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i + 1);
  int64_t h0 = -1, h1 = -1;
  ASSERT_TRUE(store->Put(0, block.data(), &h0).ok());
  ASSERT_TRUE(store->Put(0, block.data(), &h1).ok());
  ASSERT_TRUE(store->Get(h1, back.data()).ok());
  EXPECT_EQ(back, block);
  int fd = -1;
  for (int f : DiskTierFds()) {
    if (std::find(before.begin(), before.end(), f) == before.end()) fd = f;
  }
  ASSERT_GE(fd, 0) << "the disk tier's file is not among /proc/self/fd";
  ASSERT_EQ(ftruncate(fd, 64 + 10), 0);  // the second block loses its last 54 bytes
  std::fill(back.begin(), back.end(), 0xAB);
  const Status s = store->Get(h1, back.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_NE(s.message().find("disk tier: read 10 of a block's 64 bytes at offset 64"), std::string::npos)
      << s.message();
  EXPECT_TRUE(store->Get(h0, back.data()).ok());
  EXPECT_EQ(back, block);
}

// A host tier larger than the host can give, or of more than 2^31 blocks, is
// refused naming the placement policy's host_budget, not an internal pool.
TEST(OffloadStoreTest, HostBudgetPastTheHostIsAnErrorNamingTheParameter) {
  std::unique_ptr<OffloadStore> store;
  Status s = OffloadStore::Create({64}, int64_t{1} << 62, "", &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameter 'host_budget' (4611686018427387904 bytes"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("host-0"), std::string::npos) << s.message();
  EXPECT_TRUE(OffloadStore::Create({64}, int64_t{1} << 20, "", &store).ok());
}

}  // namespace
}  // namespace kvlab
