// Helpers the selection policies' tests share: policies made by name, the
// kept set of a hand-built stream, an error naming a parameter. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "policies/registry.h"

namespace kvlab {
namespace testing_util {

using Params = std::map<std::string, std::string>;
using Slots = std::vector<int64_t>;

inline std::unique_ptr<KVPolicy> Make(const std::string& name, const Params& params = {}) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{name, params, "test"}, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

// Creating `name` with `params` fails and the message names `param`.
inline void ExpectErrorNames(const std::string& name, const Params& params, const std::string& param) {
  std::unique_ptr<KVPolicy> p;
  Status s = PolicyRegistry::Global().Create(PolicySpec{name, params, "test"}, &p);
  ASSERT_FALSE(s.ok()) << name << " accepted a bad '" << param << "'";
  EXPECT_NE(s.message().find("'" + param + "'"), std::string::npos) << s.message();
}

// A stream of n slots with positions 0..n-1, the given scores (zero-padded),
// and a sequence that has processed seq_length tokens (default n).
// Not copyable: `state` points into the vectors.
struct TestStream {
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  std::vector<int32_t> positions;
  std::vector<float> score;
  StreamState state;

  explicit TestStream(int64_t n, std::vector<float> scores = {}, int64_t seq_length = -1) {
    positions.resize(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), 0);
    score = std::move(scores);
    score.resize(static_cast<size_t>(n), 0.0f);
    state.num_tokens = n;
    state.positions = positions.data();
    state.score = score.data();
    state.seq_length = seq_length < 0 ? n : seq_length;
  }
};

// The kept set, or every slot when the policy keeps all (returns false).
inline Slots Kept(const KVPolicy& p, const StreamState& s) {
  Slots keep;
  if (!p.SelectSlots(s, &keep)) {
    keep.resize(static_cast<size_t>(s.num_tokens));
    std::iota(keep.begin(), keep.end(), 0);
  }
  return keep;
}

inline Slots Range(int64_t begin, int64_t end) {
  Slots r(static_cast<size_t>(end - begin));
  std::iota(r.begin(), r.end(), begin);
  return r;
}

inline Slots Concat(Slots a, const Slots& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace testing_util
}  // namespace kvlab
