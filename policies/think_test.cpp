// think: the encoding it asks for, the channels a sealed block keeps on
// hand-built keys (exactly the top ones by energy), the decode (kept numbers
// exact, pruned channels 0, values whole), and its bad parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "policies/registry.h"

namespace kvlab {
namespace {

std::unique_ptr<KVPolicy> MakeThink(std::map<std::string, std::string> params, Status* s = nullptr) {
  std::unique_ptr<KVPolicy> p;
  const Status st = PolicyRegistry::Global().Create(PolicySpec{"think", std::move(params), "run.toml:4:1"}, &p);
  if (s != nullptr) *s = st;
  return st.ok() ? std::move(p) : nullptr;
}

KvEncoding ThinkEncoding(const KVPolicy& p, int d, int block, DType dtype, int64_t* residual) {
  KvEncoding e;
  EXPECT_TRUE(p.SealedEncoding(d, block, &e, residual));
  e.dtype = dtype;  // DeriveCacheShape's part
  return e;
}

TEST(ThinkTest, DefaultsAreThePapersAndTheEncodingKeepsHeadDimLessFloorRatio) {
  std::unique_ptr<KVPolicy> p = MakeThink({});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->params().ToString(), "ratio=0.4,recent=32");
  EXPECT_EQ(p->Concerns(), kConcernRepresentation);
  EXPECT_TRUE(p->CheckShape(8, 128, 16).ok());
  int64_t residual = -1;
  const KvEncoding e = ThinkEncoding(*p, 128, 16, DType::kBF16, &residual);
  EXPECT_EQ(e.kind, EncodingKind::kThink);
  EXPECT_EQ(e.key_channels, 128 - 51) << "the authors' int(128 * 0.4) = 51 channels pruned";
  EXPECT_EQ(e.tokens_per_block, 16);
  EXPECT_EQ(residual, 32) << "their recent_size: the newest keys stay whole";
  EXPECT_EQ(e.Validate(), "");
  EXPECT_EQ(e.Describe(), "think-k77of128-bf16");
  // K kept channels + V whole at 2 bytes, then the 128-bit mask.
  EXPECT_EQ(e.BlockBytes(), 16 * 77 * 2 + 16 * 128 * 2 + 16);
  EXPECT_TRUE(p->EncodingDeterministic());
  const KvEncoding half = ThinkEncoding(*MakeThink({{"ratio", "0.5"}}), 128, 16, DType::kF32, &residual);
  EXPECT_EQ(half.key_channels, 64);
  EXPECT_EQ(half.BlockBytes(), 16 * 64 * 4 + 16 * 128 * 4 + 16);
}

// Keys whose channel energies are known: channel c of token t is
// amp[c] * (1 + (t % 3)) * sign, so energy_c = amp[c]^2 * sum (1 + t%3)^2.
TEST(ThinkTest, ASealedBlockKeepsExactlyTheTopChannelsByKeyEnergy) {
  const int d = 40, T = 16;  // two mask words
  std::unique_ptr<KVPolicy> p = MakeThink({{"ratio", "0.6"}});  // floor(24) pruned, 16 kept
  ASSERT_NE(p, nullptr);
  int64_t residual = 0;
  const KvEncoding e = ThinkEncoding(*p, d, T, DType::kF32, &residual);
  ASSERT_EQ(e.key_channels, 16);
  std::vector<float> amp(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) amp[static_cast<size_t>(c)] = 0.1f + static_cast<float>((c * 7) % d) * 0.05f;
  amp[3] = amp[35] = 5.0f;  // a tie among the kept: both stay
  amp[10] = 1e-3f;          // near zero: pruned
  amp[32] = amp[15];        // a tie at the cut (16th and 17th): the lower channel stays
  std::vector<float> k(static_cast<size_t>(T * d)), v(k.size());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < d; ++c) {
      k[static_cast<size_t>(t * d + c)] = amp[static_cast<size_t>(c)] * static_cast<float>(1 + t % 3) * ((t + c) % 2 ? -1.f : 1.f);
      v[static_cast<size_t>(t * d + c)] = static_cast<float>(t * 100 + c);
    }
  }
  // The rule, computed here on its own: rank by amp (energy is amp^2 times a
  // common factor), ties to the lower channel.
  std::vector<bool> want(static_cast<size_t>(d), false);
  for (int i = 0; i < e.key_channels; ++i) {
    int best = -1;
    for (int c = 0; c < d; ++c) {
      if (!want[static_cast<size_t>(c)] && (best < 0 || amp[static_cast<size_t>(c)] > amp[static_cast<size_t>(best)])) best = c;
    }
    want[static_cast<size_t>(best)] = true;
  }
  EXPECT_TRUE(want[3] && want[35] && !want[10] && want[15] && !want[32]);
  std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()));
  EncodeKvBlock(e, k.data(), v.data(), block.data());
  int kept = 0;
  for (int c = 0; c < d; ++c) {
    const bool on = (ThinkKeptMaskWord(e, block.data(), c / 32) >> (c % 32)) & 1u;
    EXPECT_EQ(on, want[static_cast<size_t>(c)]) << "channel " << c << " amp " << amp[static_cast<size_t>(c)];
    kept += on;
  }
  EXPECT_EQ(kept, 16);
  std::vector<float> dk(k.size()), dv(v.size());
  DecodeKvBlock(e, block.data(), dk.data(), dv.data());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(t * d + c);
      EXPECT_EQ(dk[i], want[static_cast<size_t>(c)] ? k[i] : 0.0f) << "t " << t << " c " << c;
      EXPECT_EQ(dv[i], v[i]) << "values stay whole";
    }
  }
  // Same tokens, same bytes (the encoding is a function of the block alone).
  std::vector<uint8_t> again(block.size());
  EncodeKvBlock(e, k.data(), v.data(), again.data());
  EXPECT_EQ(std::memcmp(block.data(), again.data(), block.size()), 0);
}

