// The dataset readers (datasets/tasks/longbench.h, infinitebench.h): the
// first byte picks the reader (LongBench's hotpotqa, LongBench-E's trec,
// LongBench v2, InfiniteBench's kv_retrieval and longbook_choice_eng), the
// rest is the file's text. Every malformed record must be an error naming
// the file, line and field.
#include <string>
#include <vector>

#include "datasets/tasks/infinitebench.h"
#include "datasets/tasks/longbench.h"
#include "evals/fuzz/fuzz_target.h"

KVLAB_FUZZ_TARGET(datasets) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string path = "fuzz.jsonl";
  switch (data[0] % 5) {
    case 0:
    case 1: {
      const kvlab::LongBenchDataset* d = kvlab::FindLongBenchDataset(data[0] % 5 == 0 ? "hotpotqa" : "trec");
      std::vector<kvlab::LongBenchRecord> recs;
      if (d != nullptr) (void)kvlab::LoadLongBenchFile(path, text, *d, /*max_records=*/0, &recs);
      break;
    }
    case 2: {
      std::vector<kvlab::LongBenchV2Record> recs;
      (void)kvlab::LoadLongBenchV2File(path, text, /*max_records=*/0, &recs);
      break;
    }
    default: {
      const kvlab::InfiniteBenchTask* t =
          kvlab::FindInfiniteBenchTask(data[0] % 5 == 3 ? "kv_retrieval" : "longbook_choice_eng");
      std::vector<kvlab::InfiniteBenchRecord> recs;
      if (t != nullptr) (void)kvlab::LoadInfiniteBenchFile(path, text, *t, /*max_records=*/0, &recs);
      break;
    }
  }
  return 0;
}
