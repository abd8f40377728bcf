// Prefix caching in the KV cache: chained block hashes, sharing by block id
// with reference counts, and least-recently-used eviction of the units no
// sequence holds.
#include "core/cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"

namespace kvlab {
namespace {

std::vector<int32_t> Tokens(int32_t first, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<BlockHash> Hashes(const std::vector<int32_t>& tokens, int unit) {
  std::vector<BlockHash> h;
  ExtendBlockHashes(tokens.data(), static_cast<int64_t>(tokens.size()), nullptr, 0, unit, &h);
  return h;
}

TEST(BlockHashTest, ChainedOverThePrefix) {
  const std::vector<int32_t> a = Tokens(0, 12), b = Tokens(100, 4);
  const std::vector<BlockHash> ha = Hashes(a, 4);
  ASSERT_EQ(ha.size(), 3u);
  EXPECT_EQ(ha[0], HashBlockTokens(kRootBlockHash, a.data(), 4));
  EXPECT_EQ(ha[1], HashBlockTokens(ha[0], a.data() + 4, 4));
  // The same tokens after a different prefix hash differently.
  std::vector<int32_t> c = b;
  c.insert(c.end(), a.begin() + 4, a.end());
  const std::vector<BlockHash> hc = Hashes(c, 4);
  EXPECT_NE(hc[1], ha[1]);
  EXPECT_NE(hc[2], ha[2]);
  // A partial unit gets no hash; prompt ++ output hashes as one sequence,
  // also where a unit straddles the two.
  EXPECT_EQ(Hashes(Tokens(0, 11), 4).size(), 2u);
  std::vector<BlockHash> split;
  ExtendBlockHashes(a.data(), 6, a.data() + 6, 6, 4, &split);
  EXPECT_EQ(split, ha);
  // Extending keeps what is there: growing a sequence hashes each unit once.
  std::vector<BlockHash> grown;
  ExtendBlockHashes(a.data(), 5, nullptr, 0, 4, &grown);
  ASSERT_EQ(grown.size(), 1u);
  ExtendBlockHashes(a.data(), 12, nullptr, 0, 4, &grown);
  EXPECT_EQ(grown, ha);
}

CacheShape Shape() { return TinyCacheShape(2, 2, 4); }

// Adds sequence `id` with `tokens`, computed in one Reserve, and caches its full units.
void AddComputed(KVCache* c, int64_t id, const std::vector<int32_t>& tokens) {
  ASSERT_TRUE(c->AddSequence(id).ok());
  const std::vector<int32_t> pos = Tokens(0, static_cast<int64_t>(tokens.size()));
  ASSERT_TRUE(c->Reserve(id, static_cast<int64_t>(tokens.size()), pos.data()).ok());
  c->CacheFullUnits(id, Hashes(tokens, 4));
}

TEST(PrefixCacheTest, SharedBlocksAreHeldByReferenceCount) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Shape(), 4 * 10, /*with_storage=*/true, &c).ok());
  ASSERT_TRUE(c->EnablePrefixCaching().ok());
  const std::vector<int32_t> a = Tokens(0, 10);  // 2 full units and 2 tokens
  AddComputed(c.get(), 1, a);
  const std::vector<BlockHash> h = Hashes(a, 4);
  EXPECT_EQ(c->prefix_cache()->num_units(), 2);
  EXPECT_EQ(c->MatchPrefix(h, 10).units, 2);
  EXPECT_EQ(c->MatchPrefix(h, 1).units, 1);
  EXPECT_EQ(c->MatchPrefix(h, 10).evictable_units, 0);  // sequence 1 holds them
  ASSERT_TRUE(c->AddSequenceWithPrefix(2, h).ok());
  for (int l = 0; l < 2; ++l) {
    for (int hd = 0; hd < 2; ++hd) {
      const Stream& s1 = c->stream(1, l, hd);
      const Stream& s2 = c->stream(2, l, hd);
      ASSERT_EQ(s2.blocks.size(), 2u);
      EXPECT_EQ(s2.blocks[0], s1.blocks[0]);
      EXPECT_EQ(s2.blocks[1], s1.blocks[1]);
      EXPECT_EQ(s2.num_tokens, 8);
      EXPECT_EQ(s2.positions[7], 7);
      EXPECT_EQ(c->pool().RefCount(s1.blocks[0]), 3);  // two sequences and the cache
      EXPECT_EQ(c->pool().RefCount(s1.blocks[2]), 1);  // the partial block is sequence 1's alone
    }
  }
  // Appending to the sharer takes a new block: the shared ones are full.
  EXPECT_EQ(c->BlocksNeeded(2, 1), 4);
  EXPECT_EQ(c->BytesInUse(), 4 * 3 * c->pool().block_bytes());  // sequence 1's 3 blocks per stream, 2 of them shared
  EXPECT_EQ(c->SharedExtraBytes(), 4 * 2 * c->pool().block_bytes());
  ASSERT_TRUE(c->RemoveSequence(1).ok());
  ASSERT_TRUE(c->RemoveSequence(2).ok());
  EXPECT_EQ(c->pool().num_used(), 4 * 2);  // the cache keeps the two units
  EXPECT_EQ(c->CachedOnlyBytes(), c->BytesInUse());
  EXPECT_EQ(c->AvailableBlocks(), 4 * 10);
  // A unit that is not cached cannot be attached.
  std::vector<BlockHash> other = Hashes(Tokens(50, 4), 4);
  EXPECT_EQ(c->AddSequenceWithPrefix(3, other).code(), Status::Code::kNotFound);
  EXPECT_FALSE(c->HasSequence(3));
}

TEST(PrefixCacheTest, LruEvictsTheLeastRecentlyUsedUnreferencedUnitFirst) {
  // 4 streams x 6 blocks: units a0 a1 a2 (sequence 1) and b0 b1 (sequence 2) fill 5 of 6.
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Shape(), 4 * 6, /*with_storage=*/false, &c).ok());
  ASSERT_TRUE(c->EnablePrefixCaching().ok());
  const std::vector<int32_t> a = Tokens(0, 12), b = Tokens(100, 8);
  const std::vector<BlockHash> ha = Hashes(a, 4), hb = Hashes(b, 4);
  AddComputed(c.get(), 1, a);
  AddComputed(c.get(), 2, b);
  ASSERT_TRUE(c->RemoveSequence(1).ok());  // a's units released tail first: a2, a1, a0
  ASSERT_TRUE(c->RemoveSequence(2).ok());  // then b1, b0
  EXPECT_EQ(c->prefix_cache()->LruOrder(), (std::vector<BlockHash>{ha[2], ha[1], ha[0], hb[1], hb[0]}));
  // Sequence 3 uses a0 and lets it go: a0 becomes the most recently used.
  ASSERT_TRUE(c->AddSequenceWithPrefix(3, {ha[0]}).ok());
  EXPECT_EQ(c->prefix_cache()->num_evictable(), 4);
  ASSERT_TRUE(c->RemoveSequence(3).ok());
  const std::vector<BlockHash> order = {ha[2], ha[1], hb[1], hb[0], ha[0]};
  EXPECT_EQ(c->prefix_cache()->LruOrder(), order);
  // Sequence 4 grows one block per stream at a time: the free block goes
  // first, then every further block evicts the least recently used unit.
  ASSERT_TRUE(c->AddSequence(4).ok());
  EXPECT_EQ(c->AvailableBlocks(), 4 * 6);
  std::vector<int32_t> pos = Tokens(0, 24);
  ASSERT_TRUE(c->Reserve(4, 4, pos.data()).ok());
  EXPECT_EQ(c->prefix_cache()->num_units(), 5);
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_TRUE(c->Reserve(4, 4, pos.data() + 4 * (i + 1)).ok());
    EXPECT_EQ(c->prefix_cache()->Find(order[i]), nullptr) << "unit " << i << " in LRU order was not evicted";
    for (size_t j = i + 1; j < order.size(); ++j) EXPECT_NE(c->prefix_cache()->Find(order[j]), nullptr);
    EXPECT_EQ(c->pool().num_free(), 0);
  }
  // Nothing left to evict: the pool is full and says so, changing nothing.
  EXPECT_EQ(c->Reserve(4, 4, pos.data()).code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(c->stream(4, 0, 0).num_tokens, 24);
}