TEST(ThinkTest, BadParametersNameThinkAndTheParameter) {
  for (const char* r : {"0", "1", "-0.2", "1.5"}) {
    Status s;
    EXPECT_EQ(MakeThink({{"ratio", r}}, &s), nullptr) << r;
    EXPECT_NE(s.message().find("'think'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'ratio'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("(0, 1)"), std::string::npos) << s.message();
  }
  Status s;
  EXPECT_EQ(MakeThink({{"recent", "-1"}}, &s), nullptr);
  EXPECT_NE(s.message().find("'recent'"), std::string::npos) << s.message();
  EXPECT_EQ(MakeThink({{"ration", "0.4"}}, &s), nullptr);
  EXPECT_NE(s.message().find("ration"), std::string::npos) << s.message();
  // A ratio that prunes no channel at this head_dim is a no-op: refused.
  std::unique_ptr<KVPolicy> tiny = MakeThink({{"ratio", "0.02"}});
  ASSERT_NE(tiny, nullptr);
  s = tiny->CheckShape(8, 32, 16);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("think: 'ratio'"), std::string::npos) << s.message();
  EXPECT_TRUE(tiny->CheckShape(8, 64, 16).ok()) << "floor(0.02 * 64) = 1 channel pruned";
}

TEST(ThinkTest, StacksWithSelectionAndHeadSharingButNotAnotherRepresentation) {
  PolicyStack stack;
  EXPECT_TRUE(PolicyStack::Create({{"snapkv", {}, "t"}, {"think", {}, "t"}}, &stack).ok());
  EXPECT_TRUE(PolicyStack::Create({{"gqa-reuse", {}, "t"}, {"think", {}, "t"}}, &stack).ok());
  const Status s = PolicyStack::Create({{"kivi", {}, "t"}, {"think", {}, "t"}}, &stack);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("think"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
