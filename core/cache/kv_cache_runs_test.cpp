// Decode-time blocks in runs (KVCache::SetRunBlocks, BlockPool::ReserveRun):
// consecutive ids per stream, the reserve's books, its return to the pool,
// allocations a tight pool served before, identical attention, and the
// interactions with prefix sharing, copy on write, sealing and offload.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/cache/prefix_cache.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_reference.h"

namespace kvlab {
namespace {

CacheShape Shape(int layers, int heads, int block_size) { return TinyCacheShape(layers, heads, block_size); }

std::unique_ptr<KVCache> Make(const CacheShape& shape, int64_t blocks, int run_blocks, int64_t enc_blocks = 0) {
  std::unique_ptr<KVCache> c;
  EXPECT_TRUE(KVCache::Create(shape, blocks, true, &c, enc_blocks).ok());
  c->SetRunBlocks(run_blocks);
  return c;
}

// Reserves n tokens of `id` from position `start` and writes K/V that depend
// only on (position, layer, head, channel).
Status Append(KVCache* c, KVCache::SeqId id, int64_t start, int64_t n) {
  const CacheShape& sh = c->shape();
  const std::vector<int32_t> pos = Iota(start, n);
  KVLAB_RETURN_IF_ERROR(c->Reserve(id, n, pos.data()));
  PageTable pt;
  c->BuildPageTable({id}, &pt);
  std::vector<float> k(static_cast<size_t>(n * sh.num_kv_heads * sh.head_dim)), v(k.size());
  for (int l = 0; l < sh.num_layers; ++l) {
    for (int64_t t = 0; t < n; ++t) {
      for (int h = 0; h < sh.num_kv_heads; ++h) {
        for (int d = 0; d < sh.head_dim; ++d) {
          const size_t i = static_cast<size_t>((t * sh.num_kv_heads + h) * sh.head_dim + d);
          k[i] = std::sin(0.37f * static_cast<float>(start + t) + static_cast<float>(d + 3 * l + 7 * h));
          v[i] = std::cos(0.21f * static_cast<float>(start + t) - static_cast<float>(d + l + h));
        }
      }
    }
    const int32_t qo[2] = {0, static_cast<int32_t>(n)};
    AppendKV(pt.Layer(l), qo, 1, sh.num_kv_heads, k.data(), v.data());
  }
  return Status::OK();
}

// Every block is free, held or in exactly one stream's reserve, and the
// pool's counts say so.
void CheckBooks(const KVCache& c, const std::vector<KVCache::SeqId>& seqs) {
  const BlockPool& pool = c.pool();
  int64_t spare = 0;
  std::vector<int> owner(static_cast<size_t>(pool.num_blocks()), 0);
  for (KVCache::SeqId id : seqs) {
    for (int l = 0; l < c.shape().num_layers; ++l) {
      for (int h = 0; h < c.shape().num_kv_heads; ++h) {
        const Stream& s = c.stream(id, l, h);
        spare += s.RunSpare();
        for (int32_t b = s.run_next; b < s.run_end; ++b) {
          ASSERT_TRUE(pool.InRunReserve(b)) << "block " << b;
          ASSERT_EQ(owner[static_cast<size_t>(b)]++, 0) << "block " << b << " in two reserves";
        }
      }
    }
  }
  int64_t held = 0;
  for (int32_t b = 0; b < pool.num_blocks(); ++b) held += pool.RefCount(b) > 0 ? 1 : 0;
  ASSERT_EQ(pool.num_run_reserve(), spare);
  ASSERT_EQ(pool.num_used(), held);
  ASSERT_EQ(pool.num_free() + pool.num_run_reserve() + pool.num_used(), pool.num_blocks());
  ASSERT_EQ(pool.bytes_in_use(), held * pool.block_bytes());
  ASSERT_EQ(c.RunReserveBytes(), spare * pool.block_bytes());
}

TEST(BlockPoolRunTest, ReserveRunTakesConsecutiveFreeIdsOffTheFreeList) {
  std::unique_ptr<BlockPool> pool;
  ASSERT_TRUE(BlockPool::Create("t", 64, 10, false, &pool).ok());
  const int32_t a = pool->Allocate(), b = pool->Allocate(), c = pool->Allocate();  // 0, 1, 2
  pool->DecRef(b);                                                               // 1 free, alone
  const int32_t first = pool->ReserveRun(4);
  ASSERT_EQ(first, 3);  // the first four free in a row
  EXPECT_EQ(pool->num_run_reserve(), 4);
  EXPECT_EQ(pool->num_free(), 10 - 2 - 4);
  EXPECT_EQ(pool->num_used(), 2);
  EXPECT_EQ(pool->bytes_in_use(), 2 * 64);
  EXPECT_EQ(pool->bytes_run_reserve(), 4 * 64);
  for (int32_t id = 3; id < 7; ++id) EXPECT_TRUE(pool->InRunReserve(id));
  EXPECT_FALSE(pool->InRunReserve(b));  // free, not reserved
  pool->TakeReserved(3);
  EXPECT_EQ(pool->RefCount(3), 1);
  EXPECT_EQ(pool->num_used(), 3);
  EXPECT_EQ(pool->peak_bytes_in_use(), 3 * 64);
  // No run of 4 is left (1, 7, 8, 9 are free): nothing changes.
  EXPECT_EQ(pool->ReserveRun(4), -1);
  EXPECT_EQ(pool->num_free(), 4);
  EXPECT_EQ(pool->ReserveRun(3), 7);
  for (int32_t id = 4; id < 7; ++id) pool->ReleaseReserved(id);
  for (int32_t id = 7; id < 10; ++id) pool->ReleaseReserved(id);
  EXPECT_EQ(pool->num_run_reserve(), 0);
  EXPECT_EQ(pool->peak_bytes_run_reserve(), 6 * 64);
  EXPECT_EQ(pool->num_free(), 7);
  // Every free id comes out exactly once.
  std::vector<int> seen(10, 0);
  for (int i = 0; i < 7; ++i) ++seen[static_cast<size_t>(pool->Allocate())];
  EXPECT_EQ(pool->Allocate(), -1);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 0, 0, 1, 1, 1, 1, 1, 1}));
  (void)a;
  (void)c;
}

