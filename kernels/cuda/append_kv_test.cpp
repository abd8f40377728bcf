// The CUDA cache writers against the CPU, byte for byte: AppendKv against
// AppendKV, EncodeSealKivi and EncodeSealQuant8 against EncodeKvBlock; and their argument checks,
// which run anywhere. Device tests skip when no GPU is present. The same file
// runs on the CPU emulation of CUDA (paged_decode_emu_test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/append_kv.h"
#include "kernels/cuda/append_kv.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/kv_encoding.h"

namespace kvlab {
namespace cuda_test {
namespace {

TEST(AppendKvCudaTest, MatchesCpuAppendKV) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int bs : {1, 16}) {
      for (int d : {64, 128}) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " block_size " + std::to_string(bs) + " d " + std::to_string(d));
        const int hkv = 3;
        const std::vector<int> q_lens = {1, 5, 0, 17, 1};
        const std::vector<int> lens = {9, 5, 3, 40, 1};
        std::vector<int64_t> plain_len;
        for (size_t i = 0; i < lens.size(); ++i) {
          for (int h = 0; h < hkv; ++h) plain_len.push_back(lens[i]);
        }
        HostCache hc = MakePlainCache(dtype, bs, d, plain_len, &rng);
        std::vector<int32_t> qo_indptr = {0};
        for (int ql : q_lens) qo_indptr.push_back(qo_indptr.back() + ql);
        const int nseq = static_cast<int>(q_lens.size()), total_q = qo_indptr.back();
        std::vector<float> k(static_cast<size_t>(total_q) * hkv * d), v(k.size());
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (float& x : k) x = u(rng);
        for (float& x : v) x = u(rng);
        // Rounding corner cases: bf16 and fp16 ties, fp16 overflow and subnormals, -0.
        const float special[] = {1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, 65520.0f, -65519.0f, 1e-8f,
                                 -3e-6f, -0.0f, 1.0f + 1.0f / 2048.0f};
        for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); ++i) k[i * 3] = v[i * 5 + 1] = special[i];
        PagedKV host_kv = HostView(hc, dtype, bs, d);
        ASSERT_TRUE(AppendKVCheck(host_kv, qo_indptr.data(), nseq, hkv).ok());

        DeviceCache dc;
        DeviceBuffer d_qo, d_k, d_v;
        CUDA_ASSERT(dc.Upload(hc));
        CUDA_ASSERT(d_qo.Upload(qo_indptr));
        CUDA_ASSERT(d_k.Upload(k));
        CUDA_ASSERT(d_v.Upload(v));
        AppendKV(host_kv, qo_indptr.data(), nseq, hkv, k.data(), v.data());  // expected, in place

        const PagedKV kv = dc.On(host_kv);
        CUDA_ASSERT(cuda::AppendKv(kv, d_qo.as<int32_t>(), nseq, hkv, total_q, d_k.as<float>(), d_v.as<float>(), nullptr));
        CUDA_ASSERT(cudaDeviceSynchronize());
        std::vector<uint8_t> got;
        CUDA_ASSERT(dc.pool.Download(&got));
        ExpectSameBytes(got, hc.pool, "the pool");
      }
    }
  }
}

// What the seal tests share: five jobs over the four streams of a host cache
// (job j seals stream kStream[j]'s tokens_per_block slots from first[j] into
// encoded block kDst[j]), the blocks EncodeKvBlock makes of them on the host,
// device copies of the cache and the jobs, and the check of the device's
// encoded blocks against the host's, byte for byte.
class SealHarness {
 public:
  static constexpr int kJobs = 5;
  SealHarness(const KvEncoding& e, DType dtype, const PagedKV& host_kv, std::vector<int32_t> first)
      : bb_(e.BlockBytes()), first_(std::move(first)), want_(static_cast<size_t>(kJobs * bb_), 0xab) {
    const int tpb = e.tokens_per_block, d = e.head_dim;
    std::vector<float> k(static_cast<size_t>(tpb) * d), v(k.size());
    for (int j = 0; j < kJobs; ++j) {
      for (int t = 0; t < tpb; ++t) {
        ConvertToF32(dtype, host_kv.KeyPtr(kStream[j], first_[j] + t), k.data() + static_cast<size_t>(t) * d, d);
        ConvertToF32(dtype, host_kv.ValuePtr(kStream[j], first_[j] + t), v.data() + static_cast<size_t>(t) * d, d);
      }
      EncodeKvBlock(e, k.data(), v.data(), want_.data() + kDst[j] * bb_);
    }
  }

