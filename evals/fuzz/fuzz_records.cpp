// results.jsonl (evals/sweep_records.cpp): the bytes as a results directory's
// records, read by the report writer (`kvlab report`'s path, which `kvlab
// run` ends with) and by `kvlab merge` into a second directory.
#include <filesystem>
#include <string>

#include "evals/fuzz/fuzz_target.h"
#include "evals/sweep.h"

KVLAB_FUZZ_TARGET(records) {
  const std::string& dir = kvlab::fuzz::ScratchDir();
  (void)kvlab::fuzz::WriteScratchFile("results.jsonl", data, size);
  std::string summary;
  (void)kvlab::WriteReports(dir, &summary);
  (void)kvlab::fuzz::WriteScratchFile("results.jsonl", data, size);  // LoadRecords may cut a torn line
  const std::string merged = dir + "/merged";
  std::error_code ec;
  std::filesystem::remove_all(merged, ec);
  std::string report;
  (void)kvlab::MergeResults({dir}, merged, &report);
  return 0;
}
