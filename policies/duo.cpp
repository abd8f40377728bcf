// duo: DuoAttention. Xiao, Tang, Zuo, Guo, Yang, Tang, Fu, Han, "DuoAttention:
// Efficient Long-Context LLM Inference with Retrieval and Streaming Heads"
// (2024), arXiv:2410.10819.
//   Retrieval heads keep the full cache; streaming heads keep attention sinks
//   plus a recent window (StreamingLLM's rule, policies/sink.cpp, per head).
//
// Parameters
//   heads     (string, "")   the head-split file (policies/duo_heads.h), written by
//                            `kvlab calibrate-heads`: a score per (layer, KV head)
//   fraction  (float, 0.5)   share of the heads kept as retrieval heads, the highest
//                            scores (the paper: 50% for GQA models, 25% for MHA)
//   sinks     (int, 64)      initial slots a streaming head keeps
//   recent    (int, 256)     most recent slots a streaming head keeps
//   streaming (string, "")   instead of a file: the streaming heads listed
//                            ("0.1+3.0"), every other head a retrieval head (the
//                            calibration windows one head alone this way)
//   With neither a file nor a list every head is streaming (sink's rule; the
//   fraction -> 0 end of the curve), so the defaults still act. The defaults
//   (0.5, 64 + 256) are our reading of the paper's settings for 7B-8B models,
//   not checked against its code; tiny models' configs override the window.
//
// What it keeps: a retrieval head (layer l, KV head h) keeps every slot; a
// streaming head keeps its first `sinks` and its last `recent` slots. The
// evicted slots are freed, so a streaming head holds ceil((sinks + recent) /
// block) blocks and a retrieval head its whole length: memory per head is real,
// and the pools reserve per head too (KeptSlotsBoundOfHead).
//
// How it differs from the paper: DuoAttention learns a gate per head by
// optimisation (a distillation loss between full and streaming attention on
// synthetic passkey data) and thresholds the gates. We measure each head
// directly: the KL of the model's answer logits when that head alone is
// streaming, on passkey prompts (evals/calibrate_heads.cpp), and keep the
// `fraction` with the highest deviation: a cheaper proxy that ignores how
// heads interact when several are windowed at once. Keys keep their original
// RoPE positions (as in the paper; no re-positioning inside the window).
#include <set>
#include <string>
#include <utility>

#include "policies/duo_heads.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

class DuoPolicy : public KVPolicy {
 public:
  enum class Split { kAllStreaming, kFile, kList };

  DuoPolicy(PolicyParams p, int64_t sinks, int64_t recent) : KVPolicy(std::move(p)), sinks_(sinks), recent_(recent) {}

