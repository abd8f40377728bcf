#include "core/engine/run_config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/base/untrusted.h"
#include "policies/registry.h"

namespace kvlab {

std::string TomlWhere(const std::string& path, const toml::source_region& src) {
  // A value from the command line (ApplyTomlOverride) is named by its --set.
  if (src.path != nullptr && src.path->rfind("--set ", 0) == 0) return *src.path;
  return path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

Status CheckEngineOptions(const EngineOptions& o) {
  constexpr int64_t kAny = INT64_MIN;  // lower bounds: the engine's own checks and messages
  KVLAB_RETURN_IF_ERROR(CheckIntIn("threads (--threads)", o.num_threads, 0, kMaxThreads));
  KVLAB_RETURN_IF_ERROR(CheckIntIn("block_size (--block-size)", o.block_size, kAny, kMaxBlockSize));
  KVLAB_RETURN_IF_ERROR(CheckIntIn("the context (prompt + new tokens)", o.max_context, kAny, kMaxContextTokens));
  KVLAB_RETURN_IF_ERROR(CheckIntIn("sequences at once (batch)", o.max_seqs, kAny, kMaxBatch));
  KVLAB_RETURN_IF_ERROR(CheckIntIn("max_step_tokens (--max-step-tokens)", o.max_step_tokens, 0, kMaxContextTokens));
  KVLAB_RETURN_IF_ERROR(CheckIntIn("run_blocks (--run-blocks)", o.run_blocks, 0, kMaxRunBlocks));
  return CheckIntIn("prefill_chunk (--prefill-chunk)", o.prefill_chunk, 1, kMaxContextTokens);
}

Status CheckGenerateOptions(const GenerateOptions& o) {
  KVLAB_RETURN_IF_ERROR(CheckIntIn("max_new_tokens (--max-new-tokens)", o.max_new_tokens, 0, kMaxContextTokens));
  KVLAB_RETURN_IF_ERROR(CheckFiniteIn("temperature (--temperature)", o.sampling.temperature, 0, 1e6));
  return CheckFiniteIn("top_p (--top-p)", o.sampling.top_p, 0, 1);
}

Status ReadTomlFile(const std::string& path, const char* what, std::string* text) {
  const Status s = ReadFileBounded(path, kMaxConfigBytes, text);
  if (s.code() == Status::Code::kNotFound) return Status::IOError(path + ": cannot open " + what);
  return s;
}

Status ParseTomlText(const std::string& text, const std::string& path, toml::table* root) {
  // toml++ builds (and destroys) nested tables recursively: bound the depth first.
  KVLAB_RETURN_IF_ERROR(CheckTomlText(text, path, kMaxConfigBytes));
  try {
    *root = toml::parse(text, path);
  } catch (const toml::parse_error& err) {
    return Status::InvalidArgument(TomlWhere(path, err.source()) + ": " + QuoteBytes(err.description(), 240));
  }
  return Status::OK();
}

// Canonical text of a scalar TOML value, or false if it is not a scalar.
bool TomlScalarText(const toml::node& n, std::string* out) {
  if (auto v = n.as_integer()) { *out = std::to_string(v->get()); return true; }
  if (auto v = n.as_floating_point()) {
    // Shortest text that reads back as the same double, so `ratio = 0.2`
    // is recorded as "0.2", exactly as it is from the command line.
    char buf[32];
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof(buf), "%.*g", prec, v->get());
      if (std::strtod(buf, nullptr) == v->get()) break;
    }
    *out = buf;
    return true;
  }
  if (auto v = n.as_boolean()) { *out = v->get() ? "true" : "false"; return true; }
  if (auto v = n.as_string()) { *out = v->get(); return true; }
  return false;
}

