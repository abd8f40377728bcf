// kvlab's command line, the top room: each subcommand is one Add*Command
// function that declares its options on the CLI11 app and returns the function
// that runs it. Only evals/cli/main.cpp calls them; library errors are printed
// once, as "kvlab: error: ...", with exit status 1 (Fail).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/model/model_config.h"
#include "policies/kv_policy.h"

namespace kvlab {

class Engine;
struct MemoryStats;

// A registered subcommand and what runs it once the command line is parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddGenerateCommand(CLI::App& app);
Command AddLogitsCommand(CLI::App& app);
Command AddMemoryCommand(CLI::App& app);
Command AddInitCommand(CLI::App& app);
Command AddServeBenchCommand(CLI::App& app);
Command AddTrainCommand(CLI::App& app);
Command AddConvertCommand(CLI::App& app);
Command AddRunCommand(CLI::App& app);
Command AddMergeCommand(CLI::App& app);
Command AddExportCommand(CLI::App& app);
Command AddModelsCommand(CLI::App& app);
Command AddTokenizeCommand(CLI::App& app);
Command AddPoliciesCommand(CLI::App& app);
Command AddCalibrateHeadsCommand(CLI::App& app);  // calibrate_command.cpp

// Prints `s` as "kvlab: error: ..." on stderr; returns the exit status 1.
int Fail(const Status& s);
// "name" or "name:key=value,key=value", repeated; none gives the full cache.
Status ParsePolicyArgs(const std::vector<std::string>& args, std::vector<PolicySpec>* out);
// The KV memory report of `kvlab generate`.
void PrintEngineMemory(const Engine& engine, const MemoryStats& m, int64_t tokens_per_seq_total);

}  // namespace kvlab
