#include "policies/kv_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "policies/registry.h"

namespace kvlab {

const char* ConcernName(Concern c) {
  switch (c) {
    case kConcernHeadSharing: return "head-sharing";
    case kConcernSelection: return "selection";
    case kConcernRepresentation: return "representation";
    case kConcernPlacement: return "placement";
    case kConcernRead: return "read";
  }
  return "?";
}

std::string ConcernList(uint32_t concerns) {
  std::string out;
  for (Concern c : {kConcernHeadSharing, kConcernSelection, kConcernRepresentation, kConcernPlacement, kConcernRead}) {
    if (concerns & c) out += (out.empty() ? "" : "+") + std::string(ConcernName(c));
  }
  return out.empty() ? "none" : out;
}

ParamRange ParamRange::AtLeast(double lo) {
  ParamRange r;
  r.has_min = true;
  r.min = lo;
  return r;
}

ParamRange ParamRange::Above(double lo) {
  ParamRange r = AtLeast(lo);
  r.min_open = true;
  return r;
}

ParamRange ParamRange::Closed(double lo, double hi) {
  ParamRange r = AtLeast(lo);
  r.has_max = true;
  r.max = hi;
  return r;
}

ParamRange ParamRange::OpenClosed(double lo, double hi) {
  ParamRange r = Closed(lo, hi);
  r.min_open = true;
  return r;
}

ParamRange ParamRange::Open(double lo, double hi) {
  ParamRange r = OpenClosed(lo, hi);
  r.max_open = true;
  return r;
}

bool ParamRange::Contains(double v) const {
  if (has_min && (min_open ? !(v > min) : !(v >= min))) return false;
  if (has_max && (max_open ? !(v < max) : !(v <= max))) return false;
  return true;
}

namespace {

// A bound as a person writes it: integers without a decimal point.
std::string BoundText(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

}  // namespace

std::string ParamRange::ToString() const {
  if (has_min && has_max) {
    return std::string("in ") + (min_open ? "(" : "[") + BoundText(min) + ", " + BoundText(max) + (max_open ? ")" : "]");
  }
  if (has_min) return (min_open ? "> " : ">= ") + BoundText(min);
  if (has_max) return (max_open ? "< " : "<= ") + BoundText(max);
  return "";
}

std::string ParamSpec::ValidValues() const {
  if (!choices.empty()) {
    std::string out;
    for (const auto& c : choices) out += (out.empty() ? "" : ", ") + c;
    return "one of " + out;
  }
  if (type == Type::kInt || type == Type::kFloat) return range.ToString();
  return "";
}

// Getters: values were validated against the specs when the params were
// built, so a missing name or unparsable value here is a programming error in
// the policy file (asking for a parameter it did not declare).
int64_t PolicyParams::GetInt(const std::string& name) const { return std::strtoll(values_.at(name).c_str(), nullptr, 10); }
double PolicyParams::GetFloat(const std::string& name) const { return std::strtod(values_.at(name).c_str(), nullptr); }
bool PolicyParams::GetBool(const std::string& name) const { return values_.at(name) == "true"; }
const std::string& PolicyParams::GetString(const std::string& name) const { return values_.at(name); }

std::string PolicyParams::ToString() const {
  std::string out;
  for (const auto& kv : values_) out += (out.empty() ? "" : ",") + kv.first + "=" + kv.second;
  return out;
}

Status PolicyStack::Create(const std::vector<PolicySpec>& specs, PolicyStack* out) {
  if (specs.empty()) return Status::InvalidArgument("policy stack is empty (use \"full\" for the uncompressed baseline)");
  PolicyStack stack;
  for (const PolicySpec& spec : specs) {
    std::unique_ptr<KVPolicy> p;
    KVLAB_RETURN_IF_ERROR(PolicyRegistry::Global().Create(spec, &p));
    for (const auto& q : stack.policies_) {
      const uint32_t clash = q->Concerns() & p->Concerns();
      if (clash != 0) {
        return Status::InvalidArgument(spec.source + ": policies '" + q->Name() + "' and '" + p->Name() +
                                       "' both claim the " + ConcernList(clash) + " concern; a stack takes one each");
      }
    }
    stack.policies_.push_back(std::move(p));
  }
  if (stack.policies_.size() > 1) {
    for (const auto& p : stack.policies_) {
      if (std::string(p->Name()) == "full") {
        return Status::InvalidArgument(specs.front().source +
                                       ": 'full' is the uncompressed baseline and cannot be stacked with other policies");
      }
    }
  }
  *out = std::move(stack);
  return Status::OK();
}

uint32_t PolicyStack::Concerns() const {
  uint32_t c = 0;
  for (const auto& p : policies_) c |= p->Concerns();
  return c;
}

const KVPolicy* PolicyStack::For(Concern c) const {
  for (const auto& p : policies_) {
    if (p->Concerns() & c) return p.get();
  }
  return nullptr;
}

std::string PolicyStack::Describe() const {
  std::string out;
  for (const auto& p : policies_) {
    out += (out.empty() ? "" : "+") + std::string(p->Name());
    const std::string args = p->params().ToString();
    if (!args.empty()) out += "(" + args + ")";
  }
  return out;
}

int PolicyStack::StoredKvHeads(int model_kv_heads) const {
  const KVPolicy* p = For(kConcernHeadSharing);
  return p ? p->StoredKvHeads(model_kv_heads) : model_kv_heads;
}

Status PolicyStack::CheckShape(int model_kv_heads, int head_dim, int block_size) const {
  for (const auto& p : policies_) KVLAB_RETURN_IF_ERROR(p->CheckShape(model_kv_heads, head_dim, block_size));
  const KVPolicy* read = ReadPolicy();
  if (read == nullptr) return Status::OK();
  const std::string who = "policy '" + std::string(read->Name()) + "' (read) ";
  if (KeysBeforeRope()) {
    return Status::InvalidArgument(who + "with '" + For(kConcernSelection)->Name() +
                                   "' storing keys before RoPE (positions=\"cache\"): keys are rotated by their slot "
                                   "in the stream, which a subset of blocks renumbers; use positions=\"original\"");
  }
  if (const KVPolicy* sc = ScoringPolicy()) {
    return Status::InvalidArgument(who + "with '" + sc->Name() + "', which ranks slots by the attention they get: "
                                   "a step that reads a subset of blocks gives the others none, which would bias "
                                   "that statistic; not supported");
  }
  return Status::OK();
}

Status PolicyStack::CheckLayout(int num_layers, int stored_kv_heads) const {
  for (const auto& p : policies_) KVLAB_RETURN_IF_ERROR(p->CheckLayout(num_layers, stored_kv_heads));
  return Status::OK();
}

bool PolicyStack::Placement(PlacementOptions* o) const {
  const KVPolicy* p = For(kConcernPlacement);
  return p != nullptr && p->Placement(o);
}

HeadMerge PolicyStack::MergeMode() const {
  const KVPolicy* p = For(kConcernHeadSharing);
  return p ? p->MergeMode() : HeadMerge::kMean;
}

bool PolicyStack::KeysBeforeRope() const {
  const KVPolicy* p = For(kConcernSelection);
  return p != nullptr && p->KeysBeforeRope();
}

bool PolicyStack::SealedEncoding(int head_dim, int block_size, KvEncoding* enc, int64_t* residual_tokens) const {
  const KVPolicy* p = For(kConcernRepresentation);
  return p != nullptr && p->SealedEncoding(head_dim, block_size, enc, residual_tokens);
}

DType PolicyStack::StorageDType(DType requested) const {
  const KVPolicy* p = For(kConcernRepresentation);
  return p ? p->StorageDType(requested) : requested;
}

bool PolicyStack::SharesPrefixBlocks(std::string* why_not) const {
  std::string why;
  // Selection does not stand in the way: core copies a shared block before
  // a compaction writes it (KVCache::Compact).
  if (const KVPolicy* q = For(kConcernPlacement)) {
    why = "placement policy '" + std::string(q->Name()) + "' moves blocks off the device";
  } else if (const KVPolicy* r = For(kConcernRepresentation); r != nullptr && !r->EncodingDeterministic()) {
    why = "representation policy '" + std::string(r->Name()) + "' does not declare its encoding deterministic";
  }
  if (why_not != nullptr) *why_not = why;
  return why.empty();
}

bool PolicyStack::PrefixCachingByDefault() const {
  return (Concerns() & (kConcernSelection | kConcernRepresentation | kConcernPlacement)) == 0;
}

int64_t PolicyStack::KeptSlotsBound(int64_t max_length, int kv_heads) const {
  const KVPolicy* p = For(kConcernSelection);
  return p ? std::max<int64_t>(0, std::min(max_length, p->KeptSlotsBoundInLayer(max_length, kv_heads))) : max_length;
}

int64_t PolicyStack::ObservationWindow() const {
  const KVPolicy* p = ScoringPolicy();
  return p != nullptr ? p->ObservationWindow() : 0;
}

bool PolicyStack::NeedsKeyNorms() const {
  const KVPolicy* p = For(kConcernSelection);
  return p != nullptr && p->NeedsKeyNorms();
}

bool PolicyStack::NeedsAttentionScores() const { return ScoringPolicy() != nullptr; }

const KVPolicy* PolicyStack::ScoringPolicy() const {
  for (const auto& p : policies_) {
    if (p->NeedsAttentionScores()) return p.get();
  }
  return nullptr;
}

KernelOptions PolicyStack::AttentionKernelOptions() const {
  KernelOptions o;
  for (const auto& p : policies_) o.int8_attention = o.int8_attention || p->AttentionKernelOptions().int8_attention;
  return o;
}

}  // namespace kvlab
