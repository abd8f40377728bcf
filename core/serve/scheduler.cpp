#include "core/serve/scheduler.h"

#include <algorithm>
#include <climits>

namespace kvlab {

Status SchedulerOptions::Validate() const {
  if (max_num_batched_tokens <= 0) return Status::InvalidArgument("scheduler: max_num_batched_tokens must be positive");
  if (max_num_seqs <= 0) return Status::InvalidArgument("scheduler: max_num_seqs must be positive");
  if (max_num_seqs > max_num_batched_tokens) {
    // Every running request must be able to decode its one token in a step.
    return Status::InvalidArgument("scheduler: max_num_seqs (" + std::to_string(max_num_seqs) +
                                   ") must not exceed max_num_batched_tokens (" +
                                   std::to_string(max_num_batched_tokens) + ")");
  }
  if (max_prefill_chunk < 0) return Status::InvalidArgument("scheduler: max_prefill_chunk must be >= 0");
  if (max_model_len < 0) return Status::InvalidArgument("scheduler: max_model_len must be >= 0");
  if (!(watermark >= 0.0 && watermark < 1.0)) return Status::InvalidArgument("scheduler: watermark must be in [0, 1)");
  return Status::OK();
}

int32_t Request::token(int64_t i) const {
  const int64_t p = static_cast<int64_t>(spec.prompt.size());
  return i < p ? spec.prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - p)];
}

Scheduler::Scheduler(const SchedulerOptions& options, StepExecutor* executor)
    : options_(options), executor_(executor), max_sequence_tokens_(executor->MaxSequenceTokens()) {}

