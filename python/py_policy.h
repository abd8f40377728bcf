// Policies written in Python: a Python class (kvlab.ScorerPolicy's subclass)
// registered by name becomes a selection policy of the global PolicyRegistry,
// usable wherever a C++ one is (generate, logits, sweep configs, stacked with
// the other concerns). Its C++ side is a ScoredSelection: the Python object
// scores the slots (or selects them, or folds attention), and core compacts
// the streams by that decision as for any policy. The Python side receives
// fp32 copies of the stream's keys and values (decoded where encoded) and
// statistics, never the cache's memory. Called by python/module.cpp only.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace kvlab {

// An error of a Python policy: a Python exception inside it, or a result
// that is not what the contract asks (wrong length, dtype, device, NaN,
// out-of-range or repeated slots). The message names the policy, the layer,
// KV head and sequence length, and what was wrong (for an exception, the last
// line of its traceback). The engine's selection has no Status path, so it
// propagates as an exception: kvlab.PolicyError in Python, a failed point in
// a sweep.
class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Set when a Python callback saw a pending signal (Ctrl-C): the policy throws
// PolicyError and the caller raises KeyboardInterrupt instead of the error.
bool PythonInterruptPending();
void ClearPythonInterrupt();
// Checks for pending signals (takes the GIL); true, and the flag above set,
// when the Python handler raised (KeyboardInterrupt).
bool CheckPythonSignals();

// Registers `cls` (a kvlab.ScorerPolicy subclass) as selection policy `name`
// with its declared parameters (cls.params: name -> default of type int,
// float, bool or str; plus budget, ratio and recent). A name taken by a
// built-in policy is an error; a Python policy registered again is replaced.
void RegisterPythonPolicy(const std::string& name, pybind11::object cls);

}  // namespace kvlab
