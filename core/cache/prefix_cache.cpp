#include "core/cache/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>

namespace kvlab {

BlockHash HashBlockTokens(BlockHash parent, const int32_t* tokens, int64_t num_tokens) {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(num_tokens) * sizeof(int32_t), parent);
}

void ExtendBlockHashes(const int32_t* a, int64_t na, const int32_t* b, int64_t nb, int unit_tokens,
                       std::vector<BlockHash>* hashes) {
  const int64_t units = (na + nb) / unit_tokens;
  std::vector<int32_t> straddle;
  for (int64_t u = static_cast<int64_t>(hashes->size()); u < units; ++u) {
    const BlockHash parent = u == 0 ? kRootBlockHash : (*hashes)[static_cast<size_t>(u - 1)];
    const int64_t begin = u * unit_tokens, end = begin + unit_tokens;
    const int32_t* tokens;
    if (end <= na) {
      tokens = a + begin;
    } else if (begin >= na) {
      tokens = b + (begin - na);
    } else {  // the unit spans the end of a and the start of b
      straddle.assign(a + begin, a + na);
      straddle.insert(straddle.end(), b, b + (end - na));
      tokens = straddle.data();
    }
    hashes->push_back(HashBlockTokens(parent, tokens, unit_tokens));
  }
}

const PrefixCache::Unit* PrefixCache::Find(BlockHash hash) const {
  auto it = units_.find(hash);
  return it == units_.end() ? nullptr : &it->second.unit;
}

void PrefixCache::Insert(BlockHash hash, std::vector<int32_t> blocks) {
  Entry& e = units_[hash];
  assert(e.unit.blocks.empty());
  e.unit.hash = hash;
  e.unit.blocks = std::move(blocks);
  e.unit.users = 1;
  ++sum_users_;
}

void PrefixCache::Acquire(BlockHash hash) {
  Entry& e = units_.at(hash);
  if (e.unit.users == 0) lru_.erase(e.lru_pos);
  ++e.unit.users;
  ++sum_users_;
}

void PrefixCache::Release(BlockHash hash) {
  Entry& e = units_.at(hash);
  assert(e.unit.users > 0);
  --sum_users_;
  if (--e.unit.users == 0) e.lru_pos = lru_.insert(lru_.end(), hash);
}

bool PrefixCache::EvictLru(BlockHash* hash, std::vector<int32_t>* blocks) {
  if (lru_.empty()) return false;
  *hash = lru_.front();
  lru_.pop_front();
  auto it = units_.find(*hash);
  *blocks = std::move(it->second.unit.blocks);
  units_.erase(it);
  return true;
}

void PrefixCache::ForEach(const std::function<void(const Unit&)>& visit) const {
  for (const auto& kv : units_) visit(kv.second.unit);
}

}  // namespace kvlab