Request* Scheduler::Get(int64_t id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const Request* Scheduler::Find(int64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

Status Scheduler::AddRequest(RequestSpec spec) {
  const std::string name = "request " + std::to_string(spec.id);
  if (spec.prompt.empty()) return Status::InvalidArgument(name + ": empty prompt");
  if (spec.max_new_tokens < 1) return Status::InvalidArgument(name + ": max_new_tokens must be >= 1");
  if (requests_.count(spec.id)) return Status::InvalidArgument(name + ": id already in use");
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_new_tokens;
  const std::string size = std::to_string(total) + " tokens (prompt " + std::to_string(spec.prompt.size()) +
                           " + up to " + std::to_string(spec.max_new_tokens) + " new)";
  if (options_.max_model_len > 0 && total > options_.max_model_len) {
    return Status::InvalidArgument(name + " needs " + size + ", more than max_model_len " +
                                   std::to_string(options_.max_model_len));
  }
  if (total > max_sequence_tokens_) {
    // Admitting it would preempt everyone and then itself, forever.
    return Status::InvalidArgument(name + " needs " + size + " of KV cache, but the pools (" +
                                   std::string(executor_->Name()) + ", " +
                                   std::to_string(executor_->cache().pool().num_blocks()) + " blocks) can hold at most " +
                                   std::to_string(max_sequence_tokens_) + " tokens of one sequence; it could never run");
  }
  auto r = std::make_unique<Request>();
  r->spec = std::move(spec);
  Request* raw = r.get();
  requests_[raw->spec.id] = std::move(r);
  waiting_.push_back(raw);
  return Status::OK();
}

void Scheduler::UpdateBlockHashes(Request* r) const {
  const KVCache& c = executor_->cache();
  if (!c.prefix_caching()) return;
  ExtendBlockHashes(r->spec.prompt.data(), static_cast<int64_t>(r->spec.prompt.size()), r->output.data(),
                    static_cast<int64_t>(r->output.size()), c.prefix_unit_tokens(), &r->block_hashes);
}

KVCache::PrefixMatch Scheduler::MatchPrefix(const Request& r) const {
  const KVCache& c = executor_->cache();
  if (!c.prefix_caching() || r.num_computed > 0) return {};
  const CacheShape& s = c.shape();
  const int64_t n = r.num_tokens();
  int64_t max_tokens = n - 1;
  if (s.encoded) {
    const int64_t tpb = s.enc.tokens_per_block;
    max_tokens = std::min(max_tokens, n > s.residual ? (n - s.residual) / tpb * tpb : 0);
  }
  return c.MatchPrefix(r.block_hashes, max_tokens / c.prefix_unit_tokens());
}

int64_t Scheduler::CachedPrefixTokens(const Request& r) const {
  return MatchPrefix(r).units * executor_->cache().prefix_unit_tokens();
}

// Free blocks of the plain pool (cached blocks no one holds included: the
// cache evicts them on demand) not yet promised to this step.
int64_t Scheduler::FreeBlocks() const { return executor_->cache().AvailableBlocks() - booked_blocks_; }
int64_t Scheduler::FreeEncodedBlocks() const {
  return executor_->cache().AvailableEncodedBlocks() - booked_encoded_blocks_;
}

int64_t Scheduler::StepExtraBlocks(int64_t id, int64_t* encoded) const {
  const KVCache& c = executor_->cache();
  int64_t plain = 0;
  c.StagingBlocksNeeded({id}, &plain, encoded);
  if (compacts()) plain += c.CopyOnWriteBlocks(id) + c.OffloadedBlocks(id, /*encoded=*/false);
  return plain;
}

int64_t Scheduler::Watermark(const BlockPool& pool) const {
  return static_cast<int64_t>(options_.watermark * static_cast<double>(pool.num_blocks()));
}

bool Scheduler::CanAllocate(const Request& r, int64_t n) const {
  const KVCache& c = executor_->cache();
  const CacheShape& s = c.shape();
  const int64_t streams = s.StreamsPerSequence();
  auto blocks = [&](int64_t tokens) { return streams * ((tokens + s.block_size - 1) / s.block_size); };
  // Cached units this request takes: those no one holds leave the free count.
  const KVCache::PrefixMatch hit = MatchPrefix(r);
  const int64_t hit_tokens = hit.units * (c.prefix_caching() ? c.prefix_unit_tokens() : 0);
  const int64_t revived = hit.evictable_units * streams;
  const bool revived_encoded = c.prefix_caching() && c.prefix_cache()->encoded();
  int64_t plain = blocks(n);  // the first chunk is written plain, after the cached units
  // A selection policy may compact right after the first chunk: room to
  // copy the shared plain blocks it takes up (copy on write).
  if (compacts() && !revived_encoded) plain += hit.units * streams;
  if (max_sequence_tokens_ != INT64_MAX) {
    // Memory grows with length: room for the whole prefill. With an
    // encoding, what will be sealed must fit the encoded pool and only the
    // residual and open tail stay plain.
    const int64_t total = r.num_uncomputed();
    int64_t sealed = 0;
    if (s.encoded && c.encoded_pool() != nullptr) {
      const int64_t tpb = s.enc.tokens_per_block;
      sealed = total > s.residual ? (total - s.residual) / tpb * tpb : 0;
      const int64_t new_sealed = std::max<int64_t>(0, sealed - hit_tokens);  // cached units are sealed already
      const int64_t available = c.AvailableEncodedBlocks() - (revived_encoded ? revived : 0);
      if (streams * (new_sealed / tpb) + Watermark(*c.encoded_pool()) > available) return false;
    }
    plain = std::max(plain, blocks(total - std::max(sealed, hit_tokens)));
  }
  return plain + Watermark(c.pool()) <= FreeBlocks() - (revived_encoded ? 0 : revived);
}

Status Scheduler::Allocate(Request* r, int64_t n) {
  const KVCache::PrefixMatch hit = MatchPrefix(*r);
  if (hit.units > 0) {
    const std::vector<BlockHash> prefix(r->block_hashes.begin(), r->block_hashes.begin() + hit.units);
    KVLAB_RETURN_IF_ERROR(executor_->AddSequenceWithPrefix(r->spec.id, prefix));
  } else {
    KVLAB_RETURN_IF_ERROR(executor_->AddSequence(r->spec.id));
  }
  const int64_t hit_tokens = hit.units > 0 ? hit.units * executor_->cache().prefix_unit_tokens() : 0;
  r->num_computed = hit_tokens;
  r->cached_tokens += hit_tokens;
  num_prefix_hit_tokens_ += hit_tokens;
  if (!r->admitted) r->prompt_cached_tokens = hit_tokens;
  r->admitted = true;
  // Tokens the last preemption discarded that the cache gave back are not recomputed.
  const int64_t saved = std::min(hit_tokens, r->last_discarded);
  r->recomputed_tokens -= saved;
  num_recomputed_tokens_ -= saved;
  r->last_discarded = 0;
  Append(*r, n);
  return Status::OK();
}

bool Scheduler::CanAppend(const Request& r, int64_t n) const {
  int64_t enc = 0;
  const int64_t extra = StepExtraBlocks(r.spec.id, &enc);
  return executor_->cache().BlocksNeeded(r.spec.id, n) + extra <= FreeBlocks() && enc <= FreeEncodedBlocks();
}

void Scheduler::Append(const Request& r, int64_t n) {
  int64_t enc = 0;
  booked_blocks_ += executor_->cache().BlocksNeeded(r.spec.id, n) + StepExtraBlocks(r.spec.id, &enc);
  booked_encoded_blocks_ += enc;
}

int64_t Scheduler::LargestAppendable(const Request& r, int64_t n) const {
  // BlocksNeeded grows with n, so bisect.
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (CanAppend(r, mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

void Scheduler::InsertRunning(Request* r) {
  auto earlier = [](const Request* a, const Request* b) {
    return a->spec.arrival != b->spec.arrival ? a->spec.arrival < b->spec.arrival : a->spec.id < b->spec.id;
  };
  running_.insert(std::upper_bound(running_.begin(), running_.end(), r, earlier), r);
  r->state = RequestState::kRunning;
}

Status Scheduler::DoPreempt(Request* r, std::vector<int64_t>* preempted) {
  KVLAB_RETURN_IF_ERROR(executor_->RemoveSequence(r->spec.id));
  running_.erase(std::find(running_.begin(), running_.end(), r));
  r->recompute_until = std::max(r->recompute_until, r->num_computed);
  r->last_discarded = r->num_computed;
  r->recomputed_tokens += r->num_computed;
  num_recomputed_tokens_ += r->num_computed;
  r->num_computed = 0;
  r->num_preemptions++;
  num_preemptions_++;
  r->state = RequestState::kWaiting;
  waiting_.push_front(r);
  if (preempted != nullptr) preempted->push_back(r->spec.id);
  return Status::OK();
}

Status Scheduler::Preempt(int64_t id) {
  Request* r = Get(id);
  if (r == nullptr || r->state != RequestState::kRunning) {
    return Status::NotFound("request " + std::to_string(id) + " is not running");
  }
  return DoPreempt(r, nullptr);
}

Status Scheduler::Finish(Request* r, RequestState state, double now) {
  if (r->state == RequestState::kRunning) {
    KVLAB_RETURN_IF_ERROR(executor_->RemoveSequence(r->spec.id));
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->state == RequestState::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  }
  r->state = state;
  r->finish_time = now;
  done_.push_back(r->spec.id);
  return Status::OK();
}

Status Scheduler::Abort(int64_t id, const std::string& reason) {
  Request* r = Get(id);
  if (r == nullptr || r->state == RequestState::kFinished || r->state == RequestState::kAborted) {
    return Status::NotFound("request " + std::to_string(id) + " is neither waiting nor running");
  }
  r->abort_reason = reason;
  return Finish(r, RequestState::kAborted, r->finish_time);
}

std::vector<int64_t> Scheduler::RunningIds() const {
  std::vector<int64_t> ids;
  for (const Request* r : running_) ids.push_back(r->spec.id);
  return ids;
}

std::vector<int64_t> Scheduler::WaitingIds() const {
  std::vector<int64_t> ids;
  for (const Request* r : waiting_) ids.push_back(r->spec.id);
  return ids;
}

std::vector<Request> Scheduler::TakeFinished() {
  std::vector<Request> out;
  for (int64_t id : done_) {
    auto it = requests_.find(id);
    out.push_back(std::move(*it->second));
    requests_.erase(it);
  }
  done_.clear();
  return out;
}

Status Scheduler::Step(double now, StepOutcome* out) {
  *out = StepOutcome();
  booked_blocks_ = booked_encoded_blocks_ = 0;
  const int64_t chunk_cap = options_.max_prefill_chunk > 0 ? options_.max_prefill_chunk : options_.max_num_batched_tokens;
  // Decode tokens are served before prefill chunks: set their share of the
  // budget aside, then fill the rest with chunks in arrival order.
  int64_t num_decode = 0;
  for (const Request* r : running_) num_decode += r->num_uncomputed() == 1 ? 1 : 0;
  int64_t prefill_budget = options_.max_num_batched_tokens - num_decode;
  std::vector<Planned> plan;

  for (size_t i = 0; i < running_.size();) {
    Request* r = running_[i];
    const bool decode = r->num_uncomputed() == 1;
    int64_t n = decode ? 1 : std::min({r->num_uncomputed(), chunk_cap, prefill_budget});
    if (n == 0) {  // no budget left for this prefill; it keeps its blocks and waits a step
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!CanAppend(*r, n)) {
      Request* victim = running_.back();
      if (victim != r) {
        if (victim->num_uncomputed() == 1) prefill_budget += 1;  // its decode token is no longer needed
        KVLAB_RETURN_IF_ERROR(DoPreempt(victim, &out->preempted));
        continue;
      }
      // r is the latest arrival still running. A prefill takes the part that
      // fits rather than throwing its own progress away.
      const int64_t m = n > 1 ? LargestAppendable(*r, n - 1) : 0;
      if (m > 0) {
        n = m;
        break;
      }
      if (running_.size() == 1) {
        // Alone and still out of blocks: it can never run.
        r->abort_reason = "request " + std::to_string(r->spec.id) + " ran out of KV blocks at " +
                          std::to_string(r->num_computed) + " tokens while alone in the pool";
        out->aborted.push_back(r->spec.id);
        KVLAB_RETURN_IF_ERROR(Finish(r, RequestState::kAborted, now));
      } else {
        KVLAB_RETURN_IF_ERROR(DoPreempt(r, &out->preempted));
      }
      self_preempted = true;
      break;
    }
    if (self_preempted) break;  // r was the last running request
    Append(*r, n);
    if (!decode) prefill_budget -= n;
    plan.push_back({r, n});
    ++i;
  }

  // Admissions, first come first served: the head of the waiting queue goes
  // first or nobody does. vLLM admits nothing in a step that preempted.
  // Admission needs room for the whole prefill (prompt, or prompt plus output
  // when recomputing), as nano-vllm's can_allocate, though only the first
  // chunk runs now: admitting on the first chunk alone lets a long prompt in
  // that must then preempt others (or itself) chunk by chunk.
  if (out->preempted.empty()) {
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_num_seqs && prefill_budget > 0) {
      Request* r = waiting_.front();
      UpdateBlockHashes(r);
      const KVCache::PrefixMatch hit = MatchPrefix(*r);
      const int64_t hit_tokens = CachedPrefixTokens(*r);
      int64_t n = std::min({r->num_uncomputed() - hit_tokens, chunk_cap, prefill_budget});
      if (!CanAllocate(*r, n)) {
        if (!running_.empty()) break;
        // An empty pool: take the part of the first chunk that fits at all
        // (cached units it takes up are not free for it).
        const KVCache& c = executor_->cache();
        const CacheShape& s = c.shape();
        const bool revived_plain = c.prefix_caching() && !c.prefix_cache()->encoded();
        const int64_t copies = revived_plain && compacts() ? hit.units * s.StreamsPerSequence() : 0;
        const int64_t free =
            FreeBlocks() - copies - (revived_plain ? hit.evictable_units * s.StreamsPerSequence() : 0);
        const int64_t blocks_per_stream = free / s.StreamsPerSequence();
        n = std::min(n, blocks_per_stream * s.block_size);
        if (n <= 0) {
          r->abort_reason = "request " + std::to_string(r->spec.id) + " cannot get one block per stream in an empty pool";
          out->aborted.push_back(r->spec.id);
          KVLAB_RETURN_IF_ERROR(Finish(r, RequestState::kAborted, now));
          continue;
        }
      }
      waiting_.pop_front();
      KVLAB_RETURN_IF_ERROR(Allocate(r, n));
      out->prefix_hit_tokens += hit_tokens;
      InsertRunning(r);
      prefill_budget -= n;
      plan.push_back({r, n});
    }
  }
  if (plan.empty()) return Status::OK();

  std::vector<SeqChunk> chunks;
  chunks.reserve(plan.size());
  for (const Planned& p : plan) {
    SeqChunk c;
    c.seq = p.r->spec.id;
    c.tokens.reserve(static_cast<size_t>(p.n));
    for (int64_t t = 0; t < p.n; ++t) c.tokens.push_back(p.r->token(p.r->num_computed + t));
    chunks.push_back(std::move(c));
  }
  std::vector<int32_t> next;
  KVLAB_RETURN_IF_ERROR(executor_->Step(chunks, &next));
  if (next.size() != plan.size()) return Status::Internal("executor returned " + std::to_string(next.size()) +
                                                          " tokens for " + std::to_string(plan.size()) + " chunks");
  booked_blocks_ = booked_encoded_blocks_ = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Request* r = plan[i].r;
    const int64_t before = r->num_computed;
    out->chunks.push_back({r->spec.id, plan[i].n, r->num_uncomputed() > 1, before < r->recompute_until});
    out->num_batched_tokens += plan[i].n;
    if (r->first_scheduled_time < 0) r->first_scheduled_time = now;
    r->num_computed += plan[i].n;
    if (prefix_caching()) {
      // Full units now in the cache become shareable (before Finish frees them).
      UpdateBlockHashes(r);
      executor_->CacheFullUnits(r->spec.id, r->block_hashes);
    }
    if (r->num_computed < r->num_tokens()) continue;  // a chunk in the middle of a prefill
    r->output.push_back(next[i]);
    if (r->output.size() == 1) r->first_token_time = now + 1;
    if (static_cast<int64_t>(r->output.size()) >= r->spec.max_new_tokens) {
      out->finished.push_back(r->spec.id);
      KVLAB_RETURN_IF_ERROR(Finish(r, RequestState::kFinished, now + 1));
    }
  }
  return Status::OK();
}

}  // namespace kvlab
