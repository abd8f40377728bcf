#include "core/cache/block_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

namespace kvlab {
namespace {

TEST(BlockPoolTest, AccountsBytesFromBlocks) {
  std::unique_ptr<BlockPool> pool;
  ASSERT_TRUE(BlockPool::Create("t", 4096, 10, true, &pool).ok());
  EXPECT_EQ(pool->bytes_reserved(), 40960);
  EXPECT_EQ(pool->bytes_in_use(), 0);
  const int32_t a = pool->Allocate(), b = pool->Allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool->bytes_in_use(), 8192);
  pool->DecRef(a);
  EXPECT_EQ(pool->bytes_in_use(), 4096);
  EXPECT_EQ(pool->peak_bytes_in_use(), 8192);
  // Storage is writable and blocks do not overlap.
  std::memset(pool->BlockData(b), 0xab, 4096);
  EXPECT_EQ(pool->BlockData(b)[4095], 0xab);
}

TEST(BlockPoolTest, RefusesWhenFullAndSharesByRefcount) {
  std::unique_ptr<BlockPool> pool;
  ASSERT_TRUE(BlockPool::Create("t", 64, 3, false, &pool).ok());
  EXPECT_EQ(pool->data(), nullptr);
  std::vector<int32_t> ids = {pool->Allocate(), pool->Allocate(), pool->Allocate()};
  EXPECT_FALSE(pool->CanAllocate(1));
  EXPECT_EQ(pool->Allocate(), -1);
  pool->IncRef(ids[0]);
  pool->DecRef(ids[0]);
  EXPECT_EQ(pool->num_free(), 0);  // still held once
  pool->DecRef(ids[0]);
  EXPECT_EQ(pool->num_free(), 1);
  EXPECT_EQ(pool->Allocate(), ids[0]);
}

TEST(BlockPoolTest, RandomisedNeverHandsOutAHeldBlock) {
  std::unique_ptr<BlockPool> pool;
  ASSERT_TRUE(BlockPool::Create("t", 16, 64, false, &pool).ok());
  std::mt19937 rng(7);
  std::multiset<int32_t> held;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 2 == 0) {
      const int32_t id = pool->Allocate();
      if (id < 0) {
        ASSERT_EQ(held.size(), 64u);  // only full when every block is held
        continue;
      }
      ASSERT_EQ(held.count(id), 0u);
      held.insert(id);
    } else if (!held.empty()) {
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      pool->DecRef(*it);
      held.erase(it);
    }
    ASSERT_EQ(pool->num_used(), static_cast<int64_t>(held.size()));
  }
}

TEST(BlockPoolTest, RejectsBadSizes) {
  std::unique_ptr<BlockPool> pool;
  EXPECT_FALSE(BlockPool::Create("t", 0, 10, true, &pool).ok());
  EXPECT_FALSE(BlockPool::Create("t", 16, -1, true, &pool).ok());
}

}  // namespace
}  // namespace kvlab
