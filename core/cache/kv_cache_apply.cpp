// KVCache applying the policies' decisions after a step: per-slot attention
// folded into the streams' scores by the policy's rule, selection and
// sliding windows by compaction, sealing, and placement by demotion. The
// engine and the model-free executor call these; they rank and move nothing
// themselves.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/cache/kv_cache.h"

namespace kvlab {

void SlotAttention::Reset(const PageTable& pt) {
  offsets.clear();
  int64_t total = 0;
  for (int l = 0; l < pt.num_layers(); ++l) {
    for (int b = 0; b < pt.num_seqs(); ++b) {
      for (int h = 0; h < pt.num_kv_heads(); ++h) {
        offsets.push_back(total);
        total += pt.StreamLength(l, b, h);
      }
    }
  }
  values.assign(static_cast<size_t>(total), 0.0f);
}

void KVCache::FoldAttention(const std::vector<SeqId>& seqs, const SlotAttention& a, const KVPolicy& scorer,
                            const std::vector<SeqStep>* steps) {
  size_t k = 0;
  for (int l = 0; l < shape_.num_layers; ++l) {
    for (size_t b = 0; b < seqs.size(); ++b) {
      const SeqStep info = steps != nullptr ? (*steps)[b] : SeqStep();
      for (int h = 0; h < shape_.num_kv_heads; ++h, ++k) {
        Stream& st = mutable_stream(seqs[b], l, h);
        scorer.FoldStepAttention(info, a.values.data() + a.offsets[k], st.num_tokens, st.score.data());
      }
    }
  }
}

void KVCache::RecordKeyNorms(const std::vector<SeqId>& seqs, const std::vector<int32_t>& qo_indptr) {
  std::vector<float> k(static_cast<size_t>(shape_.head_dim)), v(k.size());
  for (size_t b = 0; b < seqs.size(); ++b) {
    const int64_t q_len = qo_indptr[b + 1] - qo_indptr[b];
    for (int l = 0; l < shape_.num_layers; ++l) {
      for (int h = 0; h < shape_.num_kv_heads; ++h) {
        Stream& st = mutable_stream(seqs[b], l, h);
        for (int64_t t = std::max<int64_t>(0, st.num_tokens - q_len); t < st.num_tokens; ++t) {
          ReadSlot(seqs[b], l, h, t, k.data(), v.data());
          double sum = 0;
          for (float x : k) sum += static_cast<double>(x) * x;
          st.score[static_cast<size_t>(t)] = static_cast<float>(std::sqrt(sum));
        }
      }
    }
  }
}

Status KVCache::CompactOnDevice(SeqId id, int layer, int head, const std::vector<int64_t>& keep) {
  const Stream& s = stream(id, layer, head);
  // A sliding window's leading blocks: freed, no row moves.
  if (DropsLeadingUnits(s, keep)) return Compact(id, layer, head, keep);
  if (s.num_encoded > 0) {
    return Status::InvalidArgument("Compact: sequence " + std::to_string(id) +
                                   ": moving the rows of a stream with encoded blocks on a device pool is not implemented");
  }
  const std::vector<int32_t> blocks = s.blocks;  // before Compact frees the tail
  const int64_t tokens = s.num_tokens;
  KVLAB_RETURN_IF_ERROR(Compact(id, layer, head, keep));
  bool moves = false;  // a kept prefix 0..k-1 stays where it is
  for (size_t i = 0; i < keep.size() && !moves; ++i) moves = keep[i] != static_cast<int64_t>(i);
  if (moves && !blocks.empty()) device_ops_->Compacted(blocks, tokens, keep);
  return Status::OK();
}

Status KVCache::ApplySelection(const std::vector<SeqId>& seqs, const std::vector<int64_t>& next_pos,
                               const KVPolicy* sel, const std::vector<SeqStep>* steps) {
  if (sel == nullptr && !shape_.HasWindows()) return Status::OK();
  const int H = shape_.num_kv_heads;
  const bool per_layer = sel != nullptr && sel->SelectsPerLayer();
  std::vector<std::vector<int64_t>> keeps(static_cast<size_t>(H));
  std::vector<char> acts(static_cast<size_t>(H), 0);
  std::vector<StreamState> states(static_cast<size_t>(H));
  std::vector<int64_t> alive(static_cast<size_t>(H), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqStep* step = steps != nullptr ? &(*steps)[i] : nullptr;
    for (int l = 0; l < shape_.num_layers; ++l) {
      if (per_layer) {  // the layer's heads at once, then each head's compaction
        for (int h = 0; h < H; ++h) {
          states[static_cast<size_t>(h)] =
              SelectionState(seqs[i], l, h, next_pos[i], step, &alive[static_cast<size_t>(h)], sel->NeedsKeyValues());
        }
        sel->SelectLayerSlots(states, &keeps, &acts);
      }
      for (int h = 0; h < H; ++h) {
        std::vector<int64_t>& keep = keeps[static_cast<size_t>(h)];
        const bool compacts = per_layer ? FinishKeep(seqs[i], l, h, alive[static_cast<size_t>(h)], true,
                                                     acts[static_cast<size_t>(h)] != 0, &keep)
                                        : SlotsToKeep(seqs[i], l, h, next_pos[i], sel, &keep, step);
        if (!compacts) continue;
        const Status st = device_ops_ != nullptr ? CompactOnDevice(seqs[i], l, h, keep) : Compact(seqs[i], l, h, keep);
        // Check-then-act: a compaction the pools cannot supply changed nothing.
        if (!st.ok() && st.code() != Status::Code::kResourceExhausted) return st;
      }
    }
  }
  return device_ops_ != nullptr ? device_ops_->FinishCompaction() : Status::OK();
}

Status KVCache::Seal(const std::vector<SeqId>& seqs) {
  for (SeqId id : seqs) Seal(id);
  return device_ops_ != nullptr && shape_.encoded ? device_ops_->FinishSeal() : Status::OK();
}

Status KVCache::ApplyPlacement(const KVPolicy* place, const std::map<SeqId, int64_t>& seq_length) {
  PlacementOptions po;
  if (place == nullptr || !place->Placement(&po) || DeviceBytesInUse() <= po.device_budget_bytes) return Status::OK();
  struct Candidate {
    double priority;
    SeqId seq;
    int layer, head;
    bool encoded;
    size_t index;
    int64_t bytes;
  };
  std::vector<Candidate> cands;
  const int bs = shape_.block_size;
  const int tpb = shape_.enc.tokens_per_block;
  for (const auto& kv : seq_length) {
    for (int l = 0; l < shape_.num_layers; ++l) {
      for (int h = 0; h < shape_.num_kv_heads; ++h) {
        const Stream& st = stream(kv.first, l, h);
        const StreamState ss = StateOf(st, l, h, kv.second, bs);
        for (size_t i = 0; i < st.enc_blocks.size(); ++i) {
          if (IsOffloaded(st.enc_blocks[i])) continue;
          cands.push_back({place->BlockPriority(ss, static_cast<int64_t>(i) * tpb, tpb), kv.first, l, h, true, i,
                           enc_pool_->block_bytes()});
        }
        for (size_t i = 0; i + 1 < st.blocks.size(); ++i) {
          if (IsOffloaded(st.blocks[i])) continue;
          const int64_t first = st.num_encoded + static_cast<int64_t>(i) * bs;
          cands.push_back({place->BlockPriority(ss, first, bs), kv.first, l, h, false, i, pool_->block_bytes()});
        }
      }
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.priority < b.priority; });
  int64_t resident = DeviceBytesInUse();
  for (const Candidate& c : cands) {
    if (resident <= po.device_budget_bytes) break;
    KVLAB_RETURN_IF_ERROR(Demote(c.seq, c.layer, c.head, c.encoded, c.index));
    resident -= c.bytes;
  }
  return Status::OK();
}

}  // namespace kvlab
