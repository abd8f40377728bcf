// Helpers the subcommands share: policy arguments, model resolution, errors
// and the engine's memory report.
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "core/base/untrusted.h"
#include "core/engine/engine.h"
#include "core/model/memory_calc.h"
#include "evals/cli/cli.h"
#include "policies/registry.h"

namespace kvlab {

int Fail(const Status& s) {
  // Loaders quote file bytes already; this keeps any message one line of UTF-8 for tools that read it.
  std::fprintf(stderr, "kvlab: error: %s\n", QuoteBytes(s.ToString(), SIZE_MAX).c_str());
  return 1;
}

Status ParsePolicyArgs(const std::vector<std::string>& args, std::vector<PolicySpec>* out) {
  out->clear();
  for (const std::string& a : args) {
    PolicySpec spec;
    KVLAB_RETURN_IF_ERROR(ParsePolicyString(a, "--policy", &spec));
    out->push_back(std::move(spec));
  }
  if (out->empty()) out->push_back(PolicySpec{"full", {}, "--policy"});
  return Status::OK();
}

void PrintEngineMemory(const Engine& engine, const MemoryStats& m, int64_t tokens_per_seq_total) {
  const CacheShape& s = engine.cache().shape();
  std::printf("KV cache (%s, block_size %d, %s storage):\n", engine.policies().Describe().c_str(), s.block_size,
              DTypeName(s.dtype));
  const KVCache& c = engine.cache();
  // Per pool, from m (taken when the figures were: the end of a generation, before its sequences went).
  auto pool_line = [](const BlockPool& p, int64_t used) {
    return p.name() + " " + WithCommas(used) + " blocks of " + WithCommas(p.block_bytes()) + " B";
  };
  std::string pools = pool_line(c.pool(), m.plain_blocks_in_use);
  if (c.encoded_pool() != nullptr) pools += ", " + pool_line(*c.encoded_pool(), m.encoded_blocks_in_use);
  std::printf("  in use    %s B: %s\n", WithCommas(m.bytes_in_use).c_str(), pools.c_str());
  std::printf("  peak      %s B\n", WithCommas(m.peak_bytes_in_use).c_str());
  if (c.run_blocks() > 1) {
    std::printf("  runs      %s B reserved ahead (peak %s B): runs of %d blocks for decode growth, not KV, free "
                "for any allocation\n",
                WithCommas(m.run_reserve_bytes).c_str(), WithCommas(m.peak_run_reserve_bytes).c_str(), c.run_blocks());
  }
  const PoolReservation& r = engine.reservation();
  std::printf("  reserved  %s B (pool capacity) = %.3fx the full cache's %s B for this run\n",
              WithCommas(m.bytes_reserved).c_str(),
              r.full_bytes > 0 ? static_cast<double>(m.bytes_reserved) / static_cast<double>(r.full_bytes) : 0.0,
              WithCommas(r.full_bytes).c_str());
  for (size_t a = 0, b = 0; a < r.why.size(); a = b + 1) {
    b = r.why.find('\n', a);
    if (b == std::string::npos) b = r.why.size();
    std::printf("            %s\n", r.why.substr(a, b - a).c_str());
  }
  if (engine.step_tokens() > 0) {
    std::printf("  steps     at most %lld tokens a step: longer chunks run as several, the policies acting after each\n",
                static_cast<long long>(engine.step_tokens()));
  }
  if (m.host_bytes + m.disk_bytes > 0) {
    std::printf("  tiers     device %s B (peak %s B), host %s B, disk %s B\n", WithCommas(m.device_bytes).c_str(),
                WithCommas(m.peak_device_bytes).c_str(), WithCommas(m.host_bytes).c_str(),
                WithCommas(m.disk_bytes).c_str());
  }
  const int64_t formula = 2LL * s.num_layers * engine.model_config().num_key_value_heads * s.head_dim *
                          DTypeBytes(s.dtype) * tokens_per_seq_total;
  std::printf("  uncompressed 2 x L x H_kv x d_h x S x b = %s B for the S = %lld tokens seen; held/uncompressed = %.3f\n",
              WithCommas(formula).c_str(), static_cast<long long>(tokens_per_seq_total),
              formula > 0 ? static_cast<double>(m.bytes_in_use) / static_cast<double>(formula) : 0.0);
}

}  // namespace kvlab
