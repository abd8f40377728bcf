// Encoded KV blocks: round-trip error within the bound each format's bits and
// scales allow, per axis; exact byte sizes; parameter validation.
#include "kernels/kv_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kvlab {
namespace {

// Keys with strong per-channel outliers (KIVI's observation) and values without.
void MakeKV(int T, int D, uint32_t seed, std::vector<float>* k, std::vector<float>* v) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  k->resize(static_cast<size_t>(T) * D);
  v->resize(k->size());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < D; ++c) {
      (*k)[static_cast<size_t>(t * D + c)] = n(rng) + (c % 7 == 0 ? 8.0f * (1 + c % 3) : 0.0f);
      (*v)[static_cast<size_t>(t * D + c)] = n(rng);
    }
  }
}

// Max |x - decode(x)| divided by the group's quantization step, over a block:
// must be <= 1/2 plus the fp16 rounding of scale and zero.
double WorstStepError(const KvEncoding& e, QuantAxis axis, const std::vector<float>& x, const std::vector<float>& y) {
  const int T = e.tokens_per_block, D = e.head_dim;
  const double qmax = (1 << e.bits) - 1;
  double worst = 0;
  const int groups = axis == QuantAxis::kChannel ? D : T * (D / e.group);
  for (int g = 0; g < groups; ++g) {
    std::vector<int> idx;
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < D; ++c) {
        const int gg = axis == QuantAxis::kChannel ? c : t * (D / e.group) + c / e.group;
        if (gg == g) idx.push_back(t * D + c);
      }
    double mn = INFINITY, mx = -INFINITY;
    for (int i : idx) mn = std::min(mn, double(x[i])), mx = std::max(mx, double(x[i]));
    const double step = (mx - mn) / qmax;
    const double slack = std::abs(mn) * 1e-3 + step * qmax * 1e-3;  // fp16 scale/zero rounding
    for (int i : idx) worst = std::max(worst, (std::abs(double(x[i]) - y[i]) - slack) / std::max(step, 1e-12));
  }
  return worst;
}

struct KiviCase {
  int bits, group;
  QuantAxis kaxis, vaxis;
};

class KiviRoundTrip : public ::testing::TestWithParam<KiviCase> {};

TEST_P(KiviRoundTrip, ErrorWithinHalfAStepPerGroup) {
  const KiviCase c = GetParam();
  KvEncoding e;
  e.kind = EncodingKind::kKivi;
  e.bits = c.bits;
  e.group = c.group;
  e.tokens_per_block = c.group;
  e.head_dim = 128;
  e.key_axis = c.kaxis;
  e.value_axis = c.vaxis;
  ASSERT_EQ(e.Validate(), "");
  std::vector<float> k, v, k2(static_cast<size_t>(c.group) * 128), v2(k2.size());
  MakeKV(c.group, 128, 17, &k, &v);
  std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()), 0);
  EncodeKvBlock(e, k.data(), v.data(), block.data());
  DecodeKvBlock(e, block.data(), k2.data(), v2.data());
  EXPECT_LE(WorstStepError(e, c.kaxis, k, k2), 0.5 + 1e-6);
  EXPECT_LE(WorstStepError(e, c.vaxis, v, v2), 0.5 + 1e-6);
  // And it is a real quantization: not lossless.
  double err = 0;
  for (size_t i = 0; i < k.size(); ++i) err = std::max(err, double(std::abs(k[i] - k2[i])));
  EXPECT_GT(err, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Axes, KiviRoundTrip,
                         ::testing::Values(KiviCase{2, 32, QuantAxis::kChannel, QuantAxis::kToken},
                                           KiviCase{4, 32, QuantAxis::kChannel, QuantAxis::kToken},
                                           KiviCase{2, 32, QuantAxis::kToken, QuantAxis::kToken},
                                           KiviCase{2, 32, QuantAxis::kChannel, QuantAxis::kChannel},
                                           KiviCase{2, 64, QuantAxis::kToken, QuantAxis::kChannel},
                                           KiviCase{2, 128, QuantAxis::kChannel, QuantAxis::kToken}));

