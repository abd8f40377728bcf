// offload: KV offloading to slower memory, as FlexGen (Sheng et al. 2023,
// "FlexGen: High-Throughput Generative Inference of Large Language Models
// with a Single GPU") and H2O's offloading setting do. Placement.
// Parameters: device_budget (bytes resident on the device after each step,
// default 256 MiB), host_budget (bytes in host memory before blocks go to
// disk, default 1 GiB), disk_dir (directory of the disk tier's file, default
// the system temp directory), keep_sinks (default 4), keep_recent (default 256).
// Definition: the device keeps the blocks holding the first keep_sinks
// tokens and the last keep_recent slots, then the blocks a selection policy
// in the stack scores highest (accumulated attention), then the most recent;
// everything else moves to host, then disk, and is brought back before it is
// read, so outputs are exactly those of `full`.
#include <algorithm>

#include "policies/registry.h"

namespace kvlab {
namespace {

class OffloadPolicy : public KVPolicy {
 public:
  explicit OffloadPolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "offload"; }
  uint32_t Concerns() const override { return kConcernPlacement; }

  bool Placement(PlacementOptions* o) const override {
    o->device_budget_bytes = params().GetInt("device_budget");
    o->host_budget_bytes = params().GetInt("host_budget");
    o->disk_path = params().GetString("disk_dir");
    return true;
  }

  double BlockPriority(const StreamState& s, int64_t first_slot, int64_t num_slots) const override {
    const int64_t keep_sinks = params().GetInt("keep_sinks"), keep_recent = params().GetInt("keep_recent");
    const int64_t end = std::min(first_slot + num_slots, s.num_tokens);
    if (end > s.num_tokens - keep_recent) return 2e30 + static_cast<double>(first_slot);
    for (int64_t i = first_slot; i < end; ++i) {
      if (s.positions != nullptr && s.positions[i] < keep_sinks) return 1e30;
    }
    double score = 0;
    if (s.score != nullptr) {
      for (int64_t i = first_slot; i < end; ++i) score += s.score[i];
    }
    // Without scores, recency decides: older blocks leave first.
    return score + 1e-9 * static_cast<double>(first_slot);
  }
};

}  // namespace

void RegisterOffloadPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "offload";
  info.summary = "device keeps sinks, the recent window and the highest-scored blocks within a byte budget; the rest "
                 "lives in host memory, then on disk, and is brought back before it is read (lossless)";
  info.paper = "Sheng et al. 2023, FlexGen; Zhang et al. 2023, H2O (offloading setting)";
  info.concerns = kConcernPlacement;
  info.params = {
      {"device_budget", ParamSpec::Type::kInt, "268435456", "KV bytes resident on the device after each step", {},
       ParamRange::AtLeast(0)},
      {"host_budget", ParamSpec::Type::kInt, "1073741824", "KV bytes in host memory before blocks go to disk", {},
       ParamRange::AtLeast(0)},
      {"disk_dir", ParamSpec::Type::kString, "", "directory of the disk tier's (unlinked) file; empty: system temp", {}},
      {"keep_sinks", ParamSpec::Type::kInt, "4", "blocks holding the first this-many tokens stay on the device", {},
       ParamRange::AtLeast(0)},
      {"keep_recent", ParamSpec::Type::kInt, "256", "blocks holding the last this-many slots stay on the device", {},
       ParamRange::AtLeast(0)},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new OffloadPolicy(std::move(p)));
    return Status::OK();
  };
  info.test_params = {{"device_budget", "65536"}, {"host_budget", "65536"}, {"keep_recent", "32"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab
