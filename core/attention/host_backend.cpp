// The CPU attention backends (core/attention/backend.h): the cache's
// bytes are host memory, so a layer's K/V are written by AppendKV and read by
// the CPU kernels straight from the page table's blocks. The optimised
// kernels' split is planned once per step over every layer's longest streams
// (FlashInfer's plan/run split) and run by each layer. Offloaded blocks are
// loaded into their staging blocks layer by layer: layer 0's before it runs,
// and each layer starts loading the next one's on another thread while it
// computes. With a read policy (Quest) each layer's decode streams read only
// the blocks it picks, sealed KIVI groups included (core/cache/read_selection.h).
// Soft-capped layers (LayerAttention::logit_softcap, Gemma 2) run on the
// reference kernel, the one kernel that computes the cap.
#include <ATen/ATen.h>

#include <algorithm>
#include <future>

#include "core/attention/backend.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_reference.h"

namespace kvlab {
namespace {

// The CPU kernels' split for a step, planned once over every layer's longest
// streams and run by each layer.
void PlanCpuStep(const PageTable& pt, const std::vector<int32_t>& qo_indptr, const CpuDecodeShape& shape,
                 CpuDecodePlan* plan) {
  std::vector<int64_t> longest(static_cast<size_t>(shape.num_seqs) * shape.num_kv_heads, 0);
  for (int li = 0; li < pt.num_layers(); ++li) {
    const PagedKV kv = pt.Layer(li);
    const EncodedKV* enc = pt.Encoded(li);
    for (int s = 0; s < static_cast<int>(longest.size()); ++s) {
      const int64_t len = kv.StreamLength(s) + (enc == nullptr ? 0 : enc->StreamTokens(s));
      longest[static_cast<size_t>(s)] = std::max(longest[static_cast<size_t>(s)], len);
    }
  }
  PlanCpuDecode(shape, qo_indptr.data(), longest.data(), nullptr, 0, plan);
}

class HostAttention : public AttentionBackend {
 public:
  HostAttention(bool reference, const KernelOptions& kernels, int num_qo_heads)
      : reference_(reference), kernels_(kernels), num_qo_heads_(num_qo_heads) {}
  ~HostAttention() override {
    if (next_load_.valid()) next_load_.wait();
  }

  const char* Name() const override { return reference_ ? "reference" : "cpu"; }
  Status Attach(KVCache* cache) override {
    cache_ = cache;
    return Status::OK();
  }

  Status BeginStep(StepView* view) override {
    if (cache_ == nullptr) return Status::Internal("attention backend: BeginStep before Attach");
    step_ = view;
    status_ = Status::OK();
    if (!reference_) {
      const CacheShape& sh = cache_->shape();
      PlanCpuStep(view->page_table, view->qo_indptr,
                  CpuDecodeShape{view->page_table.num_seqs(), num_qo_heads_, sh.num_kv_heads, sh.head_dim}, &plan_);
    }
    return Status::OK();
  }

  void Append(int layer, const at::Tensor& k, const at::Tensor& v) override {
    if (!step_->staging.empty()) LoadStaged(layer);
    const std::vector<int32_t>& qo = step_->qo_indptr;
    const PagedKV kv = step_->page_table.Layer(layer);
    const int num_seqs = static_cast<int>(qo.size()) - 1;
    AppendKV(kv, qo.data(), num_seqs, kv.num_streams / num_seqs, k.data_ptr<float>(), v.data_ptr<float>());
  }