// KIVI's finding, reproduced on outlier keys: per-channel key quantization
// has a much smaller error than per-token.
TEST(KiviTest, PerChannelKeysBeatPerTokenOnOutlierChannels) {
  std::vector<float> k, v, k2(32 * 128), v2(k2.size());
  MakeKV(32, 128, 5, &k, &v);
  double err[2];
  for (int a = 0; a < 2; ++a) {
    KvEncoding e;
    e.bits = 2;
    e.head_dim = 128;
    e.key_axis = a == 0 ? QuantAxis::kChannel : QuantAxis::kToken;
    std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()));
    EncodeKvBlock(e, k.data(), v.data(), block.data());
    DecodeKvBlock(e, block.data(), k2.data(), v2.data());
    err[a] = 0;
    for (size_t i = 0; i < k.size(); ++i) err[a] += std::abs(k[i] - k2[i]);
  }
  EXPECT_LT(err[0] * 2, err[1]);
}

// Bytes of one block: codes at `bits` per number plus fp16 scale and zero
// per group (KIVI), or codes plus fp16 scales (int8/fp8).
TEST(KvEncodingTest, BlockBytesAreTheAnalyticSize) {
  KvEncoding e;  // KIVI-2, group 32, d 128
  e.head_dim = 128;
  EXPECT_EQ(e.BlockBytes(), 2 * (32 * 128 * 2 / 8) + (128 + 32 * 4) * 2 * 2);  // 3072
  e.bits = 4;
  EXPECT_EQ(e.BlockBytes(), 2 * (32 * 128 / 2) + (128 + 32 * 4) * 4);
  KvEncoding q;
  q.kind = EncodingKind::kFp8;
  q.bits = 8;
  q.head_dim = 128;
  q.tokens_per_block = 16;
  EXPECT_EQ(q.BlockBytes(), 2 * 16 * 128 + 2 * 16 * 2);
  q.scale_per_token = false;
  EXPECT_EQ(q.BlockBytes(), 2 * 16 * 128 + 2 * 2);
}

TEST(KvEncodingTest, Sym8RoundTrip) {
  for (EncodingKind kind : {EncodingKind::kInt8, EncodingKind::kFp8}) {
    for (bool per_token : {true, false}) {
      KvEncoding e;
      e.kind = kind;
      e.bits = 8;
      e.head_dim = 64;
      e.tokens_per_block = 16;
      e.scale_per_token = per_token;
      ASSERT_EQ(e.Validate(), "");
      std::vector<float> k, v, k2(16 * 64), v2(k2.size());
      MakeKV(16, 64, 3, &k, &v);
      std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()));
      EncodeKvBlock(e, k.data(), v.data(), block.data());
      DecodeKvBlock(e, block.data(), k2.data(), v2.data());
      for (int t = 0; t < 16; ++t) {
        double amax = 0;
        const int r0 = per_token ? t : 0, r1 = per_token ? t + 1 : 16;
        for (int i = r0 * 64; i < r1 * 64; ++i) amax = std::max(amax, double(std::abs(k[i])));
        for (int c = 0; c < 64; ++c) {
          const int i = t * 64 + c;
          // int8: half a step of amax/127; e4m3: 3 mantissa bits -> relative 2^-4, plus the subnormal step.
          const double bound = kind == EncodingKind::kInt8 ? amax / 127 * 0.5 * 1.01
                                                           : std::abs(k[i]) / 16 + amax / 448 * std::ldexp(1.0, -9) + amax * 1e-3;
          ASSERT_LE(std::abs(k[i] - k2[i]), bound) << "t=" << t << " c=" << c;
        }
      }
    }
  }
}

