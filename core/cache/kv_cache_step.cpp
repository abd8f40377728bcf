// KVCache's two doors for one step (core/cache/cache_step.h): BeginStep
// hands out the step's view, EndStep takes it back and applies the stack's
// decisions. Everything between them (the model, the attention backend)
// reads the view and never calls the cache's step methods itself.
#include "core/cache/cache_step.h"

namespace kvlab {

Status KVCache::BeginStep(const StepRequest& req, const PolicyStack& stack, StepView* view) {
  view->cache = this;
  view->seqs = req.seqs;
  view->qo_indptr = req.qo_indptr;
  view->reads = ReadStats();
  view->read_policy = stack.ReadPolicy();
  for (size_t i = 0; i < req.seqs.size(); ++i) {
    const int32_t* pos = req.positions.data() + req.qo_indptr[i];
    KVLAB_RETURN_IF_ERROR(Reserve(req.seqs[i], req.qo_indptr[i + 1] - req.qo_indptr[i], pos));
  }
  KVLAB_RETURN_IF_ERROR(PlanStep(view->seqs, &view->page_table, &view->staging));
  BuildWindows(view->seqs, view->qo_indptr, &view->page_table);
  AttachKeyBounds(view->seqs, &view->page_table);  // a no-op unless a read policy asked for bounds
  view->wants_slot_attention = stack.NeedsAttentionScores();
  if (view->wants_slot_attention) {
    view->slot_attention.Reset(view->page_table);
    view->slot_attention.last_queries = stack.ObservationWindow();
  } else {
    view->slot_attention = SlotAttention();
  }
  return Status::OK();
}

void KVCache::AbortStep(StepView* view) { ReleaseStaging(&view->staging); }

Status KVCache::EndStep(const PolicyStack& stack, const StepOutcome& outcome, StepView* view) {
  ReleaseStaging(&view->staging);
  const std::vector<SeqId>& seqs = view->seqs;
  if (view->wants_slot_attention) FoldAttention(seqs, view->slot_attention, *stack.ScoringPolicy(), &outcome.steps);
  if (stack.NeedsKeyNorms()) RecordKeyNorms(seqs, view->qo_indptr);
  KVLAB_RETURN_IF_ERROR(ApplySelection(seqs, outcome.next_pos, stack.For(kConcernSelection), &outcome.steps));
  UpdateKeyBounds(seqs);  // after compaction: a no-op without bounds
  KVLAB_RETURN_IF_ERROR(Seal(seqs));
  const KVPolicy* place = stack.For(kConcernPlacement);
  if (place == nullptr) return Status::OK();
  if (outcome.seq_length == nullptr) return Status::InvalidArgument("KVCache::EndStep: placement needs StepOutcome::seq_length");
  return ApplyPlacement(place, *outcome.seq_length);
}

}  // namespace kvlab
