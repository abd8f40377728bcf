// Helpers of the scheduler tests (scheduler_test.cpp,
// scheduler_prefix_test.cpp): a tiny model shape, model-free executors, and
// the block-accounting check run after every operation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/model/model_config.h"
#include "core/serve/model_free_executor.h"
#include "core/serve/scheduler.h"

namespace kvlab {
namespace scheduler_test {

// 2 layers x 2 KV heads: 4 streams per sequence.
inline ModelConfig TinyModel() {
  ModelConfig m;
  m.name = "tiny";
  m.vocab_size = 100;
  m.hidden_size = 32;
  m.intermediate_size = 64;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 8;
  m.max_position_embeddings = 1 << 20;
  return m;
}

// Prefix caching off unless asked for: most tests here are about the
// scheduler alone (its tests with prefix caching say so).
inline std::unique_ptr<StepExecutor> MakeExecutor(const ModelConfig& m, int64_t pool_blocks, int block_size,
                                                  std::vector<PolicySpec> policies = {{"full", {}, "test"}},
                                                  int64_t encoded_blocks = 0,
                                                  PrefixCachingMode prefix = PrefixCachingMode::kOff) {
  ServePoolSpec spec;
  spec.pool_blocks = pool_blocks;
  spec.encoded_pool_blocks = encoded_blocks;
  spec.prefix_caching = prefix;
  std::unique_ptr<StepExecutor> ex;
  Status s = NewModelFreeExecutor(m, policies, block_size, DType::kBF16, spec, &ex);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ex;
}

inline RequestSpec Req(int64_t id, double arrival, int64_t prompt_len, int64_t max_new) {
  RequestSpec r;
  r.id = id;
  r.arrival = arrival;
  r.prompt.assign(static_cast<size_t>(prompt_len), 7);
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt[static_cast<size_t>(i)] = static_cast<int32_t>((id * 13 + i) % 100);
  r.max_new_tokens = max_new;
  return r;
}

// Every block of a pool is free, held or in a stream's run reserve: its
// reference count is the number of streams of running requests that hold it
// plus one if the prefix cache holds it; no block is both free and held; the
// pool's bytes are its held blocks'.
inline void CheckPool(const BlockPool& pool, const std::map<int32_t, int32_t>& holders) {
  int64_t zero = 0;
  for (int32_t id = 0; id < pool.num_blocks(); ++id) {
    auto it = holders.find(id);
    const int32_t want = it == holders.end() ? 0 : it->second;
    ASSERT_EQ(pool.RefCount(id), want) << pool.name() << " block " << id << ": reference count is not its holders";
    zero += pool.RefCount(id) == 0 ? 1 : 0;
  }
  ASSERT_EQ(static_cast<int64_t>(holders.size()), pool.num_used()) << pool.name() << ": leaked or double-freed blocks";
  ASSERT_EQ(zero, pool.num_free() + pool.num_run_reserve()) << pool.name() << ": the free list has duplicates";
  ASSERT_EQ(pool.bytes_in_use(), static_cast<int64_t>(holders.size()) * pool.block_bytes());
}

inline void CheckAccounting(const Scheduler& sched, const StepExecutor& ex, bool exact_tokens) {
  const KVCache& c = ex.cache();
  const CacheShape& shape = c.shape();
  const std::vector<int64_t> running = sched.RunningIds();
  ASSERT_EQ(c.num_sequences(), running.size());
  std::map<int32_t, int32_t> plain, enc;  // block -> holders
  int64_t stream_bytes = 0;
  // Which running requests hold each block (for the prefix cache's user counts).
  std::map<std::pair<bool, int32_t>, std::set<int64_t>> seqs_of;
  for (int64_t id : running) {
    ASSERT_TRUE(c.HasSequence(id));
    const Request* r = sched.Find(id);
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        const Stream& s = c.stream(id, l, h);
        for (int32_t b : s.blocks) {
          plain[b]++;
          seqs_of[{false, b}].insert(id);
        }
        for (int32_t b : s.enc_blocks) {
          enc[b]++;
          seqs_of[{true, b}].insert(id);
        }
        stream_bytes += static_cast<int64_t>(s.blocks.size()) * c.pool().block_bytes();
        if (c.encoded_pool()) stream_bytes += static_cast<int64_t>(s.enc_blocks.size()) * c.encoded_pool()->block_bytes();
        if (exact_tokens) {
          ASSERT_EQ(s.num_tokens, r->num_computed) << "request " << id;
        }
        ASSERT_LE(s.num_plain(), s.Capacity(shape.block_size));
      }
    }
  }
  for (int64_t id : sched.WaitingIds()) ASSERT_FALSE(c.HasSequence(id)) << "waiting request " << id << " holds blocks";
  if (const PrefixCache* pc = c.prefix_cache()) {
    std::map<int32_t, int32_t>& held = pc->encoded() ? enc : plain;
    const int64_t unit_bytes = pc->encoded() ? c.encoded_pool()->block_bytes() : c.pool().block_bytes();
    int64_t units = 0, evictable = 0, extra_holds = 0, cache_only = 0;
    bool ok = true;
    pc->ForEach([&](const PrefixCache::Unit& u) {
      ++units;
      evictable += u.users == 0 ? 1 : 0;
      if (static_cast<int64_t>(u.blocks.size()) != shape.StreamsPerSequence()) ok = false;
      // Its users are exactly the running requests that hold at least one of
      // its blocks (a stream that compacted holds a copy instead).
      std::set<int64_t> users;
      for (int32_t b : u.blocks) {
        auto it = seqs_of.find({pc->encoded(), b});
        const int64_t n = it == seqs_of.end() ? 0 : static_cast<int64_t>(it->second.size());
        if (it != seqs_of.end()) users.insert(it->second.begin(), it->second.end());
        extra_holds += std::max<int64_t>(0, n - 1);
        cache_only += n == 0 ? 1 : 0;
        held[b]++;  // the cache's own reference
      }
      if (static_cast<int64_t>(users.size()) != u.users) ok = false;
    });
    ASSERT_TRUE(ok) << "a cached unit's users are not the requests holding its blocks";
    ASSERT_EQ(units, pc->num_units());
    ASSERT_EQ(evictable, pc->num_evictable());
    ASSERT_EQ(c.SharedExtraBytes(), extra_holds * unit_bytes);
    ASSERT_EQ(c.CachedOnlyBytes(), cache_only * unit_bytes);
    // The copies compaction may make: the shared plain blocks each request holds.
    for (int64_t id : running) {
      int64_t shared = 0;
      for (int l = 0; l < shape.num_layers; ++l) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int32_t b : c.stream(id, l, h).blocks) shared += plain.at(b) > 1 ? 1 : 0;  // holders + the cache
        }
      }
      ASSERT_EQ(c.CopyOnWriteBlocks(id), shared) << "request " << id;
    }
  }
  CheckPool(c.pool(), plain);
  if (c.encoded_pool()) CheckPool(*c.encoded_pool(), enc);
  // The pools' bytes are the sum over streams, shared blocks counted once,
  // plus the blocks only the prefix cache holds.
  ASSERT_EQ(c.BytesInUse(), stream_bytes - c.SharedExtraBytes() + c.CachedOnlyBytes());
  ASSERT_EQ(c.AvailableBlocks(), c.pool().num_free() + c.pool().num_run_reserve() + (c.prefix_caching() && !c.prefix_cache()->encoded()
                                                            ? c.prefix_cache()->num_evictable() * shape.StreamsPerSequence()
                                                            : 0));
}

}  // namespace scheduler_test
}  // namespace kvlab
