// Run configs in TOML (TOML++): what `kvlab generate --config` reads, and the
// policy-stack tables that sweep configs reuse. Every unknown key, type error
// and parse error is reported with file:line:column. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "core/engine/engine.h"
#include "core/base/status.h"
#include "policies/kv_policy.h"

namespace kvlab {

// A `kvlab generate` run:
//   model = "small"            # preset or HF directory (relative to the config's directory)
//   prompt = "text"            # or: tokens = [1, 2, 3], or: prompt_file = "p.txt" / "p.ids"
//                              #   (text, or token ids when it ends in .ids; relative to the config)
//   max_new_tokens = 32
//   kv_dtype = "bf16"          # f32 | f16 | bf16
//   block_size = 16
//   prefill_chunk = 512
//   max_step_tokens = 64       # with selection, an encoding or offload: tokens a step adds (0 = as given)
//   attention = "cpu"          # cpu | reference
//   device = "cpu"             # cpu | cuda
//   temperature = 0.0
//   top_p = 1.0
//   seed = 0
//   [[policy]]                 # the stack, in order; default [{name = "full"}]
//   name = "full"
//   # further keys are the policy's parameters
struct RunConfig {
  EngineOptions engine;
  std::string prompt;
  std::string prompt_file;      // text, or token ids when it ends in .ids (core/tokenizer/tokenizer.h)
  std::vector<int32_t> tokens;  // non-empty when given as token ids
  GenerateOptions generate;
  std::vector<PolicySpec> policies;
};

Status LoadRunConfig(const std::string& path, RunConfig* out);

// The upper bounds of core/base/untrusted.h on an engine's and a generation's
// options (threads, block size, context, batch; finite sampling numbers), each
// error naming the option and both numbers. Engine::Create and Engine::Generate
// check them before any work, so every front end (kvlab generate, sweeps,
// serve-bench) gets the same errors. Lower bounds stay with their own checks.
Status CheckEngineOptions(const EngineOptions& o);
Status CheckGenerateOptions(const GenerateOptions& o);
// Parses TOML from a string (`path` is used in messages only).
Status ParseRunConfig(const std::string& text, const std::string& path, RunConfig* out);

// Canonical text of a scalar TOML value (the shortest text that reads back
// as the same double, so `ratio = 0.2` is "0.2" as from the command line);
// false when the node is not a scalar.
bool TomlScalarText(const toml::node& n, std::string* out);
// A policy parameter's TOML value must have the parameter's declared type: an
// integer for an integer, an integer or a float for a number, a boolean for
// true/false, a string for a string. `ratio = "0.25"` or `bits = 2.0` is an
// error at FILE:LINE:COL naming the parameter and both types (never converted).
// An unknown policy or parameter passes here: the registry names it.
Status CheckPolicyParamType(const std::string& path, const std::string& policy, const std::string& key,
                            const toml::node& n);
// "FILE:LINE:COL" of a node.
std::string TomlWhere(const std::string& path, const toml::source_region& src);
// Every TOML config kvlab reads (run, sweep, serve-bench, train) goes through
// these two: the file at most kMaxConfigBytes (IOError "PATH: cannot open
// WHAT" when it cannot be read), the text no deeper than kMaxNestingDepth
// (core/base/untrusted.h) before toml++ parses it; errors name the file.
Status ReadTomlFile(const std::string& path, const char* what, std::string* text);
Status ParseTomlText(const std::string& text, const std::string& path, toml::table* root);
// Applies one `--set KEY=VALUE` to a parsed config: KEY a dotted path of
// tables (created when missing), VALUE parsed as TOML, a bare word taken
// as a string.
Status ApplyTomlOverride(const std::string& item, toml::table* root);
// A [[policy]] array (or a single inline table) into specs; each table's
// `name` is the policy, every other key a parameter (ints, floats, bools,
// strings; their text is validated by the registry).
Status PolicySpecsFromToml(const toml::node& node, const std::string& path, std::vector<PolicySpec>* out);

}  // namespace kvlab