// 4 layers x 2 heads = 8 streams growing together, token by token after a
// one-block prefill: without runs a stream's consecutive blocks are 8 ids
// apart; with runs of 4, consecutive within each run (the prefill's block
// opens the first).
TEST(KVCacheRunsTest, DecodeGrownStreamsTakeConsecutiveIdsWithinARun) {
  for (int run : {0, 4}) {
    auto c = Make(Shape(4, 2, 4), 400, run);
    ASSERT_TRUE(c->AddSequence(1).ok());
    ASSERT_TRUE(Append(c.get(), 1, 0, 4).ok());
    for (int64_t t = 4; t < 4 + 64; ++t) ASSERT_TRUE(Append(c.get(), 1, t, 1).ok());
    int64_t adjacent = 0, pairs = 0;
    for (int l = 0; l < 4; ++l) {
      for (int h = 0; h < 2; ++h) {
        const std::vector<int32_t>& b = c->stream(1, l, h).blocks;
        ASSERT_EQ(b.size(), 17u);
        for (size_t i = 0; i + 4 <= b.size(); i += 4) {  // blocks 0-3 (the prefill's run), 4-7, ...: one run each
          for (size_t j = i + 1; j < i + 4; ++j) {
            ++pairs;
            if (run > 1) {
              EXPECT_EQ(b[j], b[j - 1] + 1) << "layer " << l << " head " << h << " block " << j;
            }
            adjacent += b[j] == b[j - 1] + 1 ? 1 : 0;
          }
        }
      }
    }
    EXPECT_EQ(adjacent, run > 1 ? pairs : 0) << "run " << run;
    CheckBooks(*c, {1});
  }
}

TEST(KVCacheRunsTest, ReserveIsNotHeldKvAndIsReportedApart) {
  auto c = Make(Shape(2, 2, 4), 100, 8);
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 5).ok());  // 2 blocks per stream: a run of 8, 6 spare
  const int64_t bb = c->pool().block_bytes();
  EXPECT_EQ(c->BlocksInUse(), 4 * 2);
  EXPECT_EQ(c->BytesInUse(), 4 * 2 * bb);
  EXPECT_EQ(c->RunReserveBytes(), 4 * 6 * bb);
  EXPECT_EQ(c->PeakBytesInUse(), 4 * 2 * bb);
  EXPECT_EQ(c->PeakRunReserveBytes(), 4 * 6 * bb);
  EXPECT_EQ(c->pool().num_free(), 100 - 4 * 8);
  EXPECT_EQ(c->AvailableBlocks(), 100 - 4 * 2);  // the reserve is available to anyone
  CheckBooks(*c, {1});
  // Three more tokens fill block 2; the fourth takes block 3 from the reserve.
  ASSERT_TRUE(Append(c.get(), 1, 5, 4).ok());
  EXPECT_EQ(c->BytesInUse(), 4 * 3 * bb);
  EXPECT_EQ(c->RunReserveBytes(), 4 * 5 * bb);
  EXPECT_EQ(c->PeakRunReserveBytes(), 4 * 6 * bb);
  CheckBooks(*c, {1});
}

TEST(KVCacheRunsTest, ReserveReturnsAtRemovalAndOnCompaction) {
  auto c = Make(Shape(1, 2, 4), 100, 8);
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(c->AddSequence(2).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 10).ok());
  ASSERT_TRUE(Append(c.get(), 2, 0, 10).ok());
  const int64_t bb = c->pool().block_bytes();
  ASSERT_EQ(c->RunReserveBytes(), 4 * 5 * bb);
  // A compaction that moves slots: stream (1, 0, 0) keeps 3 slots in 1 block.
  ASSERT_TRUE(c->Compact(1, 0, 0, {0, 4, 9}).ok());
  EXPECT_EQ(c->stream(1, 0, 0).RunSpare(), 0);
  EXPECT_EQ(c->stream(1, 0, 0).blocks.size(), 1u);
  EXPECT_EQ(c->RunReserveBytes(), 3 * 5 * bb);
  CheckBooks(*c, {1, 2});
  // Dropping leading blocks only (a window's compaction): the reserve goes too.
  ASSERT_TRUE(c->Compact(1, 0, 1, {4, 5, 6, 7, 8, 9}).ok());
  EXPECT_EQ(c->stream(1, 0, 1).RunSpare(), 0);
  EXPECT_EQ(c->RunReserveBytes(), 2 * 5 * bb);
  CheckBooks(*c, {1, 2});
  ASSERT_TRUE(c->RemoveSequence(2).ok());
  EXPECT_EQ(c->RunReserveBytes(), 0);
  ASSERT_TRUE(c->RemoveSequence(1).ok());
  EXPECT_EQ(c->pool().num_free(), 100);
  EXPECT_EQ(c->BytesInUse(), 0);
}

// The same script of growth and removal on pools of every size from tight
// to roomy: with runs, every Reserve succeeds exactly when it does without.
TEST(KVCacheRunsTest, ATightPoolServesEveryAllocationItServedWithoutRuns) {
  for (int64_t blocks = 6; blocks <= 40; ++blocks) {
    auto off = Make(Shape(2, 2, 4), blocks, 0);
    auto on = Make(Shape(2, 2, 4), blocks, 16);
    std::vector<KVCache::SeqId> live;
    std::vector<int64_t> len(3, 0);
    for (KVCache::SeqId id = 0; id < 3; ++id) {
      ASSERT_TRUE(off->AddSequence(id).ok());
      ASSERT_TRUE(on->AddSequence(id).ok());
    }
    int served = 0;
    for (int step = 0; step < 120; ++step) {
      const KVCache::SeqId id = step % 3;
      const int64_t n = step < 3 ? 3 + step : 1;  // a short prefill each, then decode
      if (step == 70) {  // one sequence ends: its blocks and reserve come back
        ASSERT_TRUE(off->RemoveSequence(1).ok());
        ASSERT_TRUE(on->RemoveSequence(1).ok());
        ASSERT_TRUE(off->AddSequence(1).ok());
        ASSERT_TRUE(on->AddSequence(1).ok());
        len[1] = 0;
      }
      const Status a = Append(off.get(), id, len[static_cast<size_t>(id)], n);
      const Status b = Append(on.get(), id, len[static_cast<size_t>(id)], n);
      ASSERT_EQ(a.code(), b.code()) << blocks << " blocks, step " << step << ": " << b.ToString();
      if (a.ok()) {
        len[static_cast<size_t>(id)] += n;
        ++served;
      }
      EXPECT_EQ(on->BytesInUse(), off->BytesInUse()) << blocks << " blocks, step " << step;
      EXPECT_EQ(on->AvailableBlocks(), off->AvailableBlocks()) << blocks << " blocks, step " << step;
      CheckBooks(*on, {0, 1, 2});
    }
    EXPECT_GT(served, 0);
    if (blocks == 6) {
      EXPECT_LT(served, 120);  // the script does run the pool dry
    }
  }
}

// Taking a block a short pool only has in another stream's reserve.
TEST(KVCacheRunsTest, AShortPoolReclaimsOtherStreamsReserves) {
  auto c = Make(Shape(1, 1, 4), 8, 8);
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(c->AddSequence(2).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 1).ok());  // one block held, 7 in its reserve
  EXPECT_EQ(c->pool().num_free(), 0);
  EXPECT_EQ(c->AvailableBlocks(), 7);
  ASSERT_TRUE(Append(c.get(), 2, 0, 20).ok());  // 5 blocks: only the reserve has them
  EXPECT_EQ(c->stream(1, 0, 0).RunSpare(), 0);
  EXPECT_EQ(c->stream(2, 0, 0).blocks.size(), 5u);
  CheckBooks(*c, {1, 2});
  ASSERT_TRUE(Append(c.get(), 1, 1, 8).ok());  // 2 more for sequence 1: the last free ones
  EXPECT_EQ(c->Reserve(2, 1, Iota(20, 1).data()).code(), Status::Code::kResourceExhausted);
  CheckBooks(*c, {1, 2});
}

// In a fragmented pool (no 8 consecutive free ids), a decode-time block
// still comes with a shorter run (4 here), not alone.
TEST(KVCacheRunsTest, AFragmentedPoolGivesShorterRuns) {
  auto c = Make(Shape(1, 1, 4), 30, 8);
  BlockPool& pool = c->pool();
  std::vector<int32_t> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(pool.Allocate());
  for (int32_t id : ids) {
    if (id % 6 != 5) pool.DecRef(id);  // free runs of 5 between held blocks
  }
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 1).ok());
  const Stream& s = c->stream(1, 0, 0);
  EXPECT_EQ(s.RunSpare(), 3);
  EXPECT_EQ(s.run_end - s.blocks[0], 4);
  CheckBooks(*c, {1});
}

