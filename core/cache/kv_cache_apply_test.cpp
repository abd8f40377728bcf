// The cache applying the policies' decisions (kv_cache_apply.cpp) and the one
// cache-shape rule (cache_shape.cpp): DeriveCacheShape from a model's KV shape
// and a stack; FoldAttention by the policy's own rule; ApplySelection and
// Seal telling a device owner what to move; ApplyPlacement demoting what the
// policy ranks lowest; the step's two doors (BeginStep, EndStep) doing what
// the calls they stand for do.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/cache_step.h"
#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "policies/kv_policy.h"

namespace kvlab {
namespace {

ModelKvShape Model(int layers, int kv_heads, int head_dim, std::vector<int64_t> windows = {}) {
  ModelKvShape m;
  m.num_layers = layers;
  m.num_kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.layer_window = std::move(windows);
  return m;
}

PolicyStack Stack(const std::vector<PolicySpec>& specs) {
  PolicyStack s;
  EXPECT_TRUE(PolicyStack::Create(specs, &s).ok());
  return s;
}

TEST(CacheShapeTest, DerivedFromTheModelAndTheStack) {
  CacheShape sh;
  // Head sharing stores fewer heads; the run's dtype is kept.
  ASSERT_TRUE(DeriveCacheShape(Model(4, 8, 64), Stack({PolicySpec{"gqa-reuse", {{"group", "2"}}, "t"}}), 16,
                               DType::kF16, &sh)
                  .ok());
  EXPECT_EQ(sh.num_layers, 4);
  EXPECT_EQ(sh.num_kv_heads, 4);
  EXPECT_EQ(sh.head_dim, 64);
  EXPECT_EQ(sh.block_size, 16);
  EXPECT_EQ(sh.dtype, DType::kF16);
  EXPECT_FALSE(sh.encoded);
  // A sealed encoding and its residual; windows past the layers kept are dropped.
  ASSERT_TRUE(DeriveCacheShape(Model(2, 2, 128, {0, 64, 64}), Stack({PolicySpec{"kivi", {{"residual", "32"}}, "t"}}),
                               16, DType::kBF16, &sh)
                  .ok());
  EXPECT_TRUE(sh.encoded);
  EXPECT_EQ(sh.enc.kind, EncodingKind::kKivi);
  EXPECT_EQ(sh.enc.head_dim, 128);
  EXPECT_EQ(sh.residual, 32);
  EXPECT_EQ(sh.layer_window, (std::vector<int64_t>{0, 64}));
  // The stack's own shape check, naming the parameter; then the shape's.
  Status s = DeriveCacheShape(Model(2, 2, 128), Stack({PolicySpec{"kivi", {{"group", "24"}}, "t"}}), 16,
                              DType::kBF16, &sh);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'group'"), std::string::npos) << s.message();
  s = DeriveCacheShape(Model(2, 2, 128), Stack({PolicySpec{"full", {}, "t"}}), 0, DType::kBF16, &sh);
  EXPECT_NE(s.message().find("block_size"), std::string::npos) << s.message();
}

// A scoring policy whose statistic is the largest attention a slot received.
class MaxScore : public KVPolicy {
 public:
  MaxScore() : KVPolicy(PolicyParams()) {}
  const char* Name() const override { return "max-score"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool NeedsAttentionScores() const override { return true; }
  void FoldAttention(const float* step, int64_t n, float* score) const override {
    for (int64_t i = 0; i < n; ++i) score[i] = std::max(score[i], step[i]);
  }
};
class SumScore : public KVPolicy {  // the default rule
 public:
  SumScore() : KVPolicy(PolicyParams()) {}
  const char* Name() const override { return "sum-score"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool NeedsAttentionScores() const override { return true; }
};

CacheShape Small(int layers, int heads, int block_size) { return TinyCacheShape(layers, heads, block_size); }

TEST(KVCacheApplyTest, FoldAttentionFollowsThePolicysRule) {
  for (int rule = 0; rule < 2; ++rule) {
    std::unique_ptr<KVCache> c;
    ASSERT_TRUE(KVCache::Create(Small(2, 2, 4), 64, true, &c).ok());
    for (int64_t seq : {3, 5}) {
      ASSERT_TRUE(c->AddSequence(seq).ok());
      const auto pos = Iota(0, 3);
      ASSERT_TRUE(c->Reserve(seq, 3, pos.data()).ok());
    }
    PageTable pt;
    c->BuildPageTable({5, 3}, &pt);
    SlotAttention a;
    for (int step = 0; step < 2; ++step) {
      a.Reset(pt);
      ASSERT_EQ(a.offsets.size(), 2u * 2 * 2);
      ASSERT_EQ(a.values.size(), 2u * 2 * 2 * 3);
      // Stream k of the page table ([layer][seq][head]) gets k + slot, or 10 - it on the second step.
      for (size_t k = 0; k < a.offsets.size(); ++k) {
        for (int j = 0; j < 3; ++j) a.values[a.offsets[k] + j] = step == 0 ? k + j : 10.0f - (k + j);
      }
      if (rule == 0) {
        c->FoldAttention({5, 3}, a, MaxScore());
      } else {
        c->FoldAttention({5, 3}, a, SumScore());
      }
    }
    // Layer 1, sequence 3 (batch index 1), head 0 is page-table stream 1*4 + 1*2 + 0 = 6.
    const Stream& st = c->stream(3, 1, 0);
    for (int j = 0; j < 3; ++j) {
      const float first = 6.0f + j, second = 10.0f - (6.0f + j);
      EXPECT_EQ(st.score[static_cast<size_t>(j)], rule == 0 ? std::max(first, second) : first + second) << j;
    }
  }
}

// What a device owner is told: kept rows that move, with the block list as
// it was; groups sealed, with the old plain blocks; one Finish per batch.
class RecordingOps : public DeviceKvOps {
 public:
  struct Move {
    std::vector<int32_t> blocks;
    int64_t tokens;
    std::vector<int64_t> keep;
  };
  std::vector<Move> moves;
  std::vector<std::vector<int32_t>> sealed_enc;
  std::vector<int64_t> sealed_plain;
  int compaction_batches = 0, seal_batches = 0;
  void Compacted(const std::vector<int32_t>& b, int64_t t, const std::vector<int64_t>& keep) override {
    moves.push_back({b, t, keep});
  }
  Status FinishCompaction() override {
    ++compaction_batches;
    return Status::OK();
  }
  void Sealed(const std::vector<int32_t>& /*plain_before*/, int64_t plain_tokens, const std::vector<int32_t>& enc) override {
    sealed_plain.push_back(plain_tokens);
    sealed_enc.push_back(enc);
  }
  Status FinishSeal() override {
    ++seal_batches;
    return Status::OK();
  }
};

// On layer 0's streams keeps slots 0 and 2 (only slot 0 of a shorter
// stream); every slot elsewhere.
class KeepEvenOnLayer0 : public KVPolicy {
 public:
  KeepEvenOnLayer0() : KVPolicy(PolicyParams()) {}
  const char* Name() const override { return "even"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    if (s.layer != 0) return false;
    if (s.num_tokens >= 3) {
      keep->assign({0, 2});
    } else {
      keep->assign({0});
    }
    return true;
  }
};

TEST(KVCacheApplyTest, DeviceOwnerIsToldWhatMoves) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Small(2, 1, 2), 64, true, &c).ok());
  RecordingOps ops;
  c->SetDeviceOps(&ops);
  ASSERT_TRUE(c->AddSequence(1).ok());
  const auto pos = Iota(0, 5);
  ASSERT_TRUE(c->Reserve(1, 5, pos.data()).ok());
  const std::vector<int32_t> blocks = c->stream(1, 0, 0).blocks;
  KeepEvenOnLayer0 sel;
  ASSERT_TRUE(c->ApplySelection({1}, {5}, &sel).ok());
  ASSERT_EQ(ops.moves.size(), 1u);  // layer 0 only; layer 1 keeps everything
  EXPECT_EQ(ops.moves[0].blocks, blocks);
  EXPECT_EQ(ops.moves[0].tokens, 5);
  EXPECT_EQ(ops.moves[0].keep, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(ops.compaction_batches, 1);
  EXPECT_EQ(c->stream(1, 0, 0).num_tokens, 2);
  EXPECT_EQ(c->stream(1, 0, 0).positions, (std::vector<int32_t>{0, 2}));
  // A kept prefix moves no row: the books change, the owner is not told.
  ASSERT_TRUE(c->ApplySelection({1}, {6}, &sel).ok());
  EXPECT_EQ(ops.moves.size(), 1u);
  EXPECT_EQ(c->stream(1, 0, 0).num_tokens, 1);
  EXPECT_EQ(ops.compaction_batches, 2);
  // Without an encoding Seal has nothing to seal.
  ASSERT_TRUE(c->Seal(std::vector<int64_t>{1}).ok());
  EXPECT_EQ(ops.seal_batches, 0);
}

TEST(KVCacheApplyTest, DeviceOwnerIsToldWhatWasSealed) {
  CacheShape sh = Small(1, 1, 4);
  sh.head_dim = 32;
  sh.encoded = true;
  sh.enc.kind = EncodingKind::kKivi;
  sh.enc.head_dim = 32;
  sh.enc.group = 8;
  sh.enc.tokens_per_block = 8;
  sh.residual = 4;
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(sh, 64, true, &c, 16).ok());
  RecordingOps ops;
  c->SetDeviceOps(&ops);
  ASSERT_TRUE(c->AddSequence(1).ok());
  const auto pos = Iota(0, 21);
  ASSERT_TRUE(c->Reserve(1, 21, pos.data()).ok());
  ASSERT_TRUE(c->Seal(std::vector<int64_t>{1}).ok());
  // 21 plain tokens, residual 4: two groups of 8 sealed at once.
  ASSERT_EQ(ops.sealed_enc.size(), 1u);
  EXPECT_EQ(ops.sealed_plain[0], 21);
  EXPECT_EQ(ops.sealed_enc[0], c->stream(1, 0, 0).enc_blocks);
  EXPECT_EQ(ops.sealed_enc[0].size(), 2u);
  EXPECT_EQ(ops.seal_batches, 1);
  // A stream with encoded blocks is not compacted on a device.
  KeepEvenOnLayer0 sel;
  const Status s = c->ApplySelection({1}, {21}, &sel);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("encoded"), std::string::npos) << s.message();
  EXPECT_EQ(c->stream(1, 0, 0).num_tokens, 21);
}

// Placement ranked by the policy: the lowest-priority blocks leave first, the
// open tail block always stays.
class OldestFirst : public KVPolicy {
 public:
  explicit OldestFirst(int64_t budget) : KVPolicy(PolicyParams()), budget_(budget) {}
  const char* Name() const override { return "oldest-first"; }
  uint32_t Concerns() const override { return kConcernPlacement; }
  bool Placement(PlacementOptions* o) const override {
    o->device_budget_bytes = budget_;
    o->host_budget_bytes = 1 << 20;
    return true;
  }
  double BlockPriority(const StreamState& /*s*/, int64_t first_slot, int64_t /*n*/) const override {
    return static_cast<double>(first_slot);
  }

 private:
  int64_t budget_;
};

TEST(KVCacheApplyTest, PlacementDemotesWhatThePolicyRanksLowest) {
  std::unique_ptr<KVCache> c;
  ASSERT_TRUE(KVCache::Create(Small(1, 1, 4), 64, true, &c).ok());
  const int64_t block = c->shape().BlockBytes();
  const OldestFirst place(2 * block);
  PlacementOptions po;
  ASSERT_TRUE(place.Placement(&po));
  ASSERT_TRUE(c->EnableOffload(po).ok());
  ASSERT_TRUE(c->AddSequence(1).ok());
  const auto pos = Iota(0, 18);  // 5 blocks
  ASSERT_TRUE(c->Reserve(1, 18, pos.data()).ok());
  ASSERT_TRUE(c->ApplyPlacement(&place, {{1, 18}}).ok());
  EXPECT_LE(c->DeviceBytesInUse(), 2 * block);
  const Stream& st = c->stream(1, 0, 0);
  EXPECT_TRUE(IsOffloaded(st.blocks[0]));
  EXPECT_TRUE(IsOffloaded(st.blocks[1]));
  EXPECT_TRUE(IsOffloaded(st.blocks[2]));
  EXPECT_FALSE(IsOffloaded(st.blocks[3]));
  EXPECT_FALSE(IsOffloaded(st.blocks[4]));  // the open tail
  EXPECT_TRUE(c->ApplyPlacement(nullptr, {{1, 18}}).ok());
}


