// serve-bench's TOML config: every key checked, every error at file:line:column.
#include "core/serve/serve_bench.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/engine/run_config.h"

namespace kvlab {
namespace {

using KeyHandler = std::function<Status(const std::string& key, const toml::node& n, const std::string& where)>;

// Calls `handle` for every key of `t`; a key not in `valid` is an error that
// lists them.
Status ForEachKey(const toml::table& t, const std::string& path, const std::string& context,
                  const std::vector<std::string>& valid, const KeyHandler& handle) {
  for (const auto& kv : t) {
    const std::string key(kv.first.str());
    const std::string where = TomlWhere(path, kv.second.source());
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      std::string list;
      for (const std::string& v : valid) list += (list.empty() ? "" : ", ") + v;
      return Status::InvalidArgument(where + ": unknown key '" + key + "'" + context + "; valid keys: " + list);
    }
    KVLAB_RETURN_IF_ERROR(handle(key, kv.second, where));
  }
  return Status::OK();
}

Status WantInt(const toml::node& n, const std::string& where, const std::string& key, int64_t* dst) {
  if (!n.is_integer()) return Status::InvalidArgument(where + ": '" + key + "' must be an integer");
  *dst = n.as_integer()->get();
  return Status::OK();
}

Status WantNonNegInt(const toml::node& n, const std::string& where, const std::string& key, int64_t* dst) {
  KVLAB_RETURN_IF_ERROR(WantInt(n, where, key, dst));
  if (*dst < 0) return Status::InvalidArgument(where + ": '" + key + "' must be >= 0, got " + std::to_string(*dst));
  return Status::OK();
}

Status WantFloat(const toml::node& n, const std::string& where, const std::string& key, double* dst) {
  if (!n.is_integer() && !n.is_floating_point()) return Status::InvalidArgument(where + ": '" + key + "' must be a number");
  *dst = n.value<double>().value_or(0.0);
  return Status::OK();
}

Status WantString(const toml::node& n, const std::string& where, const std::string& key, std::string* dst) {
  if (!n.is_string()) return Status::InvalidArgument(where + ": '" + key + "' must be a string");
  *dst = n.as_string()->get();
  return Status::OK();
}

Status WantBool(const toml::node& n, const std::string& where, const std::string& key, bool* dst) {
  if (!n.is_boolean()) return Status::InvalidArgument(where + ": '" + key + "' must be true or false");
  *dst = n.as_boolean()->get();
  return Status::OK();
}

Status ParseDistribution(const toml::node& n, const std::string& path, const std::string& where, const std::string& key,
                         Distribution* out) {
  if (n.is_integer() || n.is_floating_point()) {
    *out = Distribution::Fixed(n.value<double>().value_or(0.0));
    return out->Validate(where + ": '" + key + "'");
  }
  const toml::table* t = n.as_table();
  if (t == nullptr) {
    return Status::InvalidArgument(where + ": '" + key + "' must be a number or a table such as "
                                   "{dist = \"lognormal\", median = 512, sigma = 1.0, max = 8192}");
  }
  const toml::node* dist = t->get("dist");
  std::string kind;
  if (dist == nullptr || !dist->is_string() || !ParseDistributionKind(kind = dist->as_string()->get(), &out->kind)) {
    return Status::InvalidArgument(where + ": '" + key + "' needs dist = \"fixed\", \"uniform\", \"lognormal\", " +
                                   "\"pareto\" or \"exponential\"" + (kind.empty() ? "" : ", got '" + kind + "'"));
  }
  std::vector<std::string> valid = {"dist"};
  switch (out->kind) {
    case Distribution::Kind::kFixed: valid.insert(valid.end(), {"value"}); break;
    case Distribution::Kind::kUniform: valid.insert(valid.end(), {"min", "max"}); break;
    case Distribution::Kind::kLogNormal: valid.insert(valid.end(), {"median", "sigma", "min", "max"}); break;
    case Distribution::Kind::kPareto: valid.insert(valid.end(), {"alpha", "scale", "min", "max"}); break;
    case Distribution::Kind::kExponential: valid.insert(valid.end(), {"mean", "min", "max"}); break;
  }
  KVLAB_RETURN_IF_ERROR(ForEachKey(*t, path, " in " + std::string(DistributionKindName(out->kind)) + " '" + key + "'",
                                   valid, [&](const std::string& k, const toml::node& v, const std::string& w) -> Status {
    if (k == "dist") return Status::OK();
    double* dst = k == "value" ? &out->value : k == "min" ? &out->min : k == "max" ? &out->max
                : k == "median" ? &out->median : k == "sigma" ? &out->sigma : k == "alpha" ? &out->alpha
                : k == "scale" ? &out->scale : &out->mean;
    return WantFloat(v, w, k, dst);
  }));
  return out->Validate(where + ": '" + key + "'");
}

Status ParseUserClass(const toml::table& t, const std::string& path, UserClass* uc) {
  const std::vector<std::string> valid = {"name",         "count",         "start",       "arrival_rate", "turns",
                                          "user_tokens",  "output_tokens", "think_steps", "system_tokens"};
  return ForEachKey(t, path, " in [[workload.users]]", valid,
                    [&](const std::string& k, const toml::node& v, const std::string& w) -> Status {
    if (k == "name") return WantString(v, w, k, &uc->name);
    if (k == "count") return WantNonNegInt(v, w, k, &uc->count);
    if (k == "system_tokens") return WantNonNegInt(v, w, k, &uc->system_tokens);
    if (k == "start" || k == "arrival_rate") {
      double* dst = k == "start" ? &uc->start : &uc->arrival_rate;
      KVLAB_RETURN_IF_ERROR(WantFloat(v, w, k, dst));
      if (!(*dst >= 0)) return Status::InvalidArgument(w + ": '" + k + "' must be >= 0");
      return Status::OK();
    }
    Distribution* d = k == "turns" ? &uc->turns : k == "user_tokens" ? &uc->user_tokens
                    : k == "output_tokens" ? &uc->output_tokens : &uc->think_steps;
    return ParseDistribution(v, path, w, k, d);
  });
}

Status ParseWorkload(const toml::node& n, const std::string& path, const std::string& where, WorkloadSpec* out) {
  const toml::table* t = n.as_table();
  if (t == nullptr) return Status::InvalidArgument(where + ": 'workload' must be a table");
  KVLAB_RETURN_IF_ERROR(ForEachKey(*t, path, " in [workload]", {"seed", "users"},
                                   [&](const std::string& k, const toml::node& v, const std::string& w) -> Status {
    if (k == "seed") {
      int64_t seed = 0;
      KVLAB_RETURN_IF_ERROR(WantNonNegInt(v, w, k, &seed));
      out->seed = static_cast<uint64_t>(seed);
      return Status::OK();
    }
    const toml::array* arr = v.as_array();
    if (arr == nullptr) return Status::InvalidArgument(w + ": 'users' must be an array of tables ([[workload.users]])");
    for (const toml::node& el : *arr) {
      const toml::table* ut = el.as_table();
      if (ut == nullptr) return Status::InvalidArgument(TomlWhere(path, el.source()) + ": each users entry must be a table");
      UserClass uc;
      uc.name = "users" + std::to_string(out->classes.size());
      KVLAB_RETURN_IF_ERROR(ParseUserClass(*ut, path, &uc));
      out->classes.push_back(std::move(uc));
    }
    return Status::OK();
  }));
  if (out->classes.empty()) return Status::InvalidArgument(where + ": [workload] needs at least one [[workload.users]] table");
  return Status::OK();
}


}  // namespace

