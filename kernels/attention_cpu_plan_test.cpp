// The CPU decode plan's bookkeeping (kernels/attention_cpu_plan.h) and its
// check. Running plans is tested with the kernels: attention_test.cpp (a plan
// made for other lengths, every case) and core/cache/attention_encoded_test.cpp
// (the KIVI path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/attention_cpu_plan.h"

namespace kvlab {
namespace {

// Every (tile, part) is one job, largest first; the split parts' records tile
// the workspace; one thread splits nothing; the slot_attn ranges cover each
// stream with queries from slot 0, the last one open-ended.
TEST(CpuDecodePlanTest, JobsCoverEveryPartOnce) {
  const std::vector<int32_t> qo = {0, 1, 3, 3};  // decode, a 2-query chunk, an idle sequence
  const std::vector<int64_t> len = {8000, 8000, 300, 300, 40, 40};
  const CpuDecodeShape shape{3, 8, 2, 128};
  for (int threads : {1, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    CpuDecodePlan plan;
    PlanCpuDecode(shape, qo.data(), len.data(), nullptr, threads, &plan);
    ASSERT_EQ(plan.tiles.size(), 4u);  // 2 sequences with queries x 2 KV heads, 32 query vectors per tile
    std::vector<std::vector<int>> seen(plan.tiles.size());
    for (size_t j = 0; j < plan.jobs.size(); ++j) {
      if (j > 0) {
        EXPECT_GE(plan.jobs[j - 1].work, plan.jobs[j].work);
      }
      seen[static_cast<size_t>(plan.jobs[j].tile)].push_back(plan.jobs[j].part);
    }
    int64_t records = 0;
    for (size_t t = 0; t < plan.tiles.size(); ++t) {
      const CpuDecodePlan::Tile& tile = plan.tiles[t];
      std::sort(seen[t].begin(), seen[t].end());
      std::vector<int> parts(static_cast<size_t>(tile.num_parts));
      std::iota(parts.begin(), parts.end(), 0);
      EXPECT_EQ(seen[t], parts) << "tile " << t;
      if (tile.num_parts == 1) continue;
      EXPECT_EQ(tile.first_part, records) << "tile " << t;
      records += tile.num_parts * plan.RecordFloats(tile);
    }
    EXPECT_EQ(records, plan.workspace_floats);
    if (threads == 1) {
      EXPECT_TRUE(plan.split_tiles.empty());
    } else {
      EXPECT_GE(plan.tiles[0].num_parts, 2);  // the 8000-slot streams
      EXPECT_GE(plan.tiles[1].num_parts, 2);
      EXPECT_EQ(plan.tiles[2].num_parts, 1);  // 300 slots: under two parts' minimum
    }
    std::vector<int64_t> covered(len.size(), 0);
    for (const CpuDecodePlan::SlotJob& j : plan.slot_jobs) {
      EXPECT_EQ(j.slot_begin, covered[static_cast<size_t>(j.stream)]) << "stream " << j.stream;
      covered[static_cast<size_t>(j.stream)] = j.slot_end;
    }
    for (size_t s = 0; s < len.size(); ++s) {
      EXPECT_EQ(covered[s], s < 4 ? std::numeric_limits<int64_t>::max() : 0) << "stream " << s;
    }
  }
}

AttentionParams Params(const std::vector<int32_t>& qo, int hq, int hkv, int d) {
  AttentionParams p;
  p.num_seqs = static_cast<int>(qo.size()) - 1;
  p.num_qo_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.qo_indptr = qo.data();
  return p;
}

TEST(CpuDecodePlanTest, CheckNamesWhatDiffers) {
  std::vector<int32_t> qo = {0, 4, 5};
  const std::vector<int64_t> len = {20, 20, 9, 9};
  CpuDecodePlan plan;
  PlanCpuDecode(CpuDecodeShape{2, 8, 2, 64}, qo.data(), len.data(), nullptr, 0, &plan);
  EXPECT_TRUE(CpuDecodePlanCheck(plan, Params(qo, 8, 2, 64)).ok());
  EXPECT_NE(CpuDecodePlanCheck(plan, Params(qo, 8, 2, 128)).message().find("head_dim"), std::string::npos);
  EXPECT_NE(CpuDecodePlanCheck(plan, Params(qo, 8, 4, 64)).message().find("num_kv_heads"), std::string::npos);
  EXPECT_NE(CpuDecodePlanCheck(plan, Params(qo, 16, 2, 64)).message().find("num_qo_heads"), std::string::npos);
  EXPECT_NE(CpuDecodePlanCheck(plan, Params({0, 4}, 8, 2, 64)).message().find("num_seqs"), std::string::npos);
  qo[1] = 3;  // the same queries split differently between the sequences
  EXPECT_NE(CpuDecodePlanCheck(plan, Params(qo, 8, 2, 64)).message().find("qo_indptr[1]"), std::string::npos);
  EXPECT_FALSE(CpuDecodePlanCheck(CpuDecodePlan(), Params(qo, 8, 2, 64)).ok());  // never planned
}

}  // namespace
}  // namespace kvlab
