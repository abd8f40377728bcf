// Shared by the kvlab module's files (python/module*.cpp): the kvlab.Error
// exception and the conversion of a Status into it.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

// kvlab.Error in Python: a C++ error (a Status that is not OK) with its message.
class ModuleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw ModuleError(s.ToString());
}

// Policy strings ("h2o:ratio=0.2") as PolicySpecs; `full` when empty.
std::vector<PolicySpec> ParsePolicies(const std::vector<std::string>& texts);

void BindEngine(pybind11::module_& m);
void BindSweep(pybind11::module_& m);

}  // namespace kvlab