  // The cache `hc` (seen through host_kv) and the jobs on the device; the
  // encoded blocks start as 0xab bytes.
  cudaError_t Upload(const HostCache& hc, const PagedKV& host_kv) {
    cudaError_t err = cache_.Upload(hc);
    if (err == cudaSuccess) err = enc_.Upload(std::vector<uint8_t>(want_.size(), 0xab));
    if (err == cudaSuccess) err = stream_.Upload(std::vector<int32_t>(kStream, kStream + kJobs));
    if (err == cudaSuccess) err = first_slot_.Upload(first_);
    if (err == cudaSuccess) err = dst_.Upload(std::vector<int32_t>(kDst, kDst + kJobs));
    kv_ = cache_.On(host_kv);
    jobs_.num_jobs = kJobs;
    jobs_.stream = stream_.as<int32_t>();
    jobs_.first_slot = first_slot_.as<int32_t>();
    jobs_.dst_block = dst_.as<int32_t>();
    return err;
  }
  const PagedKV& kv() const { return kv_; }
  const cuda::SealJobs& jobs() const { return jobs_; }
  uint8_t* enc() const { return enc_.as<uint8_t>(); }
  int64_t block_bytes() const { return bb_; }

  // After the seal: the device's encoded blocks equal the host's.
  void ExpectBlocksMatch() const {
    CUDA_ASSERT(cudaDeviceSynchronize());
    std::vector<uint8_t> got;
    CUDA_ASSERT(enc_.Download(&got));
    ExpectSameBytes(got, want_, "the encoded blocks", bb_);
  }

 private:
  static constexpr int32_t kStream[kJobs] = {0, 0, 1, 2, 3};
  static constexpr int32_t kDst[kJobs] = {3, 0, 4, 1, 2};
  int64_t bb_;
  std::vector<int32_t> first_;
  std::vector<uint8_t> want_;
  DeviceCache cache_;
  DeviceBuffer enc_, stream_, first_slot_, dst_;
  PagedKV kv_;
  cuda::SealJobs jobs_;
};

TEST(EncodeSealCudaTest, MatchesEncodeKvBlock) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  struct Fmt {
    int bits, group;
    QuantAxis key_axis, value_axis;
  };
  const Fmt fmts[] = {{2, 32, QuantAxis::kChannel, QuantAxis::kToken},
                      {4, 64, QuantAxis::kChannel, QuantAxis::kToken},
                      {2, 4, QuantAxis::kChannel, QuantAxis::kToken},
                      {4, 16, QuantAxis::kToken, QuantAxis::kChannel},
                      {2, 128, QuantAxis::kChannel, QuantAxis::kToken}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int bs : {1, 16}) {
      for (const Fmt& f : fmts) {
        const int d = f.group > 64 ? 128 : 64;
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " block_size " + std::to_string(bs) + " bits " +
                     std::to_string(f.bits) + " group " + std::to_string(f.group));
        KvEncoding e;
        e.kind = EncodingKind::kKivi;
        e.bits = f.bits;
        e.head_dim = d;
        e.tokens_per_block = f.group;
        e.group = f.group;
        e.key_axis = f.key_axis;
        e.value_axis = f.value_axis;
        ASSERT_EQ(e.Validate(), "");
        const int tpb = e.tokens_per_block;
        std::vector<int64_t> plain_len = {2LL * tpb + 3, tpb, tpb + 16, 3LL * tpb};
        HostCache hc = MakePlainCache(dtype, bs, d, plain_len, &rng);
        PagedKV host_kv = HostView(hc, dtype, bs, d);
        // Constant channels (scale 0), signed zeros, wide ranges.
        for (int s = 0; s < host_kv.num_streams; ++s) {
          for (int64_t t = 0; t < plain_len[s]; ++t) {
            std::vector<float> row(static_cast<size_t>(d));
            ConvertToF32(dtype, host_kv.KeyPtr(s, t), row.data(), d);
            row[0] = 0.5f;
            row[1] = (t % 2 == 0) ? 0.0f : -0.0f;
            row[2] *= 1000.0f;
            ConvertFromF32(dtype, row.data(), host_kv.KeyPtr(s, t), d);
          }
        }
        SealHarness h(e, dtype, host_kv, {0, tpb, 0, 16, 2 * tpb});
        CUDA_ASSERT(h.Upload(hc, host_kv));
        CUDA_ASSERT(cuda::EncodeSealKivi(h.kv(), e, h.enc(), h.block_bytes(), h.jobs(), nullptr));
        h.ExpectBlocksMatch();
      }
    }
  }
}