// KVCache::BeginStep and EndStep against the calls they stand for, made one
// by one on a twin cache: the same page tables and windows, the same per-slot
// attention buffer, and after eight steps of two sequences (a prefill chunk,
// then decode) under h2o the same slots, positions and scores in every stream.
TEST(KVCacheStepTest, TwoDoorsDoWhatTheirCallsDo) {
  CacheShape sh = TinyCacheShape(2, 2, 4);
  sh.layer_window = {0, 6};  // layer 1 is a window layer: BuildWindows and the window's compaction
  std::unique_ptr<KVCache> doors, calls;
  ASSERT_TRUE(KVCache::Create(sh, 64, true, &doors).ok());
  ASSERT_TRUE(KVCache::Create(sh, 64, true, &calls).ok());
  const PolicyStack stack = Stack({PolicySpec{"h2o", {{"budget", "8"}}, "t"}});
  ASSERT_TRUE(stack.NeedsAttentionScores());
  const std::vector<KVCache::SeqId> seqs = {3, 7};
  for (KVCache::SeqId id : seqs) {
    ASSERT_TRUE(doors->AddSequence(id).ok());
    ASSERT_TRUE(calls->AddSequence(id).ok());
  }
  std::map<KVCache::SeqId, int64_t> len = {{3, 0}, {7, 0}};
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int64_t n = step == 0 ? 12 : 1;  // a prompt chunk, then one token per step
    StepRequest req;
    req.seqs = seqs;
    std::vector<std::vector<int32_t>> pos;
    for (KVCache::SeqId id : seqs) {
      pos.push_back(Iota(len[id], n));
      req.positions.insert(req.positions.end(), pos.back().begin(), pos.back().end());
      req.qo_indptr.push_back(req.qo_indptr.back() + static_cast<int32_t>(n));
    }
    StepView view;
    ASSERT_TRUE(doors->BeginStep(req, stack, &view).ok());
    for (size_t i = 0; i < seqs.size(); ++i) ASSERT_TRUE(calls->Reserve(seqs[i], n, pos[i].data()).ok());
    PageTable pt;
    StagingPlan staging;
    ASSERT_TRUE(calls->PlanStep(seqs, &pt, &staging).ok());
    calls->BuildWindows(seqs, req.qo_indptr, &pt);
    calls->AttachKeyBounds(seqs, &pt);
    SlotAttention sa;
    sa.Reset(pt);
    ASSERT_TRUE(view.wants_slot_attention);
    EXPECT_EQ(view.slot_attention.offsets, sa.offsets);
    ASSERT_EQ(view.slot_attention.values.size(), sa.values.size());
    for (int l = 0; l < 2; ++l) {
      for (int b = 0; b < 2; ++b) {
        for (int h = 0; h < 2; ++h) EXPECT_EQ(view.page_table.StreamLength(l, b, h), pt.StreamLength(l, b, h));
      }
      ASSERT_EQ(view.page_table.FirstVisible(l) == nullptr, pt.FirstVisible(l) == nullptr) << l;
      if (pt.FirstVisible(l) != nullptr) {
        for (int64_t q = 0; q < 2 * n * 2; ++q) EXPECT_EQ(view.page_table.FirstVisible(l)[q], pt.FirstVisible(l)[q]);
      }
    }
    // What a backend would add: a fixed pattern, the same on both sides.
    for (size_t i = 0; i < sa.values.size(); ++i) {
      sa.values[i] = static_cast<float>((i * 7 + static_cast<size_t>(step) * 3) % 11) / 11.0f;
      view.slot_attention.values[i] = sa.values[i];
    }
    StepOutcome out;
    std::vector<SeqStep> steps;
    for (KVCache::SeqId id : seqs) {
      out.next_pos.push_back(len[id] += n);
      steps.push_back(SeqStep{n, true});
    }
    out.steps = steps;
    out.seq_length = &len;
    ASSERT_TRUE(doors->EndStep(stack, out, &view).ok());
    calls->ReleaseStaging(&staging);
    calls->FoldAttention(seqs, sa, *stack.ScoringPolicy(), &steps);
    ASSERT_TRUE(calls->ApplySelection(seqs, out.next_pos, stack.For(kConcernSelection), &steps).ok());
    calls->UpdateKeyBounds(seqs);
    ASSERT_TRUE(calls->Seal(seqs).ok());
    ASSERT_TRUE(calls->ApplyPlacement(stack.For(kConcernPlacement), len).ok());
    for (KVCache::SeqId id : seqs) {
      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < 2; ++h) {
          const Stream& a = doors->stream(id, l, h);
          const Stream& b = calls->stream(id, l, h);
          ASSERT_EQ(a.num_tokens, b.num_tokens) << id << " " << l << " " << h;
          EXPECT_EQ(a.positions, b.positions) << id << " " << l << " " << h;
          EXPECT_EQ(a.score, b.score) << id << " " << l << " " << h;
        }
      }
    }
  }
  // h2o kept its budget: the selection ran through the second door.
  EXPECT_EQ(doors->stream(3, 0, 0).num_tokens, 8);
  EXPECT_EQ(doors->pool().bytes_in_use(), calls->pool().bytes_in_use());
}

}  // namespace
}  // namespace kvlab
