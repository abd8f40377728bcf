// PrefixCache: the bookkeeping of prefix caching (vLLM's automatic prefix
// caching, nano-vllm's hash_to_block_id). A *unit* is one full block in each
// stream of a sequence (block_size tokens; with a sealed encoding, one
// encoded block of tokens_per_block tokens per stream), identified by the
// chained hash of the tokens up to its end. Units are shared by reference
// count across sequences; a unit no sequence holds stays cached and is
// evicted least-recently-released first. KVCache owns it and does the
// reference counting in its pools (the cache holds one reference to each
// block of each unit); nothing here touches memory. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

namespace kvlab {

using BlockHash = uint64_t;

// The parent of a sequence's first unit.
constexpr BlockHash kRootBlockHash = 0x6b766c6162ull;  // "kvlab"

// The chained hash of one unit: XXH3-64 of its token ids (host byte order),
// seeded with the parent unit's hash, so equal hashes mean equal token
// prefixes (up to 64-bit collisions: about n^2 / 2^65 for n cached units).
BlockHash HashBlockTokens(BlockHash parent, const int32_t* tokens, int64_t num_tokens);

// Extends `hashes` (the chained hashes of the leading units of a token
// sequence, the concatenation a[0..na) ++ b[0..nb)) to every full unit of
// it. Hashes already present are kept, so calling it as a sequence grows
// hashes each unit once.
void ExtendBlockHashes(const int32_t* a, int64_t na, const int32_t* b, int64_t nb, int unit_tokens,
                       std::vector<BlockHash>* hashes);

class PrefixCache {
 public:
  struct Unit {
    BlockHash hash = 0;
    std::vector<int32_t> blocks;  // one block id per stream, in the cache's stream order
    int64_t users = 0;            // sequences whose streams hold these blocks
  };

  // encoded: units are blocks of the encoded pool (else the plain pool).
  PrefixCache(int unit_tokens, bool encoded) : unit_tokens_(unit_tokens), encoded_(encoded) {}

  int unit_tokens() const { return unit_tokens_; }
  bool encoded() const { return encoded_; }

  // The cached unit with this hash, or nullptr.
  const Unit* Find(BlockHash hash) const;
  // Caches a unit held by one sequence. REQUIRES: hash not cached.
  void Insert(BlockHash hash, std::vector<int32_t> blocks);
  // One more / one fewer sequence holds the unit. At zero users it becomes
  // evictable, as the most recently used. REQUIRES: hash cached (Release:
  // with users > 0).
  void Acquire(BlockHash hash);
  void Release(BlockHash hash);
  // Removes the least recently released unit no sequence holds and moves
  // its blocks to *blocks (the caller drops the cache's references to them).
  // False when every cached unit is in use.
  bool EvictLru(BlockHash* hash, std::vector<int32_t>* blocks);

  int64_t num_units() const { return static_cast<int64_t>(units_.size()); }
  int64_t num_evictable() const { return static_cast<int64_t>(lru_.size()); }
  // Holds beyond the first of units held by several sequences: the number
  // of times a block is counted twice when the streams' block lists are
  // summed, per stream.
  int64_t num_extra_holds() const { return sum_users_ - (num_units() - num_evictable()); }
  // Evictable hashes, least recently used first (for tests and reports).
  std::vector<BlockHash> LruOrder() const { return {lru_.begin(), lru_.end()}; }
  // Visits every cached unit (for tests and tools).
  void ForEach(const std::function<void(const Unit&)>& visit) const;

 private:
  struct Entry {
    Unit unit;
    std::list<BlockHash>::iterator lru_pos;  // valid while unit.users == 0
  };
  int unit_tokens_;
  bool encoded_;
  std::unordered_map<BlockHash, Entry> units_;
  std::list<BlockHash> lru_;  // unreferenced units, least recently released first
  int64_t sum_users_ = 0;
};

}  // namespace kvlab