// int8 / fp8 blocks of tpb tokens, per-token or per-block scales, over every
// storage dtype and block sizes 1 and 16. Rows with rounding ties (chosen so
// that the scale is a power of two: x / scale is exact), fp8 subnormals,
// signed zeros, all-zero rows (scale 0) and large values.
TEST(EncodeSealCudaTest, Quant8MatchesEncodeKvBlock) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(13);
  struct Fmt {
    EncodingKind kind;
    int tpb;
    bool per_token;
  };
  const Fmt fmts[] = {{EncodingKind::kInt8, 16, true},  {EncodingKind::kFp8, 16, true},
                      {EncodingKind::kInt8, 32, false}, {EncodingKind::kFp8, 32, false},
                      {EncodingKind::kFp8, 1, true},    {EncodingKind::kInt8, 4, true}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int bs : {1, 16}) {
      for (const Fmt& f : fmts) {
        const int d = f.tpb > 16 ? 64 : 128;
        const bool fp8 = f.kind == EncodingKind::kFp8;
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " block_size " + std::to_string(bs) + (fp8 ? " fp8" : " int8") +
                     " tpb " + std::to_string(f.tpb) + (f.per_token ? " per-token" : " per-block"));
        KvEncoding e;
        e.kind = f.kind;
        e.bits = 8;
        e.head_dim = d;
        e.tokens_per_block = f.tpb;
        e.group = f.tpb;
        e.scale_per_token = f.per_token;
        ASSERT_EQ(e.Validate(), "");
        const int tpb = f.tpb;
        std::vector<int64_t> plain_len = {2LL * tpb + 3, tpb, tpb + 16, 3LL * tpb};
        HostCache hc = MakePlainCache(dtype, bs, d, plain_len, &rng);
        PagedKV host_kv = HostView(hc, dtype, bs, d);
        // Ties: fp8 amax 28 -> scale 1/16; int8 amax 15.875 -> scale 1/8.
        const std::vector<float> fp8_row = {28.0f, 17.0f / 256, 19.0f / 256, 3.0f / 16384, -0.0f, -17.0f / 256,
                                            1.0f / 16384, -29.0f / 256};
        const std::vector<float> int8_row = {15.875f, 2.5f / 8, 3.5f / 8, -2.5f / 8, -0.0f, -3.5f / 8, 0.5f / 8, 1.5f / 8};
        for (int s = 0; s < host_kv.num_streams; ++s) {
          for (int64_t t = 0; t < plain_len[s]; ++t) {
            for (uint8_t* ptr : {host_kv.KeyPtr(s, t), host_kv.ValuePtr(s, t)}) {
              std::vector<float> row(static_cast<size_t>(d));
              ConvertToF32(dtype, ptr, row.data(), d);
              if (t % 4 == 1) {
                const std::vector<float>& special = fp8 ? fp8_row : int8_row;
                std::copy(special.begin(), special.end(), row.begin());
              } else if (t % 4 == 2) {
                std::fill(row.begin(), row.end(), 0.0f);
              } else {
                row[3] *= 1000.0f;
                row[4] = (t % 8 == 0) ? 0.0f : -0.0f;
              }
              ConvertFromF32(dtype, row.data(), ptr, d);
            }
          }
        }
        SealHarness h(e, dtype, host_kv, {0, tpb, 0, std::min(16, tpb), 2 * tpb});
        CUDA_ASSERT(h.Upload(hc, host_kv));
        PagedKV kv = h.kv();
        kv.last_block_len = nullptr;  // not read by the seal
        EXPECT_EQ(cuda::EncodeSealQuant8Check(kv, e, h.enc(), h.block_bytes(), h.jobs()), "");
        CUDA_ASSERT(cuda::EncodeSealQuant8(kv, e, h.enc(), h.block_bytes(), h.jobs(), nullptr));
        h.ExpectBlocksMatch();
      }
    }
  }
}