  at::Tensor Attend(const LayerAttention& a, const at::Tensor& q) override {
    const std::vector<int32_t>& qo = step_->qo_indptr;
    const PageTable& pt = step_->page_table;
    const PagedKV kv = pt.Layer(a.layer);
    at::Tensor o = at::empty_like(q);
    AttentionParams p;
    p.num_seqs = static_cast<int>(qo.size()) - 1;
    p.num_qo_heads = static_cast<int>(q.size(1));
    p.num_kv_heads = kv.num_streams / p.num_seqs;
    p.head_dim = static_cast<int>(q.size(2));
    p.sm_scale = a.sm_scale;
    p.qo_indptr = qo.data();
    p.q = q.data_ptr<float>();
    p.o = o.data_ptr<float>();
    p.rope_inv_freq = a.rope_inv_freq;
    p.first_visible = pt.FirstVisible(a.layer);
    if (step_->wants_slot_attention) {
      SlotAttention& sa = step_->slot_attention;
      p.slot_attn = sa.values.data();
      p.slot_attn_offsets = sa.offsets.data() + static_cast<size_t>(a.layer) * kv.num_streams;
      p.slot_attn_last_queries = static_cast<int>(sa.last_queries);
    }
    p.int8_attention = kernels_.int8_attention;
    if (a.logit_softcap > 0) {
      // Soft-capping is the reference kernel's alone (the optimised kernels
      // do not compute it); the engine refuses it with a sealed encoding and
      // with a read policy, so every plain block is read.
      p.logit_softcap = a.logit_softcap;
      PagedAttentionReference(kv, p);
      return o;
    }
    // The read policy's blocks (all of them without one): a page table of its own.
    SelectLayerReads(pt, a.layer, step_->read_policy, p, &reads_);
    step_->reads.Add(reads_.stats);
    if (reads_.subset) {
      const PagedKV view = reads_.View(kv);
      if (const EncodedKV* enc = pt.Encoded(a.layer)) {  // the groups read, then the plain blocks read
        const EncodedKV enc_view = reads_.EncodedView(*enc);
        if (reference_) {
          PagedAttentionEncodedReference(view, enc_view, p);
        } else {
          PlanCpuDecodeLayer(view, &enc_view, p, &layer_plan_);
          PagedAttentionEncodedCpu(view, enc_view, p, layer_plan_);
        }
        return o;
      }
      if (reference_) {
        PagedAttentionReference(view, p);
      } else {
        PlanCpuDecodeLayer(view, nullptr, p, &layer_plan_);  // split for the lengths read, not the cache's
        PagedAttentionCpu(view, p, layer_plan_);
      }
      return o;
    }
    if (const EncodedKV* enc = pt.Encoded(a.layer)) {
      if (reference_) {
        PagedAttentionEncodedReference(kv, *enc, p);
      } else {
        PagedAttentionEncodedCpu(kv, *enc, p, plan_);
      }
    } else if (reference_) {
      PagedAttentionReference(kv, p);
    } else {
      PagedAttentionCpu(kv, p, plan_);
    }
    return o;
  }

  Status EndStep() override {
    if (next_load_.valid()) Keep(next_load_.get());
    step_ = nullptr;
    return status_;
  }

 private:
  void Keep(const Status& s) {
    if (!s.ok() && status_.ok()) status_ = s;
  }
  // Layer `layer`'s offloaded blocks are in place when this returns.
  void LoadStaged(int layer) {
    const StepView* view = step_;
    Keep(layer == 0 ? view->LoadStaged(0) : next_load_.get());
    if (layer + 1 < view->page_table.num_layers()) {
      next_load_ = std::async(std::launch::async, [view, layer] { return view->LoadStaged(layer + 1); });
    }
  }

  const bool reference_;
  const KernelOptions kernels_;
  const int num_qo_heads_;
  CpuDecodePlan plan_;  // the step's (optimised kernels only), reused between steps
  CpuDecodePlan layer_plan_;  // a layer's, when the read policy picks fewer blocks
  ReadSelection reads_;       // the layer's blocks read, reused between layers
  KVCache* cache_ = nullptr;
  StepView* step_ = nullptr;  // between BeginStep and EndStep
  Status status_;
  std::future<Status> next_load_;
};

}  // namespace

std::unique_ptr<AttentionBackend> NewHostAttention(bool reference, const KernelOptions& kernels, int num_qo_heads) {
  return std::make_unique<HostAttention>(reference, kernels, num_qo_heads);
}

}  // namespace kvlab