Status CheckPolicyParamType(const std::string& path, const std::string& policy, const std::string& key,
                            const toml::node& n) {
  const PolicyInfo* info = PolicyRegistry::Global().Find(policy);
  if (info == nullptr) return Status::OK();
  for (const ParamSpec& p : info->params) {
    if (p.name != key) continue;
    const bool ok = p.type == ParamSpec::Type::kInt     ? n.is_integer()
                    : p.type == ParamSpec::Type::kFloat ? n.is_integer() || n.is_floating_point()
                    : p.type == ParamSpec::Type::kBool  ? n.is_boolean()
                                                        : n.is_string();
    if (ok) return Status::OK();
    const char* want = p.type == ParamSpec::Type::kInt     ? "an integer"
                       : p.type == ParamSpec::Type::kFloat ? "a number"
                       : p.type == ParamSpec::Type::kBool  ? "true or false"
                                                           : "a string";
    const char* got = n.is_string() ? "a string" : n.is_integer() ? "an integer" : n.is_floating_point() ? "a float"
                    : n.is_boolean() ? "a boolean" : "not a scalar";
    std::string text;
    TomlScalarText(n, &text);
    return Status::InvalidArgument(TomlWhere(path, n.source()) + ": policy '" + policy + "' parameter '" + key +
                                   "' must be " + want + ", got " + got + (text.empty() ? "" : " (" + QuoteBytes(text) + ")") +
                                   (n.is_string() ? "; write it without quotes" : ""));
  }
  return Status::OK();
}

namespace {

Status PolicyFromTable(const toml::table& t, const std::string& path, PolicySpec* spec) {
  spec->source = TomlWhere(path, t.source());
  const toml::node* name = t.get("name");
  if (name == nullptr || !name->is_string()) {
    return Status::InvalidArgument(spec->source + ": policy table needs a string key 'name'");
  }
  spec->name = name->as_string()->get();
  for (const auto& kv : t) {
    const std::string key(kv.first.str());
    if (key == "name") continue;
    std::string text;
    if (!TomlScalarText(kv.second, &text)) {
      return Status::InvalidArgument(TomlWhere(path, kv.second.source()) + ": policy '" + spec->name + "' parameter '" +
                                     key + "' must be a number, boolean or string");
    }
    KVLAB_RETURN_IF_ERROR(CheckPolicyParamType(path, spec->name, key, kv.second));
    spec->params[key] = text;
  }
  return Status::OK();
}

}  // namespace

Status PolicySpecsFromToml(const toml::node& node, const std::string& path, std::vector<PolicySpec>* out) {
  out->clear();
  if (const toml::table* t = node.as_table()) {
    PolicySpec spec;
    KVLAB_RETURN_IF_ERROR(PolicyFromTable(*t, path, &spec));
    out->push_back(std::move(spec));
    return Status::OK();
  }
  const toml::array* arr = node.as_array();
  if (arr == nullptr) return Status::InvalidArgument(TomlWhere(path, node.source()) + ": 'policy' must be a table or an array of tables");
  for (const toml::node& el : *arr) {
    const toml::table* t = el.as_table();
    if (t == nullptr) return Status::InvalidArgument(TomlWhere(path, el.source()) + ": each policy must be a table");
    PolicySpec spec;
    KVLAB_RETURN_IF_ERROR(PolicyFromTable(*t, path, &spec));
    out->push_back(std::move(spec));
  }
  if (out->empty()) return Status::InvalidArgument(TomlWhere(path, node.source()) + ": empty policy list");
  return Status::OK();
}