TEST(KvEncodingTest, ValidateNamesTheParameter) {
  KvEncoding e;
  e.head_dim = 128;
  e.bits = 3;
  EXPECT_NE(e.Validate().find("'bits'"), std::string::npos);
  e.bits = 2;
  e.group = 48;
  e.tokens_per_block = 48;
  EXPECT_NE(e.Validate().find("'group'"), std::string::npos);  // per-token values need group | head_dim
  e.value_axis = QuantAxis::kChannel;
  EXPECT_EQ(e.Validate(), "");
  KvEncoding q;
  q.kind = EncodingKind::kInt8;
  q.head_dim = 64;
  q.bits = 4;
  EXPECT_NE(q.Validate().find("'bits'"), std::string::npos);
  q.bits = 8;
  EXPECT_EQ(q.Validate(), "");
}

// KiviKeyRange, from a block's key scales and zeros alone: every decoded key
// lies in it, and with keys per channel each end is a decoded key (the
// channel's smallest element decodes to code 0, its largest to the top code).
TEST(KvEncodingTest, KiviKeyRangeHoldsTheDecodedKeysFromScalesAndZerosAlone) {
  for (int bits : {2, 4}) {
    for (QuantAxis axis : {QuantAxis::kChannel, QuantAxis::kToken}) {
      KvEncoding e;
      e.bits = bits;
      e.head_dim = 64;
      e.group = e.tokens_per_block = 32;
      e.key_axis = axis;
      std::vector<float> k, v, dk(32 * 64), dv(dk.size()), lo(64), hi(64);
      MakeKV(32, 64, 17 + bits, &k, &v);
      std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()));
      EncodeKvBlock(e, k.data(), v.data(), block.data());
      DecodeKvBlock(e, block.data(), dk.data(), dv.data());
      // The codes are not read: scrambling them leaves the range as it is.
      std::vector<uint8_t> scrambled = block;
      for (int64_t i = 0; i < e.CodeBytes(); ++i) scrambled[static_cast<size_t>(i)] ^= 0x5a;
      std::vector<float> lo2(64), hi2(64);
      KiviKeyRange(e, block.data(), lo.data(), hi.data());
      KiviKeyRange(e, scrambled.data(), lo2.data(), hi2.data());
      EXPECT_EQ(lo, lo2);
      EXPECT_EQ(hi, hi2);
      EXPECT_EQ(KiviKeyRangeBytes(e), e.NumKeyParams() * 4);
      for (int c = 0; c < 64; ++c) {
        float mn = dk[static_cast<size_t>(c)], mx = mn;
        for (int t = 0; t < 32; ++t) {
          mn = std::min(mn, dk[static_cast<size_t>(t * 64 + c)]);
          mx = std::max(mx, dk[static_cast<size_t>(t * 64 + c)]);
        }
        EXPECT_LE(lo[static_cast<size_t>(c)], mn) << "bits " << bits << " channel " << c;
        EXPECT_GE(hi[static_cast<size_t>(c)], mx) << "bits " << bits << " channel " << c;
        if (axis == QuantAxis::kChannel) {
          EXPECT_EQ(lo[static_cast<size_t>(c)], mn) << "bits " << bits << " channel " << c;
          EXPECT_EQ(hi[static_cast<size_t>(c)], mx) << "bits " << bits << " channel " << c;
        }
      }
    }
  }
  // By hand: scale 0.5, zero -1 on every channel (per-channel keys, 2 bits): [-1, 0.5].
  KvEncoding e;
  e.head_dim = 8;
  e.group = e.tokens_per_block = 4;
  std::vector<uint8_t> block(static_cast<size_t>(e.BlockBytes()), 0);
  uint16_t* params = reinterpret_cast<uint16_t*>(block.data() + 2 * e.CodeBytes());
  for (int c = 0; c < 8; ++c) params[c] = F32ToF16(0.5f), params[8 + c] = F32ToF16(-1.0f);
  std::vector<float> lo(8), hi(8);
  KiviKeyRange(e, block.data(), lo.data(), hi.data());
  EXPECT_EQ(lo, std::vector<float>(8, -1.0f));
  EXPECT_EQ(hi, std::vector<float>(8, 0.5f));
}

}  // namespace
}  // namespace kvlab
