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
  // An empty value ('--tokens ""', '--model ""') is refused for every option
  // that takes one: read as "not given", it would run the default silently.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* o : sub->get_options([](CLI::Option* o) { return o->get_type_size() > 0; })) {
      o->check([](const std::string& v) { return v.empty() ? std::string("the value is empty") : std::string(); });
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end the parse with exit code 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // Every other parse error (an unknown option, a value that does not
    // convert, a missing required option) is one error line and exit 1, as
    // every other bad input; CLI11's own codes (104, 105, ...) are internal.
    const std::vector<CLI::App*> given = app.get_subcommands();
    const std::string help = given.empty() ? "kvlab --help" : "kvlab " + given.back()->get_name() + " --help";
    return Fail(Status::InvalidArgument(QuoteBytes(e.what(), 160) + " (" + help + " lists what it takes)"));
  }
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
