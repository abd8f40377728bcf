#include "core/serve/model_free_executor.h"

#include <climits>
#include <unordered_map>
#include <unordered_set>

namespace kvlab {

int64_t ServeCachePlan::MaxSequenceTokens() const {
  if (has_selection) return INT64_MAX;
  const int64_t streams = shape.StreamsPerSequence();
  const int64_t plain_per_stream = num_blocks / streams;
  if (!shape.encoded) return plain_per_stream * shape.block_size;
  const int64_t enc_tokens = num_encoded_blocks / streams * shape.enc.tokens_per_block;
  return enc_tokens + std::max<int64_t>(0, plain_per_stream - 1) * shape.block_size;
}

Status PlanServeCache(const ModelConfig& model, const PolicyStack& stack, int block_size, DType kv_dtype,
                      const ServePoolSpec& spec, ServeCachePlan* out) {
  ServeCachePlan plan;
  KVLAB_RETURN_IF_ERROR(DeriveCacheShape(KvShapeOf(model), stack, block_size, kv_dtype, &plan.shape));
  const CacheShape& shape = plan.shape;
  const int64_t residual = shape.residual;
  plan.has_selection = stack.For(kConcernSelection) != nullptr;
  PlacementOptions placement;
  plan.has_placement = stack.Placement(&placement);
  plan.policy = stack.Describe();
  std::string why_not;
  const bool can_share = stack.SharesPrefixBlocks(&why_not);
  switch (spec.prefix_caching) {
    case PrefixCachingMode::kDefault: plan.prefix_caching = can_share && stack.PrefixCachingByDefault(); break;
    case PrefixCachingMode::kOff: plan.prefix_caching = false; break;
    case PrefixCachingMode::kOn:
      if (!can_share) {
        return Status::InvalidArgument("prefix_caching: the stack '" + plan.policy + "' cannot share cached blocks: " +
                                       why_not + " (set prefix_caching = false)");
      }
      plan.prefix_caching = true;
      break;
  }

  const int64_t streams = shape.StreamsPerSequence();
  const int64_t block_bytes = shape.BlockBytes();
  if (spec.pool_blocks > 0) {
    plan.num_blocks = spec.pool_blocks;
    if (shape.encoded) {
      if (spec.encoded_pool_blocks <= 0) {
        return Status::InvalidArgument("pool: the stack '" + plan.policy + "' seals blocks as " + shape.enc.Describe() +
                                       "; with pool_blocks give encoded_pool_blocks too (or use pool_gb)");
      }
      plan.num_encoded_blocks = spec.encoded_pool_blocks / streams * streams;
    }
  } else if (spec.pool_bytes > 0) {
    if (!shape.encoded) {
      plan.num_blocks = spec.pool_bytes / block_bytes;
    } else {
      int64_t plain_bytes = spec.plain_pool_bytes;
      if (plain_bytes <= 0) {
        const int64_t bs = shape.block_size, tpb = shape.enc.tokens_per_block;
        const int64_t batch = (spec.max_num_batched_tokens + bs - 1) / bs;  // blocks per stream
        const int64_t plain_per_request = (residual + tpb - 1 + bs - 1) / bs + 1;
        if (spec.request_tokens > 0) {
          // As many requests of request_tokens as the budget holds, each
          // with its plain and encoded blocks; what max_num_seqs leaves over
          // goes to the encoded pool (longer requests).
          const int64_t sealed = spec.request_tokens > residual ? (spec.request_tokens - residual) / tpb : 0;
          const int64_t request_bytes = streams * (plain_per_request * block_bytes + sealed * shape.enc.BlockBytes());
          int64_t n = (spec.pool_bytes - streams * batch * block_bytes) / request_bytes;
          n = std::max<int64_t>(1, std::min(n, spec.max_num_seqs));
          plain_bytes = streams * (batch + n * plain_per_request) * block_bytes;
          plan.split_requests = n;
          if (plain_bytes >= spec.pool_bytes) {  // not even one request fits: fall back to half
            plain_bytes = spec.pool_bytes / 2;
            plan.split_requests = 0;
          }
        } else {
          plain_bytes = std::min(streams * (batch + spec.max_num_seqs * plain_per_request) * block_bytes,
                                 spec.pool_bytes / 2);
        }
      }
      if (plain_bytes >= spec.pool_bytes) {
        return Status::InvalidArgument("pool: the plain pool (" + std::to_string(plain_bytes) +
                                       " B) must be smaller than the whole budget (" + std::to_string(spec.pool_bytes) +
                                       " B)");
      }
      plan.num_blocks = plain_bytes / block_bytes;
      plan.num_encoded_blocks = (spec.pool_bytes - plan.num_blocks * block_bytes) / shape.enc.BlockBytes() / streams * streams;
    }
  } else {
    return Status::InvalidArgument("pool: give its size in GB (pool_gb) or in blocks (pool_blocks)");
  }
  if (plan.num_blocks > INT32_MAX || plan.num_encoded_blocks > INT32_MAX) {
    return Status::InvalidArgument("pool: more than 2^31 blocks; use a larger block_size");
  }
  if (plan.num_blocks < streams) {
    return Status::InvalidArgument("pool: " + std::to_string(plan.num_blocks) + " plain blocks cannot hold one block for each of the " +
                                   std::to_string(streams) + " streams of a sequence (" +
                                   std::to_string(shape.num_layers) + " layers x " + std::to_string(shape.num_kv_heads) +
                                   " KV heads)");
  }
  if (shape.encoded && plan.num_encoded_blocks < streams) {
    return Status::InvalidArgument("pool: the encoded pool cannot hold one block per stream");
  }
  *out = std::move(plan);
  return Status::OK();
}

namespace {

class ModelFreeExecutor : public StepExecutor {
 public:
  ModelFreeExecutor(const ModelConfig& model, PolicyStack stack, const ServeCachePlan& plan,
                    std::unique_ptr<KVCache> cache)
      : vocab_(model.vocab_size), stack_(std::move(stack)), plan_(plan), cache_(std::move(cache)) {}

