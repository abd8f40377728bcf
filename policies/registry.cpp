#include "policies/registry.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/base/untrusted.h"

namespace kvlab {

// The built-in policies, one line each: X(Name) stands for
// Register<Name>Policy(PolicyRegistry*), defined in the policy's own file.
#define KVLAB_BUILTIN_POLICIES(X) \
  X(Full)                         \
  X(Sink)                         \
  X(Window)                       \
  X(H2O)                          \
  X(Random)                       \
  X(GqaReuse)                     \
  X(Kivi)                         \
  X(Quant)                        \
  X(Offload)                      \
  X(SnapKV)                       \
  X(PyramidKV)                    \
  X(AdaKV)                        \
  X(Tova)                         \
  X(KeyNorm)                      \
  X(KeyDiff)                      \
  X(LagKV)                        \
  X(Cur)                          \
  X(ChunkKV)                      \
  X(A2sf)                         \
  X(Duo)                          \
  X(Think)                        \
  X(Quest)

#define KVLAB_DECLARE_POLICY(Name) void Register##Name##Policy(PolicyRegistry* registry);
KVLAB_BUILTIN_POLICIES(KVLAB_DECLARE_POLICY)
#undef KVLAB_DECLARE_POLICY

void RegisterBuiltinPolicies(PolicyRegistry* registry) {
#define KVLAB_CALL_POLICY(Name) Register##Name##Policy(registry);
  KVLAB_BUILTIN_POLICIES(KVLAB_CALL_POLICY)
#undef KVLAB_CALL_POLICY
}

PolicyRegistry& PolicyRegistry::Global() {
  static PolicyRegistry* registry = [] {
    auto* r = new PolicyRegistry();
    RegisterBuiltinPolicies(r);
    return r;
  }();
  return *registry;
}

void PolicyRegistry::Register(PolicyInfo info) { infos_.push_back(std::move(info)); }

bool PolicyRegistry::Replace(PolicyInfo info) {
  for (PolicyInfo& i : infos_) {
    if (i.name == info.name) {
      i = std::move(info);
      return true;
    }
  }
  return false;
}

const PolicyInfo* PolicyRegistry::Find(const std::string& name) const {
  for (const PolicyInfo& i : infos_) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

std::vector<std::string> PolicyRegistry::Names() const {
  std::vector<std::string> names;
  for (const PolicyInfo& i : infos_) names.push_back(i.name);
  return names;
}

namespace {

std::string JoinNames(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none)" : out;
}

const char* TypeName(ParamSpec::Type t) {
  switch (t) {
    case ParamSpec::Type::kInt: return "an integer";
    case ParamSpec::Type::kFloat: return "a number";
    case ParamSpec::Type::kBool: return "true or false";
    case ParamSpec::Type::kString: return "a string";
  }
  return "?";
}

// Checks `text` against the spec's type and writes its canonical form to *canon.
bool Canonicalise(const ParamSpec& spec, const std::string& text, std::string* canon) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  switch (spec.type) {
    case ParamSpec::Type::kInt: {
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (*end != '\0' || errno != 0) return false;
      *canon = std::to_string(v);
      return true;
    }
    case ParamSpec::Type::kFloat: {
      const double v = std::strtod(text.c_str(), &end);
      if (*end != '\0' || errno != 0 || !std::isfinite(v)) return false;
      *canon = text;
      return true;
    }
    case ParamSpec::Type::kBool:
      if (text != "true" && text != "false") return false;
      *canon = text;
      return true;
    case ParamSpec::Type::kString:
      *canon = text;
      return true;
  }
  return false;
}

bool Declares(const PolicyInfo& info, const char* name) {
  for (const ParamSpec& p : info.params) {
    if (p.name == name) return true;
  }
  return false;
}

// A policy that declares both `budget` (slots, 0 = use the ratio) and `ratio`
// (a fraction of the length) sizes what it keeps by one of them. Giving the
// ratio alone means the budget follows it, whatever the budget's default;
// giving a nonzero budget beside a ratio is an error naming both, so neither
// is ever silently ignored.
Status ApplyBudgetRule(const std::string& where, const PolicySpec& spec, const PolicyInfo& info,
                       std::map<std::string, std::string>* values) {
  if (!Declares(info, "budget") || !Declares(info, "ratio") || !spec.params.count("ratio")) return Status::OK();
  const auto budget = values->find("budget");
  if (budget == values->end()) {
    (*values)["budget"] = "0";
    return Status::OK();
  }
  if (budget->second == "0") return Status::OK();
  return Status::InvalidArgument(where + ": policy '" + spec.name + "' parameters 'budget' (" + budget->second +
                                 ") and 'ratio' (" + values->at("ratio") +
                                 ") are both given; give one: 'budget' keeps that many slots per stream, 'ratio' "
                                 "that fraction of the sequence's length (budget = 0 with a ratio is the same as "
                                 "the ratio alone)");
}

}  // namespace

