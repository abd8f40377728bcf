// Task paging: vLLM's paging argument, measured on the pools: requests with
// long-tailed lengths, each reserved contiguously for `length` tokens (what a
// max-length allocator holds) or paged in blocks of each size. No model runs;
// the point's model gives only the shape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/cache/kv_cache.h"
#include "datasets/tasks/tasks.h"
#include "evals/tasks/task.h"

namespace kvlab {

using json = nlohmann::ordered_json;

namespace {

Status RunPaging(TaskContext* ctx, const SweepPoint& p, const SweepTaskOptions& o, json* m) {
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(PointModelConfig(p, &mc));
  SplitMix rng(p.seed * 1000003ull + 17);
  const double median = static_cast<double>(o.Int("median") > 0 ? o.Int("median") : std::max<int64_t>(16, p.length / 8));
  std::vector<int64_t> lens;
  int64_t tokens = 0;
  for (int64_t i = 0; i < o.Int("requests"); ++i) {
    const double u1 = std::max(1e-12, rng.Uniform()), u2 = rng.Uniform();
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    const int64_t len = std::clamp<int64_t>(static_cast<int64_t>(std::llround(median * std::exp(o.Float("sigma") * z))), 16, p.length);
    lens.push_back(len);
    tokens += len;
  }
  const int bytes = DTypeBytes(ctx->config().kv_dtype);
  const int64_t per_token = mc.KVBytesPerToken(bytes);
  (*m)["requests"] = o.Int("requests");
  (*m)["tokens"] = tokens;
  (*m)["mean_length"] = static_cast<double>(tokens) / static_cast<double>(o.Int("requests"));
  (*m)["kv_bytes_tokens"] = tokens * per_token;
  (*m)["contiguous_reserved_bytes"] = o.Int("requests") * p.length * per_token;
  (*m)["contiguous_utilization"] = static_cast<double>(tokens) / static_cast<double>(o.Int("requests") * p.length);
  json paged = json::object(), held = json::object();
  for (int64_t bs : o.Ints("block_sizes")) {
    CacheShape shape;
    shape.num_layers = static_cast<int>(mc.num_hidden_layers);
    shape.num_kv_heads = static_cast<int>(mc.num_key_value_heads);
    shape.head_dim = static_cast<int>(mc.head_dim);
    shape.block_size = static_cast<int>(bs);
    shape.dtype = ctx->config().kv_dtype;
    int64_t blocks = 0;
    for (int64_t len : lens) blocks += (len + bs - 1) / bs;
    std::unique_ptr<KVCache> cache;
    KVLAB_RETURN_IF_ERROR(KVCache::Create(shape, blocks * shape.StreamsPerSequence(), /*with_storage=*/false, &cache));
    for (size_t i = 0; i < lens.size(); ++i) {
      KVLAB_RETURN_IF_ERROR(cache->AddSequence(static_cast<int64_t>(i)));
      std::vector<int32_t> pos(static_cast<size_t>(lens[i]));
      for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int32_t>(t);
      KVLAB_RETURN_IF_ERROR(cache->Reserve(static_cast<int64_t>(i), lens[i], pos.data()));
    }
    const int64_t in_use = cache->BytesInUse();
    held[std::to_string(bs)] = in_use;
    paged[std::to_string(bs)] = static_cast<double>(tokens * per_token) / static_cast<double>(in_use);
  }
  (*m)["paged_bytes_by_block_size"] = held;
  (*m)["paged_utilization_by_block_size"] = paged;
  return Status::OK();
}

// vLLM's paging in summary.md: per length, the share of reserved KV bytes
// that hold real tokens, contiguous and paged by block size (means over seeds).
void WritePagingTable(const std::vector<json>& recs, const std::string& model, std::string* out) {
  auto ok = [&model](const json& r) {
    return r.value("model", "") == model && r.value("task", "") == "paging" && r.value("status", "") == "ok" &&
           r.contains("metrics") && r["metrics"].is_object();
  };
  auto num = [](const json& m, const std::string& key) {
    const auto it = m.is_object() ? m.find(key) : m.end();
    return it != m.end() && it->is_number() ? it->get<double>() : NAN;
  };
  struct Mean {
    double sum = 0;
    int64_t n = 0;
    void Add(double v) {
      if (std::isfinite(v)) sum += v, ++n;
    }
    std::string Str(const char* f) const {
      if (n == 0) return "–";
      char buf[64];
      std::snprintf(buf, sizeof(buf), f, sum / static_cast<double>(n));
      return buf;
    }
  };
  std::vector<std::string> sizes;
  std::vector<int64_t> lengths;
  for (const json& r : recs) {
    if (r.value("model", "") == model && r.value("task", "") == "paging") {
      const int64_t L = r.value("length", 0);
      if (std::find(lengths.begin(), lengths.end(), L) == lengths.end()) lengths.push_back(L);
    }
    if (!ok(r)) continue;
    const json& paged = r["metrics"].value("paged_utilization_by_block_size", json());
    if (!paged.is_object()) continue;
    for (auto& kv : paged.items()) {
      if (std::find(sizes.begin(), sizes.end(), kv.key()) == sizes.end()) sizes.push_back(kv.key());
    }
  }
  std::sort(lengths.begin(), lengths.end());
  std::sort(sizes.begin(), sizes.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  std::ostringstream md;
  md << "### paging: share of reserved KV memory holding tokens\n\n| max length | requests | mean length | contiguous |";
  for (const auto& b : sizes) md << " paged, block " << b << " |";
  md << "\n|---|---|---|---|";
  for (size_t i = 0; i < sizes.size(); ++i) md << "---|";
  md << "\n";
  for (int64_t L : lengths) {
    Mean contiguous, mean_len, reqs;
    std::map<std::string, Mean> paged;
    for (const json& r : recs) {
      if (!ok(r) || r.value("length", 0) != L) continue;
      const json& m = r["metrics"];
      contiguous.Add(num(m, "contiguous_utilization"));
      mean_len.Add(num(m, "mean_length"));
      reqs.Add(num(m, "requests"));
      for (const auto& b : sizes) paged[b].Add(num(m.value("paged_utilization_by_block_size", json()), b));
    }
    md << "| " << L << " | " << reqs.Str("%.0f") << " | " << mean_len.Str("%.0f") << " | " << contiguous.Str("%.3f") << " |";
    for (const auto& b : sizes) md << " " << paged[b].Str("%.3f") << " |";
    md << "\n";
  }
  md << "\n(means over seeds)\n\n";
  *out += md.str();
}

}  // namespace

void RegisterPagingTasks(SweepTaskRegistry* registry) {
  SweepTaskInfo info;
  info.name = "paging";
  info.summary = "share of reserved KV memory holding tokens, contiguous against paged pools of each block size";
  info.options = {IntOption("requests", 256, 1, kMaxCount, "requests held in the pools"),
                  IntOption("median", 0, 0, kMaxContextTokens, "median request length (0: length / 8)"),
                  // Lengths are median * exp(sigma * z): past 4 they overflow before they are clipped.
                  FloatOption("sigma", 1.0, 0, 4, "lognormal spread of the request lengths"),
                  IntListOption("block_sizes", {1, 16, 64, 256}, 1, kMaxBlockSize, "block sizes of the pools")};
  info.key_options = [](const SweepTaskOptions& o, json* k) {
    (*k)["requests"] = o.Int("requests");
    (*k)["median"] = o.Int("median");
    (*k)["sigma"] = o.Float("sigma");
    (*k)["block_sizes"] = o.Ints("block_sizes");
  };
  info.estimate = [](const TaskCost&, const SweepPoint&, const SweepTaskOptions& o) {
    return 0.05 * static_cast<double>(o.Int("requests")) * static_cast<double>(o.Ints("block_sizes").size()) / 256.0;
  };
  info.run = RunPaging;
  info.section = WritePagingTable;
  registry->Register(info);
}

}  // namespace kvlab