  const char* Name() const override { return "model-free"; }
  const KVCache& cache() const override { return *cache_; }
  int64_t MaxSequenceTokens() const override { return plan_.MaxSequenceTokens(); }

  Status AddSequence(int64_t seq) override {
    KVLAB_RETURN_IF_ERROR(cache_->AddSequence(seq));
    len_[seq] = 0;
    return Status::OK();
  }
  Status RemoveSequence(int64_t seq) override {
    KVLAB_RETURN_IF_ERROR(cache_->RemoveSequence(seq));
    len_.erase(seq);
    return Status::OK();
  }
  Status AddSequenceWithPrefix(int64_t seq, const std::vector<BlockHash>& prefix) override {
    KVLAB_RETURN_IF_ERROR(cache_->AddSequenceWithPrefix(seq, prefix));
    len_[seq] = static_cast<int64_t>(prefix.size()) * cache_->prefix_unit_tokens();
    return Status::OK();
  }
  void CacheFullUnits(int64_t seq, const std::vector<BlockHash>& hashes) override {
    cache_->CacheFullUnits(seq, hashes);
  }

  Status Step(const std::vector<SeqChunk>& chunks, std::vector<int32_t>* next_tokens) override {
    int64_t need = 0;
    std::unordered_set<int64_t> seen;
    for (const SeqChunk& c : chunks) {
      if (!len_.count(c.seq)) return Status::NotFound("step: sequence " + std::to_string(c.seq) + " was not added");
      if (!seen.insert(c.seq).second) {
        return Status::InvalidArgument("step: sequence " + std::to_string(c.seq) + " appears twice in one step");
      }
      if (c.tokens.empty()) return Status::InvalidArgument("step: empty chunk for sequence " + std::to_string(c.seq));
      need += cache_->BlocksNeeded(c.seq, static_cast<int64_t>(c.tokens.size()));
    }
    if (need > cache_->AvailableBlocks()) {
      return Status::ResourceExhausted("KV pool has " + std::to_string(cache_->AvailableBlocks()) +
                                       " free blocks, the step needs " + std::to_string(need));
    }
    next_tokens->clear();
    std::vector<int32_t> pos;
    for (const SeqChunk& c : chunks) {
      int64_t& len = len_[c.seq];
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      pos.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(len + i);
      KVLAB_RETURN_IF_ERROR(cache_->Reserve(c.seq, n, pos.data()));
      len += n;
      next_tokens->push_back(static_cast<int32_t>((31 * c.seq + len) % vocab_));
    }
    // As the engine: the cache applies selection and sliding windows (scores
    // stay zero: no attention here) and seals.
    std::vector<int64_t> seqs, next_pos;
    for (const SeqChunk& c : chunks) {
      seqs.push_back(c.seq);
      next_pos.push_back(len_[c.seq]);
    }
    KVLAB_RETURN_IF_ERROR(cache_->ApplySelection(seqs, next_pos, stack_.For(kConcernSelection)));
    return cache_->Seal(seqs);
  }

 private:
  int64_t vocab_;
  PolicyStack stack_;
  ServeCachePlan plan_;
  std::unique_ptr<KVCache> cache_;
  std::unordered_map<int64_t, int64_t> len_;
};

}  // namespace

Status NewModelFreeExecutor(const ModelConfig& model, const std::vector<PolicySpec>& policies, int block_size,
                            DType kv_dtype, const ServePoolSpec& spec, std::unique_ptr<StepExecutor>* out) {
  PolicyStack stack;
  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(policies, &stack));
  ServeCachePlan plan;
  KVLAB_RETURN_IF_ERROR(PlanServeCache(model, stack, block_size, kv_dtype, spec, &plan));
  if (plan.has_placement) {
    return Status::InvalidArgument("model-free serving: placement (offload) policies need the engine; set model_free = false");
  }
  std::unique_ptr<KVCache> cache;
  KVLAB_RETURN_IF_ERROR(KVCache::Create(plan.shape, plan.num_blocks, /*with_storage=*/false, &cache, plan.num_encoded_blocks));
  if (plan.prefix_caching) KVLAB_RETURN_IF_ERROR(cache->EnablePrefixCaching());
  out->reset(new ModelFreeExecutor(model, std::move(stack), plan, std::move(cache)));
  return Status::OK();
}

}  // namespace kvlab