Status ParseServeBenchConfig(const std::string& text, const std::string& path, ServeBenchConfig* out,
                             const std::vector<std::string>& sets) {
  toml::table root;
  KVLAB_RETURN_IF_ERROR(ParseTomlText(text, path, &root));
  for (const std::string& s : sets) KVLAB_RETURN_IF_ERROR(ApplyTomlOverride(s, &root));
  ServeBenchConfig cfg;
  cfg.path = path;
  cfg.sets = sets;
  cfg.engine.model = "llama-3.1-70b";
  cfg.scheduler.max_num_seqs = 64;
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  double pool_gb = 0, plain_pool_gb = 0;
  bool have_workload = false;
  std::string prefix_caching_where;
  const std::vector<std::string> valid = {
      "model",      "model_free",  "kv_dtype",     "block_size",    "pool_gb",    "pool_blocks",
      "plain_pool_gb", "encoded_pool_blocks", "max_num_batched_tokens", "max_num_seqs", "max_prefill_chunk",
      "max_context", "watermark",  "max_steps",    "weight_seed",   "attention",  "threads",
      "prefix_caching", "split_request_tokens", "policy",  "workload"};
  KVLAB_RETURN_IF_ERROR(ForEachKey(root, path, "", valid,
                                   [&](const std::string& k, const toml::node& n, const std::string& w) -> Status {
    int64_t iv = 0;
    std::string sv;
    if (k == "model") {
      KVLAB_RETURN_IF_ERROR(WantString(n, w, k, &cfg.engine.model));
      ModelConfig preset;
      if (!PresetConfig(cfg.engine.model, &preset).ok() && !cfg.engine.model.empty() && cfg.engine.model[0] != '/') {
        cfg.engine.model = dir + "/" + cfg.engine.model;
      }
      return Status::OK();
    }
    if (k == "model_free") return WantBool(n, w, k, &cfg.model_free);
    if (k == "prefix_caching") {
      bool on = false;
      KVLAB_RETURN_IF_ERROR(WantBool(n, w, k, &on));
      cfg.pool.prefix_caching = on ? PrefixCachingMode::kOn : PrefixCachingMode::kOff;
      prefix_caching_where = w;
      return Status::OK();
    }
    if (k == "kv_dtype") {
      KVLAB_RETURN_IF_ERROR(WantString(n, w, k, &sv));
      if (!ParseDType(sv, &cfg.engine.kv_dtype)) {
        return Status::InvalidArgument(w + ": 'kv_dtype' must be f32, f16 or bf16, got '" + sv +
                                       "' (8-bit storage is the quant policy: [[policy]] name = \"quant\")");
      }
      return Status::OK();
    }
    if (k == "block_size") {
      KVLAB_RETURN_IF_ERROR(WantInt(n, w, k, &iv));
      if (iv <= 0 || iv > 4096) return Status::InvalidArgument(w + ": 'block_size' must be in [1, 4096]");
      cfg.engine.block_size = static_cast<int>(iv);
      return Status::OK();
    }
    if (k == "pool_gb" || k == "plain_pool_gb") {
      double* dst = k == "pool_gb" ? &pool_gb : &plain_pool_gb;
      KVLAB_RETURN_IF_ERROR(WantFloat(n, w, k, dst));
      // Bytes = GB x 1e9 as a 64-bit count: up to 1e9 GB (an exabyte), finite.
      if (!(std::isfinite(*dst) && *dst > 0 && *dst <= 1e9)) {
        std::string got;
        TomlScalarText(n, &got);
        return Status::InvalidArgument(w + ": '" + k + "' must be a number of GB in (0, 1e9], got " + got);
      }
      return Status::OK();
    }
    if (k == "pool_blocks") return WantNonNegInt(n, w, k, &cfg.pool.pool_blocks);
    if (k == "encoded_pool_blocks") return WantNonNegInt(n, w, k, &cfg.pool.encoded_pool_blocks);
    if (k == "split_request_tokens") return WantNonNegInt(n, w, k, &cfg.pool.request_tokens);
    if (k == "max_num_batched_tokens") return WantNonNegInt(n, w, k, &cfg.scheduler.max_num_batched_tokens);
    if (k == "max_num_seqs") return WantNonNegInt(n, w, k, &cfg.scheduler.max_num_seqs);
    if (k == "max_prefill_chunk") return WantNonNegInt(n, w, k, &cfg.scheduler.max_prefill_chunk);
    if (k == "max_context") return WantNonNegInt(n, w, k, &cfg.max_context);
    if (k == "max_steps") return WantNonNegInt(n, w, k, &cfg.max_steps);
    if (k == "watermark") return WantFloat(n, w, k, &cfg.scheduler.watermark);
    if (k == "weight_seed") {
      KVLAB_RETURN_IF_ERROR(WantNonNegInt(n, w, k, &iv));
      cfg.engine.weight_seed = static_cast<uint64_t>(iv);
      return Status::OK();
    }
    if (k == "attention") return WantString(n, w, k, &cfg.engine.attention);
    if (k == "threads") {
      KVLAB_RETURN_IF_ERROR(WantNonNegInt(n, w, k, &iv));
      cfg.engine.num_threads = static_cast<int>(iv);
      return Status::OK();
    }
    if (k == "policy") return PolicySpecsFromToml(n, path, &cfg.policies);
    have_workload = true;
    return ParseWorkload(n, path, w, &cfg.workload);
  }));
  const std::string where = path + ": ";
  if (!have_workload) return Status::InvalidArgument(where + "missing [workload] with at least one [[workload.users]]");
  if ((pool_gb > 0) == (cfg.pool.pool_blocks > 0)) {
    return Status::InvalidArgument(where + "give the KV pool's size as exactly one of pool_gb and pool_blocks");
  }
  if (plain_pool_gb > 0 && pool_gb <= 0) return Status::InvalidArgument(where + "plain_pool_gb needs pool_gb");
  if (cfg.pool.encoded_pool_blocks > 0 && cfg.pool.pool_blocks <= 0) {
    return Status::InvalidArgument(where + "encoded_pool_blocks needs pool_blocks");
  }
  cfg.pool.pool_bytes = std::llround(pool_gb * 1e9);
  cfg.pool.plain_pool_bytes = std::llround(plain_pool_gb * 1e9);
  cfg.pool.max_num_batched_tokens = cfg.scheduler.max_num_batched_tokens;
  cfg.pool.max_num_seqs = cfg.scheduler.max_num_seqs;
  Status st = cfg.scheduler.Validate();
  if (!st.ok()) return Status::InvalidArgument(where + st.message());
  if (cfg.max_steps <= 0) return Status::InvalidArgument(where + "max_steps must be positive");
  if (cfg.policies.empty()) cfg.policies.push_back(PolicySpec{"full", {}, path});
  if (cfg.pool.prefix_caching == PrefixCachingMode::kOn) {
    // Caught here, with the key's place, rather than when the pools are built.
    PolicyStack stack;
    std::string why_not;
    if (PolicyStack::Create(cfg.policies, &stack).ok() && !stack.SharesPrefixBlocks(&why_not)) {
      return Status::InvalidArgument(prefix_caching_where + ": prefix_caching = true, but the stack '" + stack.Describe() +
                                     "' cannot share cached blocks: " + why_not);
    }
  }
  *out = std::move(cfg);
  return Status::OK();
}

Status LoadServeBenchConfig(const std::string& path, ServeBenchConfig* out, const std::vector<std::string>& sets) {
  std::string text;
  KVLAB_RETURN_IF_ERROR(ReadTomlFile(path, "config file", &text));
  return ParseServeBenchConfig(text, path, out, sets);
}

Status ResolveServeModel(const std::string& model, ModelConfig* out) {
  if (PresetConfig(model, out).ok()) return Status::OK();
  std::string names;
  for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
  std::ifstream probe(model + "/config.json");
  if (!probe) {
    return Status::NotFound("model '" + model + "' is neither a preset (" + names + ") nor a directory with config.json");
  }
  return LoadModelConfig(model + "/config.json", out);
}

}  // namespace kvlab