Status ParseRunConfig(const std::string& text, const std::string& path, RunConfig* out) {
  toml::table root;
  KVLAB_RETURN_IF_ERROR(ParseTomlText(text, path, &root));
  RunConfig cfg;
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  for (const auto& kv : root) {
    const std::string key(kv.first.str());
    const toml::node& n = kv.second;
    const std::string where = TomlWhere(path, n.source());
    auto want_int = [&](int64_t* dst) -> Status {
      if (!n.is_integer()) return Status::InvalidArgument(where + ": '" + key + "' must be an integer");
      *dst = n.as_integer()->get();
      return Status::OK();
    };
    auto want_float = [&](double* dst) -> Status {
      if (auto f = n.value<double>()) { *dst = *f; return Status::OK(); }
      return Status::InvalidArgument(where + ": '" + key + "' must be a number");
    };
    auto want_string = [&](std::string* dst) -> Status {
      if (!n.is_string()) return Status::InvalidArgument(where + ": '" + key + "' must be a string");
      *dst = n.as_string()->get();
      return Status::OK();
    };
    int64_t iv = 0;
    std::string sv;
    if (key == "model") {
      KVLAB_RETURN_IF_ERROR(want_string(&cfg.engine.model));
      ModelConfig preset;
      if (!PresetConfig(cfg.engine.model, &preset).ok() && !cfg.engine.model.empty() && cfg.engine.model[0] != '/') {
        cfg.engine.model = dir + "/" + cfg.engine.model;
      }
    } else if (key == "prompt") {
      KVLAB_RETURN_IF_ERROR(want_string(&cfg.prompt));
    } else if (key == "prompt_file") {
      KVLAB_RETURN_IF_ERROR(want_string(&cfg.prompt_file));
      if (!cfg.prompt_file.empty() && cfg.prompt_file[0] != '/') cfg.prompt_file = dir + "/" + cfg.prompt_file;
    } else if (key == "tokens") {
      const toml::array* arr = n.as_array();
      if (arr == nullptr) return Status::InvalidArgument(where + ": 'tokens' must be an array of integers");
      for (const toml::node& el : *arr) {
        if (!el.is_integer() || el.as_integer()->get() < 0) {
          return Status::InvalidArgument(TomlWhere(path, el.source()) + ": 'tokens' entries must be non-negative integers");
        }
        // A token id is an int32: past it the cast below would wrap.
        const Status id = CheckIntIn("'tokens' entry", el.as_integer()->get(), 0, INT32_MAX);
        if (!id.ok()) return Status::InvalidArgument(TomlWhere(path, el.source()) + ": " + id.message());
        cfg.tokens.push_back(static_cast<int32_t>(el.as_integer()->get()));
      }
    } else if (key == "max_new_tokens") {
      KVLAB_RETURN_IF_ERROR(want_int(&cfg.generate.max_new_tokens));
    } else if (key == "kv_dtype") {
      KVLAB_RETURN_IF_ERROR(want_string(&sv));
      if (!ParseDType(sv, &cfg.engine.kv_dtype)) {
        return Status::InvalidArgument(where + ": 'kv_dtype' must be f32, f16 or bf16, got '" + sv + "'");
      }
    } else if (key == "block_size") {
      KVLAB_RETURN_IF_ERROR(want_int(&iv));
      if (iv <= 0 || iv > 4096) return Status::InvalidArgument(where + ": 'block_size' must be in [1, 4096]");
      cfg.engine.block_size = static_cast<int>(iv);
    } else if (key == "prefill_chunk") {
      KVLAB_RETURN_IF_ERROR(want_int(&cfg.engine.prefill_chunk));
    } else if (key == "max_step_tokens") {
      KVLAB_RETURN_IF_ERROR(want_int(&cfg.engine.max_step_tokens));
    } else if (key == "run_blocks") {
      KVLAB_RETURN_IF_ERROR(want_int(&iv));
      const Status range = CheckIntIn("'run_blocks' (--run-blocks; 0 or 1: off)", iv, 0, kMaxRunBlocks);
      if (!range.ok()) return Status::InvalidArgument(where + ": " + range.message());
      cfg.engine.run_blocks = static_cast<int>(iv);
    } else if (key == "attention") {
      KVLAB_RETURN_IF_ERROR(want_string(&cfg.engine.attention));
    } else if (key == "device") {
      KVLAB_RETURN_IF_ERROR(want_string(&cfg.engine.device));
    } else if (key == "temperature") {
      KVLAB_RETURN_IF_ERROR(want_float(&cfg.generate.sampling.temperature));
    } else if (key == "top_p") {
      KVLAB_RETURN_IF_ERROR(want_float(&cfg.generate.sampling.top_p));
    } else if (key == "seed") {
      KVLAB_RETURN_IF_ERROR(want_int(&iv));
      cfg.generate.sampling.seed = static_cast<uint64_t>(iv);
    } else if (key == "allow_long_context") {
      if (!n.is_boolean()) return Status::InvalidArgument(where + ": 'allow_long_context' must be true or false");
      cfg.engine.allow_long_context = n.as_boolean()->get();
    } else if (key == "policy") {
      KVLAB_RETURN_IF_ERROR(PolicySpecsFromToml(n, path, &cfg.policies));
    } else {
      return Status::InvalidArgument(where + ": unknown key '" + key +
                                     "'; valid keys: model, prompt, prompt_file, tokens, max_new_tokens, kv_dtype, block_size, "
                                     "prefill_chunk, max_step_tokens, run_blocks, attention, device, temperature, top_p, seed, allow_long_context, policy");
    }
  }
  if (static_cast<int>(!cfg.prompt.empty()) + static_cast<int>(!cfg.prompt_file.empty()) +
          static_cast<int>(!cfg.tokens.empty()) > 1) {
    return Status::InvalidArgument(path + ": give one of 'prompt', 'prompt_file' and 'tokens'");
  }
  if (cfg.policies.empty()) cfg.policies.push_back(PolicySpec{"full", {}, path});
  for (const Status& bound : {CheckEngineOptions(cfg.engine), CheckGenerateOptions(cfg.generate)}) {
    if (!bound.ok()) return Status::InvalidArgument(path + ": " + bound.message());
  }
  *out = std::move(cfg);
  return Status::OK();
}

