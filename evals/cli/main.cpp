// kvlab: the command-line front end. Each subcommand lives in one Add*Command
// function (evals/cli/*_commands.cpp); this file only assembles and runs them.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/base/untrusted.h"
#include "evals/cli/cli.h"
#include "kernels/cpu_isa.h"

namespace kvlab {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"kvlab: a testbed for KV-cache compression policies on a paged decode engine"};
  app.require_subcommand(1);
  // The CPU kernels' path per kernel (runtime dispatch, kernels/cpu_isa.h).
  app.set_version_flag("--version", [] {
    std::string text = "kvlab\n" + CpuKernelPaths();
    text.pop_back();  // CLI11 ends the line
    return text;
  });
  // A KVLAB_ISA naming a path this CPU lacks (or no path) is refused before anything runs.
  if (const Status st = CheckCpuIsaEnv(); !st.ok()) return Fail(st);
  const std::vector<Command> commands = {
      AddGenerateCommand(app), AddLogitsCommand(app), AddMemoryCommand(app), AddInitCommand(app),
      AddServeBenchCommand(app), AddTrainCommand(app), AddConvertCommand(app), AddRunCommand(app),
      AddMergeCommand(app), AddExportCommand(app), AddModelsCommand(app), AddPoliciesCommand(app),
      AddTokenizeCommand(app), AddCalibrateHeadsCommand(app),
  };
  CLI11_PARSE(app, argc, argv);
  for (const Command& c : commands) {
    if (*c.app) return c.run();
  }
  return 0;
}

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  try {
    return kvlab::Main(argc, argv);
  } catch (const std::exception& e) {
    // Library code returns Status; this only catches what a dependency threw.
    std::fprintf(stderr, "kvlab: error: %s\n", kvlab::QuoteBytes(e.what(), SIZE_MAX).c_str());
    return 1;
  }
}
