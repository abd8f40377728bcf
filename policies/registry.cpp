#include "policies/registry.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kvlab {

void RegisterBuiltinPolicies(PolicyRegistry* registry) {
  // One line per policy.
  RegisterFullPolicy(registry);
  RegisterSinkPolicy(registry);
  RegisterWindowPolicy(registry);
  RegisterH2OPolicy(registry);
  RegisterRandomPolicy(registry);
  RegisterGqaReusePolicy(registry);
  RegisterKiviPolicy(registry);
  RegisterQuantPolicy(registry);
  RegisterOffloadPolicy(registry);
  RegisterSnapKVPolicy(registry);
  RegisterPyramidKVPolicy(registry);
  RegisterAdaKVPolicy(registry);
  RegisterTovaPolicy(registry);
  RegisterKeyNormPolicy(registry);
  RegisterDuoPolicy(registry);
  RegisterThinkPolicy(registry);
  RegisterQuestPolicy(registry);
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

}  // namespace

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
    return Status::InvalidArgument(where + ": unknown policy '" + spec.name + "'; valid policies: " + JoinNames(Names()));
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
      return Status::InvalidArgument(where + ": policy '" + spec.name + "' has no parameter '" + kv.first +
                                     "'; valid parameters: " + JoinNames(valid));
    }
    std::string canon;
    const Status st = CheckParamValue(spec.name, *ps, kv.second, &canon);
    if (!st.ok()) return Status::InvalidArgument(where + ": " + st.message());
    params.values_[kv.first] = canon;
  }
  for (const ParamSpec& p : info->params) {
    if (!params.values_.count(p.name)) params.values_[p.name] = p.default_value;
  }
  Status st = info->create(std::move(params), out);
  if (!st.ok()) return Status::InvalidArgument(where + ": " + st.message());
  return st;
}

}  // namespace kvlab
