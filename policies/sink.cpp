// sink: StreamingLLM. Xiao, Tian, Chen, Han, Lewis, "Efficient Streaming
// Language Models with Attention Sinks" (2023), arXiv:2309.17453.
// window: the same paper's failing baseline (a plain sliding window).
//
// Parameters
//   sink:   n_sink (int, 4), window (int, 1020), positions ("cache" | "original", "cache")
//   window: window (int, 1024), positions ("cache" | "original", "cache")
//   The defaults are the paper's 4+1020 and 0+1024 settings. positions="cache"
//   asks core to store keys before RoPE and rotate them by slot index (the
//   paper's positions within the cache); "original" keeps post-RoPE keys.
//
// What it keeps: the first n_sink slots of each stream plus its most recent
// `window` slots (window: only the most recent `window` slots).
#include <string>

#include "policies/registry.h"

namespace kvlab {
namespace {

const char* const kPositionsHelp =
    "\"cache\": keys stored before RoPE and rotated by their slot index at read time (positions within "
    "the cache, as in the paper); \"original\": keys keep the RoPE of their original position";

class SinkWindowPolicy : public KVPolicy {
 public:
  SinkWindowPolicy(const char* name, PolicyParams p, int64_t n_sink, int64_t window, bool cache_positions)
      : KVPolicy(std::move(p)), name_(name), n_sink_(n_sink), window_(window), cache_positions_(cache_positions) {}

  const char* Name() const override { return name_; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool KeysBeforeRope() const override { return cache_positions_; }

  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (n_sink_ < block_size && window_ < block_size - n_sink_) {  // n_sink + window < block_size, overflow-free
      return Status::InvalidArgument(std::string(name_) + ": n_sink + window = " + std::to_string(n_sink_) + " + " +
                                     std::to_string(window_) + " is smaller than one block (block_size " + std::to_string(block_size) +
                                     "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  int64_t KeptSlotsBound(int64_t max_length) const override {
    return max_length - window_ <= n_sink_ ? max_length : n_sink_ + window_;
  }
  int64_t KeptRunsBound() const override { return n_sink_ > 0 ? 2 : 1; }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    if (n - window_ <= n_sink_) return false;  // within budget (written so huge params cannot overflow)
    keep->clear();
    keep->reserve(static_cast<size_t>(n_sink_ + window_));
    for (int64_t i = 0; i < n_sink_; ++i) keep->push_back(i);
    for (int64_t i = n - window_; i < n; ++i) keep->push_back(i);
    return true;
  }

 private:
  const char* name_;
  int64_t n_sink_, window_;
  bool cache_positions_;
};

ParamSpec PositionsSpec() {
  return {"positions", ParamSpec::Type::kString, "cache", kPositionsHelp, {"cache", "original"}};
}

}  // namespace

void RegisterSinkPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "sink";
  info.summary = "attention sinks + sliding window: keeps the first n_sink and the last window slots of each stream";
  info.paper = "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks (StreamingLLM)";
  info.concerns = kConcernSelection;
  info.params = {
      {"n_sink", ParamSpec::Type::kInt, "4", "initial slots kept as attention sinks (the paper: 4)", {},
       ParamRange::AtLeast(0)},
      // A window of zero would keep nothing of the step just computed.
      {"window", ParamSpec::Type::kInt, "1020", "most recent slots kept (the paper: 1020, for a cache of 1024)", {},
       ParamRange::AtLeast(1)},
      PositionsSpec(),
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t n_sink = p.GetInt("n_sink");
    const int64_t window = p.GetInt("window");
    const bool cache_positions = p.GetString("positions") == "cache";
    out->reset(new SinkWindowPolicy("sink", std::move(p), n_sink, window, cache_positions));
    return Status::OK();
  };
  info.test_params = {{"window", "60"}};
  registry->Register(std::move(info));
}

void RegisterWindowPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "window";
  info.summary = "sliding window without sinks (StreamingLLM's failing baseline): keeps the last window slots";
  info.paper = "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks (window baseline)";
  info.concerns = kConcernSelection;
  info.params = {
      {"window", ParamSpec::Type::kInt, "1024", "most recent slots kept (the paper's baseline: 1024)", {},
       ParamRange::AtLeast(1)},
      PositionsSpec(),
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t window = p.GetInt("window");
    const bool cache_positions = p.GetString("positions") == "cache";
    out->reset(new SinkWindowPolicy("window", std::move(p), 0, window, cache_positions));
    return Status::OK();
  };
  info.test_params = {{"window", "64"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab
