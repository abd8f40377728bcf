// PolicyRegistry: policies by name. Each policy file defines a
// Register<Name>Policy() function; RegisterBuiltinPolicies() (registry.cpp)
// calls them, one line per policy in KVLAB_BUILTIN_POLICIES. Explicit calls
// instead of static initialisers, so a static library link can never
// silently drop a policy; policies/CMakeLists.txt compiles every policies/*.cpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "policies/kv_policy.h"

namespace kvlab {

struct PolicyInfo {
  PolicyInfo() = default;
  PolicyInfo(std::string name_, std::string summary_, std::string paper_, uint32_t concerns_,
             std::vector<ParamSpec> params_)
      : name(std::move(name_)),
        summary(std::move(summary_)),
        paper(std::move(paper_)),
        concerns(concerns_),
        params(std::move(params_)) {}

  std::string name;
  std::string summary;  // one line: what it keeps or how it encodes
  std::string paper;    // citation
  uint32_t concerns = 0;
  std::vector<ParamSpec> params;
  // Parameters that make the policy act on a short sequence (a few hundred
  // tokens of a small model), for the engine conformance test; defaults
  // where empty. Not a different policy: only budgets scaled down.
  std::map<std::string, std::string> test_params;
  // Builds an instance from params already typed, defaulted and checked
  // against each ParamSpec's choices and range (so it repeats none of those
  // checks); may reject combinations of values with an error naming the
  // parameters.
  std::function<Status(PolicyParams, std::unique_ptr<KVPolicy>*)> create;
};

class PolicyRegistry {
 public:
  // The process-wide registry, with the built-in policies registered.
  static PolicyRegistry& Global();

  void Register(PolicyInfo info);
  // Puts `info` in place of the registered policy of its name (policies
  // registered at run time, from Python, registered again); false if none is.
  bool Replace(PolicyInfo info);
  const PolicyInfo* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  const std::vector<PolicyInfo>& infos() const { return infos_; }

  // Validates raw parameters against the policy's specs (unknown names and
  // bad values, by CheckParamValue, are errors listing what is valid) and
  // creates the policy.
  Status Create(const PolicySpec& spec, std::unique_ptr<KVPolicy>* out) const;

 private:
  std::vector<PolicyInfo> infos_;
};

// Checks one raw value against its spec (type, choices, range) and writes its
// canonical text to *canon. The error names the policy, the parameter, the
// value and what is valid.
Status CheckParamValue(const std::string& policy, const ParamSpec& spec, const std::string& text, std::string* canon);

// Parses a policy as written on a command line, "name" or
// "name:key=value[,key=value]", into *out (params raw, typed later by
// PolicyRegistry::Create). out->source is `source` and the text (its first
// 80 bytes). A parameter given twice, an empty name or a pair without '='
// is an error naming the source.
Status ParsePolicyString(const std::string& text, const std::string& source, PolicySpec* out);

void RegisterBuiltinPolicies(PolicyRegistry* registry);

}  // namespace kvlab
