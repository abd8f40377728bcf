// What snapkv, pyramidkv and adakv share (policies/snapkv.cpp, pyramidkv.cpp,
// adakv.cpp): SnapKV's parameters, when its rule runs, its pooled scores and
// its kept set, PyramidKV's per-layer schedule and Ada-KV's per-head
// allocation. Each is a pure function of its arguments, tested in
// policies/snapkv_test.cpp.
//
// When the rule runs (the engine runs a chunk as bounded steps, so the rule
// cannot wait for the whole prompt without the pools holding it): a stream
// of n slots over its budget B (window included) is selected
//   - at the end of a prompt chunk: the last step of a chunk of more than
//     one token (StreamState::chunk_end, step_tokens > 1), or a step whose
//     shape is unknown (step_tokens 0, a hand-built state);
//   - otherwise once n >= B + every: decode tokens, and the earlier steps of
//     a chunk longer than B + every (the selection then cascades, each time
//     with that step's last w queries as the window).
// So a stream never keeps more than B + every - 1 slots after a step
// (KeptSlotsBound), and a prompt chunk of up to B + every tokens is selected
// exactly once, at its end, with its last w tokens as the window: SnapKV's rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policies/scored_selection.h"

namespace kvlab {

struct SnapKVOptions {
  int64_t budget = 1024;  // slots kept per stream, the window included; 0 = ratio
  double ratio = 0.25;    // with budget 0: kept fraction of the sequence's length so far
  int64_t window = 32;    // observation window: the last w tokens' queries
  int64_t kernel = 7;     // pooling kernel (odd)
  bool max_pool = true;   // "max" (the paper) or "avg"
  int64_t every = 256;    // slots a stream may add past its budget before the rule runs again

  // The budget as ScoredSelection sizes it: at least the window.
  SelectionBudget Size() const { return SelectionBudget{budget, ratio, window}; }
  // Budget B at a sequence length: budget, or max(window, floor(ratio x length)).
  int64_t Budget(int64_t length) const { return Size().At(length); }
};

// The ParamSpecs of SnapKVOptions (budget, ratio, window, kernel, pooling,
// every), in that order, with `policy`'s name in their help where it matters.
std::vector<ParamSpec> SnapKVParamSpecs();
// Reads them back, checking what one ParamSpec cannot: kernel odd, budget
// (when given) larger than the window. The error names `policy` and the parameter.
Status ReadSnapKVOptions(const char* policy, const PolicyParams& p, SnapKVOptions* o);

// Whether the rule runs on a stream of n slots over budget B (see above).
bool SnapKVActs(const StreamState& s, int64_t budget, int64_t every);
// The stream's length for the budget: max(seq_length, num_tokens).
int64_t SnapKVLength(const StreamState& s);

// Pooled scores of the prefix slots [0, prefix): score (0 when null, NaN as
// -inf) max- or average-pooled over `kernel` neighbours (padding kernel / 2,
// stride 1; the average divides by kernel, as torch's avg_pool1d counts its
// padding).
void PooledScores(const float* score, int64_t prefix, int64_t kernel, bool max_pool, std::vector<float>* out);
// The `top` prefix slots with the highest pooled scores (ties: the lower
// slot), in increasing order.
inline std::vector<int64_t> TopSlots(const std::vector<float>& pooled, int64_t top) {
  return TopSlots(pooled.data(), static_cast<int64_t>(pooled.size()), top, Ties::kLowerSlot);
}
// keep = top(prefix) + every slot from `prefix` to n - 1.
void KeepTopAndWindow(const std::vector<int64_t>& top, int64_t prefix, int64_t n, std::vector<int64_t>* keep);

// PyramidKV's per-layer prefix budgets (the window excluded) for a uniform
// prefix budget P over L layers: from max = 2P - P/beta at layer 0 to
// min = P/beta at layer L - 1 in equal steps, each floored, the remainder
// given one slot each to the lowest layers, so they sum to L x P exactly and
// never rise with depth.
std::vector<int64_t> PyramidPrefixBudgets(int64_t prefix_budget, int num_layers, double beta);

// PyramidKV's budget B_l of layer `layer` (window included) at `length`:
// window + PyramidPrefixBudgets(B - window, num_layers, beta)[layer], B the
// uniform budget; uniform B when num_layers is unknown (0). The bound of any
// layer's: window + floor(2P - P/beta) + 1 (PyramidBottomBound).
int64_t PyramidLayerBudget(const SnapKVOptions& o, double beta, int layer, int num_layers, int64_t length);
int64_t PyramidBottomBound(const SnapKVOptions& o, double beta, int64_t length);
// PyramidKV's `beta` parameter (pyramidkv.cpp; adakv takes it too).
ParamSpec PyramidBetaSpec();

// Ada-KV's allocation of a layer's prefix budget H x P over its H heads
// (pooled[h]: head h's pooled prefix scores): each head first keeps its own
// top floor(alpha x P) (the safeguard), then the rest of H x P goes to the
// highest remaining scores of all heads jointly (ties: lower head, then
// lower slot). The kept prefix slots of each head, increasing.
std::vector<std::vector<int64_t>> AdaAllocate(const std::vector<std::vector<float>>& pooled, int64_t prefix_budget,
                                              double alpha);

// The policies built on SnapKV's scores: attention of the window's queries
// (KVPolicy::ObservationWindow), summed over the query heads of each KV head
// by the kernels and over the window's queries; a prefill step's window
// replaces a stream's scores, decode steps add to them (with `every`, the
// window of a re-selection is then every query since the prompt's).
// ScoredSelection does their budget's sizing, its block check and the top-k.
class SnapKVFamily : public ScoredSelection {
 public:
  SnapKVFamily(PolicyParams p, const SnapKVOptions& o) : ScoredSelection(std::move(p), o.Size()), o_(o) {}
  bool NeedsAttentionScores() const override { return true; }
  int64_t ObservationWindow() const override { return o_.window; }
  void FoldStepAttention(const SeqStep& info, const float* step, int64_t n, float* score) const override;
  const SnapKVOptions& options() const { return o_; }

  // The budget B of a stream of this layer (window included) at `length`.
  virtual int64_t LayerBudget(int layer, int num_layers, int64_t length) const = 0;
  // SnapKV's rule on one stream with budget B: false within it.
  bool SelectWithBudget(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const;

 protected:
  SnapKVOptions o_;
};

}  // namespace kvlab
