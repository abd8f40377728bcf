// full: the uncompressed baseline. Every token of every head is kept at the
// requested storage dtype on the device. No parameters. Every sweep runs it,
// on the same engine, so every ratio compares like with like.
#include "policies/registry.h"

namespace kvlab {
namespace {

class FullPolicy : public KVPolicy {
 public:
  explicit FullPolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "full"; }
  uint32_t Concerns() const override { return 0; }
};

}  // namespace

void RegisterFullPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "full";
  info.summary = "uncompressed baseline: keeps every token of every head at the cache dtype";
  info.paper = "-";
  info.concerns = 0;
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new FullPolicy(std::move(p)));
    return Status::OK();
  };
  registry->Register(std::move(info));
}

}  // namespace kvlab
