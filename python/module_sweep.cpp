// kvlab.run's C++ side: a sweep config (a file, or TOML text the package
// writes from a dict) through RunSweep, as `kvlab run` runs it: progress on
// stderr, results appended point by point, a rerun resuming. Ctrl-C stops it
// between points or inside a Python policy, the interrupted point unrecorded.
#include <pybind11/stl.h>

#include "evals/sweep.h"
#include "python/module_common.h"
#include "python/py_policy.h"

namespace py = pybind11;

namespace kvlab {
namespace {

// Returns the summary text and the output directory.
std::pair<std::string, std::string> Run(const std::string& path, const std::string& text, const std::vector<std::string>& overrides,
                const std::string& out_dir, bool progress, bool retry_failed, bool dry_run, int shard, int num_shards) {
  SweepConfig config;
  ThrowIfError(text.empty() ? LoadSweepConfig(path, overrides, &config) : ParseSweepConfig(text, path, overrides, &config));
  // Text has no file to copy into the results (the package writes its config.toml).
  if (!text.empty()) config.path.clear();
  RunSweepOptions opts;
  opts.out_dir = out_dir;
  opts.progress = progress;
  opts.retry_failed = retry_failed;
  opts.dry_run = dry_run;
  opts.shard = shard;
  opts.num_shards = num_shards;
  opts.interrupted = [] { return CheckPythonSignals(); };
  ClearPythonInterrupt();
  std::string report;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = RunSweep(config, opts, &report);
  }
  if (PythonInterruptPending()) {
    ClearPythonInterrupt();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  ThrowIfError(s);
  return {report, out_dir.empty() ? "results/" + config.name : out_dir};
}

}  // namespace

void BindSweep(py::module_& m) {
  m.def("run_sweep", &Run, py::arg("path"), py::arg("text"), py::arg("overrides"), py::arg("out_dir"),
        py::arg("progress"), py::arg("retry_failed"), py::arg("dry_run"), py::arg("shard"), py::arg("num_shards"),
        "Runs a sweep config (path, or text with path for relative names); returns (summary text, output directory).");
}

}  // namespace kvlab
