// PolicyRegistry: policies by name. Each policy file defines a Register*()
// function; RegisterBuiltinPolicies() (registry.cpp) calls them, one line per
// policy. Explicit calls instead of static initialisers, so a static library
// link can never silently drop a policy.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policies/kv_policy.h"

namespace kvlab {

struct PolicyInfo {
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

void RegisterBuiltinPolicies(PolicyRegistry* registry);

// One registration function per policy file.
void RegisterFullPolicy(PolicyRegistry* registry);
void RegisterSinkPolicy(PolicyRegistry* registry);      // sink.cpp
void RegisterWindowPolicy(PolicyRegistry* registry);    // sink.cpp
void RegisterH2OPolicy(PolicyRegistry* registry);       // h2o.cpp
void RegisterRandomPolicy(PolicyRegistry* registry);    // random_evict.cpp
void RegisterGqaReusePolicy(PolicyRegistry* registry);  // gqa_reuse.cpp
void RegisterKiviPolicy(PolicyRegistry* registry);      // kivi.cpp
void RegisterQuantPolicy(PolicyRegistry* registry);     // quant.cpp
void RegisterOffloadPolicy(PolicyRegistry* registry);   // offload.cpp
void RegisterSnapKVPolicy(PolicyRegistry* registry);    // snapkv.cpp
void RegisterPyramidKVPolicy(PolicyRegistry* registry); // pyramidkv.cpp
void RegisterAdaKVPolicy(PolicyRegistry* registry);     // adakv.cpp
void RegisterTovaPolicy(PolicyRegistry* registry);      // tova.cpp
void RegisterKeyNormPolicy(PolicyRegistry* registry);   // key_norm.cpp
void RegisterDuoPolicy(PolicyRegistry* registry);       // duo.cpp
void RegisterThinkPolicy(PolicyRegistry* registry);     // think.cpp
void RegisterQuestPolicy(PolicyRegistry* registry);     // quest.cpp

}  // namespace kvlab