Status ParsePolicyString(const std::string& text, const std::string& source, PolicySpec* out) {
  *out = PolicySpec();
  out->source = source + " " + QuoteBytes(text);
  const size_t colon = text.find(':');
  out->name = text.substr(0, colon);
  if (out->name.empty()) {
    return Status::InvalidArgument(out->source + ": expected NAME or NAME:key=value[,key=value], the name is empty");
  }
  if (colon == std::string::npos) return Status::OK();
  const std::string rest = text.substr(colon + 1);
  size_t start = 0;
  while (true) {
    const size_t comma = rest.find(',', start);
    const std::string kv = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(out->source + ": expected NAME:key=value[,key=value], got '" + QuoteBytes(kv) + "'");
    }
    const std::string key = kv.substr(0, eq);
    if (!out->params.emplace(key, kv.substr(eq + 1)).second) {
      return Status::InvalidArgument(out->source + ": parameter '" + QuoteBytes(key) +
                                     "' is given twice; give each parameter once");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Status::OK();
}

Status CheckParamValue(const std::string& policy, const ParamSpec& spec, const std::string& text, std::string* canon) {
  const std::string what = "policy '" + policy + "' parameter '" + spec.name + "'";
  bool valid = Canonicalise(spec, text, canon);
  if (valid && !spec.choices.empty()) {
    valid = std::find(spec.choices.begin(), spec.choices.end(), *canon) != spec.choices.end();
  }
  if (!valid) {
    const std::string expected = spec.choices.empty() ? TypeName(spec.type) : spec.ValidValues();
    return Status::InvalidArgument(what + " expects " + expected + ", got '" + text + "'");
  }
  const bool number = spec.type == ParamSpec::Type::kInt || spec.type == ParamSpec::Type::kFloat;
  if (number && !spec.range.Contains(std::strtod(canon->c_str(), nullptr))) {
    return Status::InvalidArgument(what + " must be " + spec.range.ToString() + ", got " + *canon);
  }
  return Status::OK();
}

Status PolicyRegistry::Create(const PolicySpec& spec, std::unique_ptr<KVPolicy>* out) const {
  const std::string where = spec.source.empty() ? std::string("policy") : spec.source;
  const PolicyInfo* info = Find(spec.name);
  if (info == nullptr) {
    return Status::InvalidArgument(where + ": unknown policy '" + QuoteBytes(spec.name) + "'; valid policies: " + JoinNames(Names()));
  }
  PolicyParams params;
  for (const auto& kv : spec.params) {
    const ParamSpec* ps = nullptr;
    for (const ParamSpec& p : info->params) {
      if (p.name == kv.first) ps = &p;
    }
    if (ps == nullptr) {
      std::vector<std::string> valid;
      for (const ParamSpec& p : info->params) valid.push_back(p.name);
      return Status::InvalidArgument(where + ": policy '" + spec.name + "' has no parameter '" + QuoteBytes(kv.first) +
                                     "'; valid parameters: " + JoinNames(valid));
    }
    std::string canon;
    const Status st = CheckParamValue(spec.name, *ps, kv.second, &canon);
    if (!st.ok()) return Status::InvalidArgument(where + ": " + st.message());
    params.values_[kv.first] = canon;
    params.given_.insert(kv.first);
  }
  KVLAB_RETURN_IF_ERROR(ApplyBudgetRule(where, spec, *info, &params.values_));
  for (const ParamSpec& p : info->params) {
    if (!params.values_.count(p.name)) params.values_[p.name] = p.default_value;
  }
  Status st = info->create(std::move(params), out);
  if (!st.ok()) return Status::InvalidArgument(where + ": " + st.message());
  return st;
}

}  // namespace kvlab
