// The offload moves against the CPU: CoalesceBlockRuns' runs, argument
// checks without a device, device <-> pinned-host round trips bit-identical,
// and the per-layer prefetch handshake (MarkLayerReady / WaitLayerReady).
// Device tests skip without a GPU. Built into select_compact_test and, on
// the CPU emulation of CUDA, select_compact_emu_test.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/offload.h"

namespace kvlab {
namespace cuda_test {
namespace {

TEST(OffloadTest, CoalescesContiguousRuns) {
  const std::vector<int32_t> src = {5, 6, 7, 2, 3, 9, 10, 11, 4};
  const std::vector<int32_t> dst = {0, 1, 2, 3, 4, 8, 6, 7, 5};
  const std::vector<cuda::BlockRun> runs = cuda::CoalesceBlockRuns(src.data(), dst.data(), 9);
  ASSERT_EQ(runs.size(), 5u);
  const int32_t want[5][3] = {{5, 0, 3}, {2, 3, 2}, {9, 8, 1}, {10, 6, 2}, {4, 5, 1}};
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].src, want[i][0]) << i;
    EXPECT_EQ(runs[i].dst, want[i][1]) << i;
    EXPECT_EQ(runs[i].count, want[i][2]) << i;
  }
  EXPECT_TRUE(cuda::CoalesceBlockRuns(nullptr, nullptr, 0).empty());
}