  const char* Name() const override { return "duo"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool PerHeadSplit() const override { return true; }
  // Retrieval heads keep one run (everything), streaming heads two (sinks, recent).
  int64_t KeptRunsBound() const override { return 2; }

  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (sinks_ < block_size && recent_ < block_size - sinks_) {
      return Status::InvalidArgument("policy 'duo' parameters 'sinks' + 'recent' = " + std::to_string(sinks_) + " + " +
                                     std::to_string(recent_) + " is smaller than one block (block_size " +
                                     std::to_string(block_size) + "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  Status CheckLayout(int num_layers, int stored_kv_heads) const override;

  int64_t KeptSlotsBound(int64_t max_length) const override {
    // A retrieval head keeps everything; without one, sink's bound.
    if (split_ != Split::kAllStreaming) return max_length;
    return max_length - recent_ <= sinks_ ? max_length : sinks_ + recent_;
  }
  int64_t KeptSlotsBoundOfHead(int64_t max_length, int layer, int kv_head, int /*kv_heads*/) const override {
    if (IsRetrieval(layer, kv_head)) return max_length;
    return max_length - recent_ <= sinks_ ? max_length : sinks_ + recent_;
  }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    if (IsRetrieval(s.layer, s.kv_head) || n - recent_ <= sinks_) return false;
    keep->clear();
    keep->reserve(static_cast<size_t>(sinks_ + recent_));
    for (int64_t i = 0; i < sinks_; ++i) keep->push_back(i);
    for (int64_t i = n - recent_; i < n; ++i) keep->push_back(i);
    return true;
  }

  bool IsRetrieval(int layer, int head) const {
    switch (split_) {
      case Split::kAllStreaming: return false;
      case Split::kList: return streaming_.count({layer, head}) == 0;
      case Split::kFile:
        if (layer < 0 || head < 0 || layer >= file_.num_layers || head >= file_.num_kv_heads) return false;
        return mask_[static_cast<size_t>(layer * file_.num_kv_heads + head)] != 0;
    }
    return false;
  }

  Split split_ = Split::kAllStreaming;
  std::string path_;
  DuoHeadScores file_;
  std::vector<char> mask_;             // kFile: retrieval heads, [layer * heads + head]
  std::set<std::pair<int, int>> streaming_;  // kList

 private:
  int64_t sinks_, recent_;
};

Status DuoPolicy::CheckLayout(int num_layers, int stored_kv_heads) const {
  if (split_ == Split::kFile && (file_.num_layers != num_layers || file_.num_kv_heads != stored_kv_heads)) {
    return Status::InvalidArgument(
        "policy 'duo' parameter 'heads' (" + path_ + "): the split is for " + std::to_string(file_.num_layers) +
        " layers x " + std::to_string(file_.num_kv_heads) + " KV heads (model '" + file_.model +
        "'), but this cache has " + std::to_string(num_layers) + " layers x " + std::to_string(stored_kv_heads) +
        " stored KV heads; calibrate this model with `kvlab calibrate-heads`");
  }
  for (const auto& [l, h] : streaming_) {
    if (l >= num_layers || h >= stored_kv_heads) {
      return Status::InvalidArgument("policy 'duo' parameter 'streaming': head " + std::to_string(l) + "." +
                                     std::to_string(h) + " is outside the cache's " + std::to_string(num_layers) +
                                     " layers x " + std::to_string(stored_kv_heads) + " KV heads");
    }
  }
  return Status::OK();
}

}  // namespace

void RegisterDuoPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "duo";
  info.summary = "DuoAttention: retrieval heads (a calibrated share, from a head-split file) keep everything, "
                 "streaming heads keep sinks + a recent window";
  info.paper = "Xiao et al. 2024, DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming Heads";
  info.concerns = kConcernSelection;
  info.params = {
      {"heads", ParamSpec::Type::kString, "",
       "head-split file written by `kvlab calibrate-heads` (a score per layer and KV head); \"\" with no "
       "'streaming' list: every head streaming", {}},
      {"fraction", ParamSpec::Type::kFloat, "0.5",
       "share of the heads kept as retrieval heads, the highest scores (the paper: 0.5 for GQA, 0.25 for MHA)", {},
       ParamRange::OpenClosed(0, 1)},
      {"sinks", ParamSpec::Type::kInt, "64", "initial slots a streaming head keeps (the paper: 64)", {},
       ParamRange::Closed(0, 1 << 24)},
      {"recent", ParamSpec::Type::kInt, "256", "most recent slots a streaming head keeps (the paper: 256)", {},
       ParamRange::Closed(1, 1 << 24)},
      {"streaming", ParamSpec::Type::kString, "",
       "instead of a file: the streaming heads as LAYER.HEAD+LAYER.HEAD (\"0.1+3.0\"), every other head retrieval", {}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const std::string heads = p.GetString("heads"), list = p.GetString("streaming");
    const double fraction = p.GetFloat("fraction");
    const int64_t sinks = p.GetInt("sinks"), recent = p.GetInt("recent");
    if (!heads.empty() && !list.empty()) {
      return Status::InvalidArgument("policy 'duo': give parameter 'heads' (a split file) or 'streaming' (a list), "
                                     "not both");
    }
    if (heads.empty() && p.Given("fraction")) {
      return Status::InvalidArgument("policy 'duo' parameter 'fraction' picks the retrieval heads of a split file "
                                     "('heads'); without one (" +
                                     std::string(list.empty() ? "every head streaming" : "the 'streaming' list") +
                                     ") it would be unused: give 'heads', or drop 'fraction'");
    }
    std::unique_ptr<DuoPolicy> d(new DuoPolicy(std::move(p), sinks, recent));
    if (!heads.empty()) {
      KVLAB_RETURN_IF_ERROR(ReadDuoHeads(heads, "duo", "heads", &d->file_));
      d->split_ = DuoPolicy::Split::kFile;
      d->path_ = heads;
      d->mask_ = DuoRetrievalMask(d->file_.scores, fraction);
    } else if (!list.empty()) {
      std::vector<std::pair<int, int>> pairs;
      KVLAB_RETURN_IF_ERROR(ParseDuoHeadList(list, "duo", "streaming", &pairs));
      d->split_ = DuoPolicy::Split::kList;
      d->streaming_.insert(pairs.begin(), pairs.end());
    }
    *out = std::move(d);
    return Status::OK();
  };
  // The engine conformance model (2 layers x 2 KV heads): half its heads
  // streaming, so both rules act on a 200-token run.
  info.test_params = {{"streaming", "0.0+1.1"}, {"sinks", "4"}, {"recent", "60"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab
