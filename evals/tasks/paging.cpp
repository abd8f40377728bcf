// Task paging: vLLM's paging argument, measured on the pools: requests with
// long-tailed lengths, each reserved contiguously for `length` tokens (what a
// max-length allocator holds) or paged in blocks of each size. No model runs;
// the point's model gives only the shape.
#include <algorithm>
#include <cmath>

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
  registry->Register(info);
}

}  // namespace kvlab