// Blocks of a run hold what single blocks would: attention over a cache
// grown with runs is bit-identical to one grown without.
TEST(KVCacheRunsTest, AttentionIsBitIdenticalWithRunsOnAndOff) {
  const CacheShape shape = Shape(3, 2, 4);
  std::vector<std::vector<float>> out;
  std::vector<std::vector<int32_t>> ids;
  for (int run : {0, 8}) {
    auto c = Make(shape, 600, run);
    for (KVCache::SeqId id : {1, 2}) {
      ASSERT_TRUE(c->AddSequence(id).ok());
      ASSERT_TRUE(Append(c.get(), id, 0, 9).ok());
    }
    for (int64_t t = 9; t < 9 + 70; ++t) {
      for (KVCache::SeqId id : {1, 2}) ASSERT_TRUE(Append(c.get(), id, t, 1).ok());
    }
    PageTable pt;
    c->BuildPageTable({1, 2}, &pt);
    const int hq = 4;
    std::vector<float> q(static_cast<size_t>(2 * hq * shape.head_dim)), o(q.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7f * static_cast<float>(i));
    const int32_t qo[3] = {0, 1, 2};
    AttentionParams p;
    p.num_seqs = 2;
    p.num_qo_heads = hq;
    p.num_kv_heads = shape.num_kv_heads;
    p.head_dim = shape.head_dim;
    p.sm_scale = 0.5f;
    p.qo_indptr = qo;
    p.q = q.data();
    p.o = o.data();
    out.emplace_back();
    ids.emplace_back();
    for (int l = 0; l < shape.num_layers; ++l) {
      ASSERT_TRUE(AttentionParamsCheck(pt.Layer(l), p).ok());
      PagedAttentionCpu(pt.Layer(l), p);
      out.back().insert(out.back().end(), o.begin(), o.end());
      const PagedKV kv = pt.Layer(l);
      ids.back().insert(ids.back().end(), kv.indices, kv.indices + kv.indptr[kv.num_streams]);
    }
  }
  ASSERT_NE(ids[0], ids[1]);  // the blocks do lie elsewhere
  ASSERT_EQ(out[0].size(), out[1].size());
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);
}

// Prefix sharing and copy on write: a sharer's own blocks come in runs after
// the shared ones; a compaction's copies may take another stream's reserve;
// the cache's books stay exact.
TEST(KVCacheRunsTest, PrefixSharingAndCopyOnWrite) {
  auto c = Make(Shape(1, 2, 4), 24, 4);
  ASSERT_TRUE(c->EnablePrefixCaching().ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 8).ok());  // 2 full units per stream
  std::vector<int32_t> tokens = Iota(0, 8);
  std::vector<BlockHash> hashes;
  BlockHash h = kRootBlockHash;
  for (int u = 0; u < 2; ++u) hashes.push_back(h = HashBlockTokens(h, tokens.data() + 4 * u, 4));
  c->CacheFullUnits(1, hashes);
  ASSERT_TRUE(c->AddSequenceWithPrefix(2, hashes).ok());
  ASSERT_TRUE(Append(c.get(), 2, 8, 1).ok());  // a run of 4 after the shared blocks
  const Stream& s2 = c->stream(2, 0, 1);
  ASSERT_EQ(s2.blocks.size(), 3u);
  EXPECT_EQ(s2.blocks[0], c->stream(1, 0, 1).blocks[0]);
  EXPECT_EQ(s2.RunSpare(), 3);
  EXPECT_EQ(c->SharedExtraBytes(), 2 * 2 * c->pool().block_bytes());
  CheckBooks(*c, {1, 2});
  // Fill the free list: what is left sits in the reserves.
  ASSERT_TRUE(c->AddSequence(3).ok());
  const int64_t free = c->pool().num_free();
  ASSERT_TRUE(Append(c.get(), 3, 0, 4 * (free / 2)).ok());
  ASSERT_EQ(c->pool().num_free(), 0);
  const int64_t copies_before = c->num_copied_blocks();
  // Sequence 2 evicts slot 1 (in a shared block): two copies, from reserves.
  std::vector<int64_t> keep = {0, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(c->Compact(2, 0, 0, keep).ok());
  EXPECT_EQ(c->num_copied_blocks(), copies_before + 2);
  EXPECT_EQ(c->stream(2, 0, 0).RunSpare(), 0);
  EXPECT_NE(c->stream(2, 0, 0).blocks[0], c->stream(1, 0, 0).blocks[0]);
  float k[4], v[4];
  c->ReadSlot(2, 0, 0, 1, k, v);  // slot 1 is now token 2
  EXPECT_FLOAT_EQ(k[0], std::sin(0.37f * 2.0f));
  CheckBooks(*c, {1, 2, 3});
  for (KVCache::SeqId id : {1, 2, 3}) ASSERT_TRUE(c->RemoveSequence(id).ok());
  EXPECT_EQ(c->RunReserveBytes(), 0);
  EXPECT_EQ(c->BytesInUse(), c->CachedOnlyBytes());
}

// Sealing (KIVI): the plain tail's blocks come from runs, the sealed groups
// from the encoded pool as before; the bytes equal a cache without runs.
TEST(KVCacheRunsTest, SealedStreamsKeepTheirBooks) {
  CacheShape shape = Shape(2, 2, 16);
  shape.head_dim = 32;
  shape.encoded = true;
  shape.enc.kind = EncodingKind::kKivi;
  shape.enc.bits = 2;
  shape.enc.group = 32;
  shape.enc.tokens_per_block = 32;
  shape.enc.head_dim = 32;
  shape.residual = 32;
  auto off = Make(shape, 200, 0, 100);
  auto on = Make(shape, 200, 8, 100);
  for (KVCache* c : {off.get(), on.get()}) {
    ASSERT_TRUE(c->AddSequence(0).ok());
    ASSERT_TRUE(Append(c, 0, 0, 20).ok());
    for (int64_t t = 20; t < 200; ++t) {
      ASSERT_TRUE(Append(c, 0, t, 1).ok());
      c->Seal(0);
    }
  }
  EXPECT_EQ(on->stream(0, 1, 1).num_encoded, off->stream(0, 1, 1).num_encoded);
  EXPECT_GT(on->stream(0, 1, 1).num_encoded, 0);
  EXPECT_EQ(on->BytesInUse(), off->BytesInUse());
  EXPECT_EQ(on->encoded_pool()->num_used(), off->encoded_pool()->num_used());
  EXPECT_GT(on->RunReserveBytes(), 0);
  std::vector<float> ka(32), va(32), kb(32), vb(32);
  for (int64_t slot = 0; slot < 200; slot += 7) {
    off->ReadSlot(0, 1, 0, slot, ka.data(), va.data());
    on->ReadSlot(0, 1, 0, slot, kb.data(), vb.data());
    ASSERT_EQ(ka, kb) << slot;
    ASSERT_EQ(va, vb) << slot;
  }
  CheckBooks(*on, {0});
}

// Offload: demoted blocks leave the device as before, and bringing them
// back succeeds when the free list is empty but a reserve is not.
TEST(KVCacheRunsTest, OffloadBringsBlocksBackFromReserves) {
  auto c = Make(Shape(1, 1, 4), 8, 8);
  PlacementOptions po;
  po.host_budget_bytes = 1 << 20;
  ASSERT_TRUE(c->EnableOffload(po).ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  ASSERT_TRUE(Append(c.get(), 1, 0, 12).ok());  // 3 blocks of a run of 8
  ASSERT_TRUE(c->Demote(1, 0, 0, false, 0).ok());
  ASSERT_TRUE(c->Demote(1, 0, 0, false, 1).ok());
  EXPECT_EQ(c->DeviceBytesInUse(), c->pool().block_bytes());
  EXPECT_GT(c->HostBytesInUse(), 0);
  ASSERT_TRUE(c->AddSequence(2).ok());
  ASSERT_TRUE(Append(c.get(), 2, 0, 4 * 2).ok());  // the two free blocks
  ASSERT_EQ(c->pool().num_free(), 0);
  ASSERT_GT(c->RunReserveBytes(), 0);
  ASSERT_TRUE(c->PromoteStream(1, 0, 0).ok());
  float k[4], v[4];
  c->ReadSlot(1, 0, 0, 5, k, v);
  EXPECT_FLOAT_EQ(k[1], std::sin(0.37f * 5.0f + 1.0f));
  CheckBooks(*c, {1, 2});
}

}  // namespace
}  // namespace kvlab