TEST(OffloadTest, RejectsBadArgumentsWithoutADevice) {
  cuda::CopyEngine none;  // never created: no stream
  uint8_t a[16] = {}, b[16] = {};
  const int32_t ids[1] = {0};
  cuda::BlockMoves moves{ids, ids, 1};
  int copies = 7;
  EXPECT_EQ(cuda::OffloadBlocks(none, a, b, 16, moves, &copies), cudaErrorInvalidValue);
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(cuda::MarkLayerReady(none, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::WaitLayerReady(none, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::CopyAfter(none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DestroyCopyEngine(&none), cudaSuccess);  // nothing to release
  EXPECT_EQ(cuda::CreateCopyEngine(-1, &none), cudaErrorInvalidValue);
}

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { cuda::FreePinned(p_); }
  cudaError_t Alloc(int64_t bytes) { return cuda::AllocPinned(bytes, &p_); }
  uint8_t* data() const { return p_; }

 private:
  uint8_t* p_ = nullptr;
};

class OffloadCudaTest : public ::testing::TestWithParam<int> {};  // block_size (bf16, head_dim 64)

TEST_P(OffloadCudaTest, RoundTripIsBitIdentical) {
  SKIP_WITHOUT_GPU();
  const int64_t block_bytes = 2LL * GetParam() * 64 * 2;
  const int num_dev = 40, num_host = 12;
  std::mt19937 rng(9);
  std::vector<uint8_t> pool(static_cast<size_t>(num_dev * block_bytes));
  for (uint8_t& x : pool) x = static_cast<uint8_t>(rng());
  DeviceBuffer d_pool;
  CUDA_ASSERT(d_pool.Upload(pool));
  PinnedBuffer host;
  CUDA_ASSERT(host.Alloc(num_host * block_bytes));
  std::memset(host.data(), 0, static_cast<size_t>(num_host * block_bytes));
  cuda::CopyEngine engine;
  CUDA_ASSERT(cuda::CreateCopyEngine(2, &engine));

  const std::vector<int32_t> dev_out = {3, 4, 5, 10, 0, 39, 38, 20, 21};
  const std::vector<int32_t> host_in = {0, 1, 2, 3, 7, 4, 5, 6, 8};
  int copies = 0;
  CUDA_ASSERT(cuda::CopyAfter(engine, nullptr));  // after the upload on the default stream
  CUDA_ASSERT(cuda::OffloadBlocks(engine, d_pool.as<uint8_t>(), host.data(), block_bytes,
                                  {dev_out.data(), host_in.data(), 9}, &copies));
  EXPECT_EQ(copies, 7);  // 3-4-5 -> 0-1-2 is one copy; 20 -> 6, 21 -> 8 are two
  CUDA_ASSERT(cuda::SyncCopies(engine));
  for (size_t i = 0; i < dev_out.size(); ++i) {
    EXPECT_EQ(std::memcmp(host.data() + host_in[i] * block_bytes, pool.data() + dev_out[i] * block_bytes,
                          static_cast<size_t>(block_bytes)),
              0)
        << "device block " << dev_out[i] << " -> host block " << host_in[i];
  }

  // Back to other device blocks, over garbage.
  CUDA_ASSERT(cudaMemset(d_pool.as<void>(), 0xee, pool.size()));
  CUDA_ASSERT(cudaDeviceSynchronize());
  const std::vector<int32_t> dev_back = {30, 31, 32, 1, 2, 11, 12, 13, 14};
  CUDA_ASSERT(cuda::PrefetchBlocks(engine, host.data(), d_pool.as<uint8_t>(), block_bytes,
                                   {dev_back.data(), host_in.data(), 9}, &copies));
  EXPECT_EQ(copies, 5);  // 30-32 <- 0-2 and 11-13 <- 4-6 are one copy each; 1 <- 3, 2 <- 7, 14 <- 8
  CUDA_ASSERT(cuda::SyncCopies(engine));
  std::vector<uint8_t> got;
  CUDA_ASSERT(d_pool.Download(&got));
  std::vector<uint8_t> want(pool.size(), 0xee);
  for (size_t i = 0; i < dev_back.size(); ++i) {
    std::memcpy(want.data() + dev_back[i] * block_bytes, pool.data() + dev_out[i] * block_bytes,
                static_cast<size_t>(block_bytes));
  }
  ExpectSameBytes(got, want, "the pool after the round trip");

  // Bad moves are refused before anything is queued.
  const std::vector<int32_t> bad = {1, -1};
  EXPECT_EQ(cuda::PrefetchBlocks(engine, host.data(), d_pool.as<uint8_t>(), block_bytes, {bad.data(), bad.data(), 2},
                                 &copies),
            cudaErrorInvalidValue);
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(cuda::OffloadBlocks(engine, nullptr, host.data(), block_bytes, {bad.data(), bad.data(), 1}, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MarkLayerReady(engine, 2), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::WaitLayerReady(engine, -1, nullptr), cudaErrorInvalidValue);
  CUDA_ASSERT(cuda::DestroyCopyEngine(&engine));
  EXPECT_EQ(engine.stream, nullptr);
  EXPECT_TRUE(engine.layer_ready.empty());
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, OffloadCudaTest, ::testing::Values(1, 16),
                         [](const ::testing::TestParamInfo<int>& i) { return "bs" + std::to_string(i.param); });

// The per-layer handshake: the compute stream poisons the layers' device
// blocks, the copy stream (after CopyAfter) brings every layer back, and the
// compute stream, after WaitLayerReady(l), copies layer l out. Each layer is
// 4 MiB, so on a GPU a missing wait or CopyAfter would read poison or be
// overwritten by it.
TEST(OffloadCudaTest, PrefetchIsVisibleAfterTheLayerWait) {
  SKIP_WITHOUT_GPU();
  const int layers = 4, blocks_per_layer = 64;
  const int64_t block_bytes = 64 << 10;
  const int64_t layer_bytes = blocks_per_layer * block_bytes;
  std::mt19937 rng(4);
  PinnedBuffer host;
  CUDA_ASSERT(host.Alloc(layers * layer_bytes));
  for (int64_t i = 0; i < layers * layer_bytes; i += 4) {
    const uint32_t r = static_cast<uint32_t>(rng());
    std::memcpy(host.data() + i, &r, 4);
  }
  DeviceBuffer d_pool, d_check;
  CUDA_ASSERT(d_pool.Alloc(static_cast<size_t>(layers * layer_bytes)));
  CUDA_ASSERT(d_check.Alloc(static_cast<size_t>(layers * layer_bytes)));
  cudaStream_t compute = nullptr;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cuda::CopyEngine engine;
  CUDA_ASSERT(cuda::CreateCopyEngine(layers, &engine));

  // Device layer l lives in blocks l * 64 .. l * 64 + 63, in reverse order of
  // the host blocks (no coalescing: one copy per block).
  std::vector<std::vector<int32_t>> dev(layers), hst(layers);
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < blocks_per_layer; ++b) {
      dev[static_cast<size_t>(l)].push_back(l * blocks_per_layer + (blocks_per_layer - 1 - b));
      hst[static_cast<size_t>(l)].push_back(l * blocks_per_layer + b);
    }
  }
  CUDA_ASSERT(cudaMemsetAsync(d_pool.as<void>(), 0x5a, static_cast<size_t>(layers * layer_bytes), compute));
  CUDA_ASSERT(cuda::CopyAfter(engine, compute));
  for (int l = 0; l < layers; ++l) {
    int copies = 0;
    CUDA_ASSERT(cuda::PrefetchBlocks(engine, host.data(), d_pool.as<uint8_t>(), block_bytes,
                                     {dev[static_cast<size_t>(l)].data(), hst[static_cast<size_t>(l)].data(),
                                      blocks_per_layer},
                                     &copies));
    EXPECT_EQ(copies, blocks_per_layer);
    CUDA_ASSERT(cuda::MarkLayerReady(engine, l));
  }
  for (int l = 0; l < layers; ++l) {
    CUDA_ASSERT(cuda::WaitLayerReady(engine, l, compute));
    CUDA_ASSERT(cudaMemcpyAsync(d_check.as<uint8_t>() + l * layer_bytes, d_pool.as<uint8_t>() + l * layer_bytes,
                                static_cast<size_t>(layer_bytes), cudaMemcpyDeviceToDevice, compute));
  }
  CUDA_ASSERT(cudaStreamSynchronize(compute));  // only the compute stream
  std::vector<uint8_t> got;
  CUDA_ASSERT(d_check.Download(&got));
  std::vector<uint8_t> want(got.size());
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < blocks_per_layer; ++b) {
      const size_t lu = static_cast<size_t>(l), bu = static_cast<size_t>(b);
      std::memcpy(want.data() + dev[lu][bu] * block_bytes, host.data() + hst[lu][bu] * block_bytes,
                  static_cast<size_t>(block_bytes));
    }
  }
  ExpectSameBytes(got, want, "the layers read after their waits");
  CUDA_ASSERT(cuda::DestroyCopyEngine(&engine));
  CUDA_ASSERT(cudaStreamDestroy(compute));
}

}  // namespace
}  // namespace cuda_test
}  // namespace kvlab