Status ApplyTomlOverride(const std::string& item, toml::table* root) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0) return Status::InvalidArgument("--set " + item + ": expected KEY=VALUE");
  const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
  toml::table parsed;
  KVLAB_RETURN_IF_ERROR(CheckTomlText("v = " + value, "--set " + key, kMaxConfigBytes));
  try {
    parsed = toml::parse("v = " + value, "--set " + key);
  } catch (const toml::parse_error& err) {
    // Not TOML: a bare word (letters, digits and - _ . / + :) is taken as a
    // string (--set name=quick); anything else is the parser's error.
    const bool bare = !value.empty() && std::all_of(value.begin(), value.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("-_./+:", ch) != nullptr;
    });
    if (!bare) {
      return Status::InvalidArgument("--set " + QuoteBytes(item) + ": the value is not TOML (" +
                                     QuoteBytes(err.description(), 120) + "); a list is [1, 2], a string \"text\"");
    }
    parsed = toml::parse("v = \"" + value + "\"", "--set " + key);
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  if (parts.size() > static_cast<size_t>(kMaxNestingDepth)) {
    return Status::InvalidArgument("--set " + QuoteBytes(key) + ": " + std::to_string(parts.size()) +
                                   " dotted parts, more than " + std::to_string(kMaxNestingDepth));
  }
  // Task names hold dashes, not dots, so a plain split is enough.
  toml::table* t = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* n = t->get(parts[i]);
    if (n == nullptr) {
      t->insert_or_assign(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    if (!n->is_table()) return Status::InvalidArgument("--set " + item + ": '" + parts[i] + "' is not a table");
    t = n->as_table();
  }
  // Moved, not copied: a copied toml++ node loses its source, which names the --set in messages.
  t->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
  return Status::OK();
}

Status LoadRunConfig(const std::string& path, RunConfig* out) {
  std::string text;
  KVLAB_RETURN_IF_ERROR(ReadTomlFile(path, "config file", &text));
  return ParseRunConfig(text, path, out);
}

}  // namespace kvlab