TEST(AppendKvArgsTest, RejectsBadCallsBeforeLaunching) {
  alignas(16) static float fake[64];
  static int32_t fake_i[8];
  PagedKV kv;
  kv.base = reinterpret_cast<uint8_t*>(fake);
  kv.block_bytes = 2 * 16 * 64 * 2;
  kv.dtype = DType::kF16;
  kv.block_size = 16;
  kv.head_dim = 64;
  kv.num_streams = 2;
  kv.indptr = kv.indices = kv.last_block_len = fake_i;
  EXPECT_EQ(cuda::AppendKvCheck(kv, fake_i, 1, 2, 1, fake, fake), "");
  EXPECT_EQ(cuda::AppendKv(kv, fake_i, 2, 2, 1, fake, fake, nullptr), cudaErrorInvalidValue);  // 4 streams expected
  EXPECT_EQ(cuda::AppendKv(kv, fake_i, 1, 2, 1, nullptr, fake, nullptr), cudaErrorInvalidValue);
  PagedKV odd = kv;
  odd.head_dim = 6;
  EXPECT_EQ(cuda::AppendKv(odd, fake_i, 1, 2, 1, fake, fake, nullptr), cudaErrorNotSupported);

  KvEncoding int8;
  int8.kind = EncodingKind::kInt8;
  int8.bits = 8;
  int8.head_dim = 64;
  int8.tokens_per_block = 16;
  cuda::SealJobs jobs;
  jobs.num_jobs = 1;
  jobs.stream = jobs.first_slot = jobs.dst_block = fake_i;
  EXPECT_EQ(cuda::EncodeSealKivi(kv, int8, reinterpret_cast<uint8_t*>(fake), 4096, jobs, nullptr),
            cudaErrorNotSupported);
  KvEncoding kivi;
  kivi.bits = 3;  // invalid
  kivi.head_dim = 64;
  EXPECT_EQ(cuda::EncodeSealKivi(kv, kivi, reinterpret_cast<uint8_t*>(fake), 4096, jobs, nullptr),
            cudaErrorInvalidValue);

  // EncodeSealQuant8: int8 / fp8 only; enc_block_bytes must hold a block.
  EXPECT_EQ(cuda::EncodeSealQuant8Check(kv, int8, reinterpret_cast<uint8_t*>(fake), int8.BlockBytes(), jobs), "");
  kivi.bits = 2;
  kivi.tokens_per_block = kivi.group = 16;
  EXPECT_EQ(cuda::EncodeSealQuant8(kv, kivi, reinterpret_cast<uint8_t*>(fake), 4096, jobs, nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(cuda::EncodeSealQuant8(kv, int8, reinterpret_cast<uint8_t*>(fake), int8.BlockBytes() - 2, jobs, nullptr),
            cudaErrorInvalidValue);
  KvEncoding fp8_bad = int8;
  fp8_bad.kind = EncodingKind::kFp8;
  fp8_bad.bits = 4;  // invalid
  EXPECT_EQ(cuda::EncodeSealQuant8(kv, fp8_bad, reinterpret_cast<uint8_t*>(fake), 4096, jobs, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace cuda_test
}  // namespace kvlab