TEST(PrefixCacheTest, UnitsInUseAreNeverEvicted) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Shape(), 4 * 4, /*with_storage=*/false, &c).ok());
  ASSERT_TRUE(c->EnablePrefixCaching().ok());
  const std::vector<int32_t> a = Tokens(0, 8);
  AddComputed(c.get(), 1, a);
  ASSERT_TRUE(c->RemoveSequence(1).ok());
  ASSERT_TRUE(c->AddSequenceWithPrefix(2, {Hashes(a, 4)[0]}).ok());  // holds a0; a1 is evictable
  ASSERT_TRUE(c->AddSequence(3).ok());
  EXPECT_EQ(c->AvailableBlocks(), 4 * 3);  // 2 free + a1
  std::vector<int32_t> pos = Tokens(0, 16);
  EXPECT_EQ(c->Reserve(3, 13, pos.data()).code(), Status::Code::kResourceExhausted);  // 4 blocks per stream
  ASSERT_TRUE(c->Reserve(3, 12, pos.data()).ok());
  EXPECT_EQ(c->prefix_cache()->num_units(), 1);
  EXPECT_NE(c->prefix_cache()->Find(Hashes(a, 4)[0]), nullptr);
}

TEST(PrefixCacheTest, EncodedUnitsAreSealedBlocks) {
  CacheShape s = Shape();
  s.encoded = true;
  s.enc.kind = EncodingKind::kInt8;
  s.enc.bits = 8;
  s.enc.head_dim = s.head_dim;
  s.enc.tokens_per_block = 4;
  s.enc.group = 4;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(s, 4 * 4, /*with_storage=*/false, &c, 4 * 4).ok());
  ASSERT_TRUE(c->EnablePrefixCaching().ok());
  ASSERT_TRUE(c->prefix_cache()->encoded());
  const std::vector<int32_t> a = Tokens(0, 10);
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(c->Reserve(1, 10, Tokens(0, 10).data()).ok());
  c->CacheFullUnits(1, Hashes(a, 4));
  EXPECT_EQ(c->prefix_cache()->num_units(), 0);  // nothing sealed yet
  c->Seal(1);
  c->CacheFullUnits(1, Hashes(a, 4));
  EXPECT_EQ(c->prefix_cache()->num_units(), 2);
  ASSERT_TRUE(c->AddSequenceWithPrefix(2, Hashes(a, 4)).ok());
  EXPECT_EQ(c->stream(2, 1, 1).enc_blocks, c->stream(1, 1, 1).enc_blocks);
  EXPECT_EQ(c->stream(2, 1, 1).num_encoded, 8);
  EXPECT_TRUE(c->stream(2, 1, 1).blocks.empty());
  EXPECT_EQ(c->encoded_pool()->RefCount(c->stream(1, 0, 0).enc_blocks[0]), 3);
  ASSERT_TRUE(c->RemoveSequence(1).ok());
  ASSERT_TRUE(c->RemoveSequence(2).ok());
  EXPECT_EQ(c->pool().num_used(), 0);
  EXPECT_EQ(c->encoded_pool()->num_used(), 4 * 2);
  EXPECT_EQ(c->AvailableEncodedBlocks(), 4 * 4);
}

}  // namespace
}  // namespace kvlab
