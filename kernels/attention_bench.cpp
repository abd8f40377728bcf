// Decode attention speed: the paged CPU kernel and the dense libtorch path on
// the Llama-3.1-8B layer shape (32 query heads, 8 KV heads, head_dim 128, bf16
// K/V, block size 16), against the machine's memory read bandwidth measured in
// the same run. Run: ./<build dir>/attention_bench --benchmark_min_time=0.5
//
// Counters: kv_read = bytes of K/V the call must read per second; frac_bw =
// kv_read / read_bw (read_bw: a 1 GiB all-core sum, measured once at start-up).
// Each benchmark rotates over enough distinct caches (4x the host's L3, at
// least 256 MiB; printed at start and recorded as rotate_MiB) that K/V come
// from memory, as in a real model step where the other layers have evicted
// this one (--rotate_mib=N sets it; 0 keeps one cache).
//
// Paged layouts (the `layout` argument): 0 = blocks shuffled over a pool on 4 KiB
// pages (core's BlockPool maps without MADV_HUGEPAGE today); 1 = shuffled, pool
// on transparent huge pages; 2 = each stream's blocks contiguous, huge pages
// (best case); 3 = runs of 32 contiguous blocks in shuffled order, huge pages:
// what the engine's chunked prefill allocates (512-token chunks take 32
// consecutive blocks per stream from the pool's free list). Scattered 8 KiB blocks defeat the hardware prefetcher and, on
// 4 KiB pages, miss the TLB twice per block, so they read slower than a plain
// sequential sum whatever the kernel does; BM_PagedGatherRead measures that
// ceiling for each layout.
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/mman.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kernels/attention_cpu.h"
#include "kernels/attention_reference.h"
#include "kernels/bench_memory.h"
#include "kernels/dense_attention.h"

namespace kvlab {
namespace {

constexpr int kHq = 32, kHkv = 8, kHeadDim = 128, kBlockSize = 16;

void BM_ReadBandwidth(benchmark::State& state) {
  const std::vector<uint64_t>& b = BandwidthBuffer();
  for (auto _ : state) benchmark::DoNotOptimize(SumBuffer(b));
  const double bytes = static_cast<double>(kBandwidthBytes) * static_cast<double>(state.iterations());
  state.counters["read"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["frac_bw"] = benchmark::Counter(bytes / ReadBandwidth(), benchmark::Counter::kIsRate);
}

void SetCounters(benchmark::State& state, int64_t kv_bytes_per_call) {
  const double bytes = static_cast<double>(kv_bytes_per_call) * static_cast<double>(state.iterations());
  state.counters["kv_read"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["frac_bw"] = benchmark::Counter(bytes / ReadBandwidth(), benchmark::Counter::kIsRate);
  state.counters["kv_MB"] = static_cast<double>(kv_bytes_per_call) / 1e6;
}

int64_t KvBytesPerCall(int64_t context, int batch) {
  return static_cast<int64_t>(batch) * kHkv * context * kHeadDim * 2 * DTypeBytes(DType::kBF16);
}

// ---- paged cache: `copies` independent caches in one pool ----

enum Layout { kShuffled = 0, kShuffledHugePages = 1, kContiguousHugePages = 2, kPrefillRunsHugePages = 3 };

struct PagedSetup {
  Mapping pool;
  std::vector<int32_t> indptr, last_block_len;
  std::vector<std::vector<int32_t>> indices;  // per copy
  std::vector<int32_t> qo_indptr;
  std::vector<float> q, o;

  static constexpr int64_t kBlockBytes = 2LL * kBlockSize * kHeadDim * 2;

  static int64_t NumBlocks(int64_t context, int batch) {
    const int64_t blocks_per_stream = (context + kBlockSize - 1) / kBlockSize;
    return blocks_per_stream * batch * kHkv * NumCopies(KvBytesPerCall(context, batch));
  }

  PagedSetup(int64_t context, int batch, Layout layout)
      : pool(static_cast<size_t>(NumBlocks(context, batch) * kBlockBytes), layout != kShuffled) {
    const int streams = batch * kHkv;
    const int blocks_per_stream = static_cast<int>((context + kBlockSize - 1) / kBlockSize);
    const int copies = NumCopies(KvBytesPerCall(context, batch));
    const int64_t blocks_per_copy = static_cast<int64_t>(streams) * blocks_per_stream;
    if (pool.data() == nullptr) return;
    FillBF16(reinterpret_cast<uint16_t*>(pool.data()), NumBlocks(context, batch) * kBlockBytes / 2, 1);
    std::vector<int32_t> perm(static_cast<size_t>(blocks_per_copy * copies));
    std::iota(perm.begin(), perm.end(), 0);
    if (layout == kPrefillRunsHugePages) {
      constexpr int64_t kRun = 32;
      std::vector<int64_t> runs(static_cast<size_t>((static_cast<int64_t>(perm.size()) + kRun - 1) / kRun));
      std::iota(runs.begin(), runs.end(), 0);
      std::shuffle(runs.begin(), runs.end(), std::mt19937(2));
      size_t k = 0;
      for (int64_t r : runs) {
        for (int64_t b = r * kRun; b < std::min<int64_t>((r + 1) * kRun, static_cast<int64_t>(perm.size())); ++b) {
          perm[k++] = static_cast<int32_t>(b);
        }
      }
    } else if (layout != kContiguousHugePages) {
      std::shuffle(perm.begin(), perm.end(), std::mt19937(2));
    }
    for (int c = 0; c < copies; ++c) {
      indices.emplace_back(perm.begin() + c * blocks_per_copy, perm.begin() + (c + 1) * blocks_per_copy);
    }
    for (int s = 0; s <= streams; ++s) indptr.push_back(s * blocks_per_stream);
    last_block_len.assign(static_cast<size_t>(streams), static_cast<int32_t>((context - 1) % kBlockSize + 1));
    for (int i = 0; i <= batch; ++i) qo_indptr.push_back(i);
    q.resize(static_cast<size_t>(batch) * kHq * kHeadDim);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : q) x = u(rng);
    o.resize(q.size());
  }

  PagedKV View(int copy) {
    PagedKV kv;
    kv.base = pool.data();
    kv.block_bytes = kBlockBytes;
    kv.dtype = DType::kBF16;
    kv.block_size = kBlockSize;
    kv.head_dim = kHeadDim;
    kv.num_streams = static_cast<int>(last_block_len.size());
    kv.indptr = indptr.data();
    kv.indices = indices[static_cast<size_t>(copy)].data();
    kv.last_block_len = last_block_len.data();
    return kv;
  }

  AttentionParams Params() {
    AttentionParams p;
    p.num_seqs = static_cast<int>(qo_indptr.size()) - 1;
    p.num_qo_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kHeadDim;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    p.qo_indptr = qo_indptr.data();
    p.q = q.data();
    p.o = o.data();
    return p;
  }
};

void BM_PagedDecodeCpu(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  PagedSetup setup(context, batch, static_cast<Layout>(state.range(2)));
  if (setup.pool.data() == nullptr) {
    state.SkipWithError("cannot map the pool");
    return;
  }
  const AttentionParams p = setup.Params();
  const int copies = static_cast<int>(setup.indices.size());
  if (Status st = AttentionParamsCheck(setup.View(0), p); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  PagedAttentionCpu(setup.View(0), p);  // warm-up: OpenMP thread pool
  int copy = 0;
  for (auto _ : state) {
    PagedAttentionCpu(setup.View(copy), p);
    benchmark::DoNotOptimize(setup.o.data());
    copy = (copy + 1) % copies;
  }
  SetCounters(state, KvBytesPerCall(context, batch));
  state.counters["caches"] = copies;
}

// The paged layout's own read ceiling: every K/V byte of the call summed in
// the kernel's block order with a line-by-line prefetch two blocks ahead, and
// no attention math. frac_bw of the kernel over frac_bw of this is how close it
// gets to what the memory system gives scattered blocks.
uint64_t GatherSum(const PagedKV& kv) {
  uint64_t total = 0;
  const int64_t words = kv.block_bytes / 8;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int s = 0; s < kv.num_streams; ++s) {
    const int first = kv.indptr[s], nb = kv.indptr[s + 1] - first;
    for (int b = 0; b < nb; ++b) {
      const uint64_t* block = reinterpret_cast<const uint64_t*>(kv.base + kv.indices[first + b] * kv.block_bytes);
      const uint8_t* next = b + 2 < nb ? kv.base + kv.indices[first + b + 2] * kv.block_bytes : nullptr;
      for (int64_t i = 0; i < words; i += 8) {
        if (next != nullptr) __builtin_prefetch(next + i * 8);
        for (int j = 0; j < 8; ++j) total += block[i + j];
      }
    }
  }
  return total;
}

void BM_PagedGatherRead(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  PagedSetup setup(context, batch, static_cast<Layout>(state.range(2)));
  if (setup.pool.data() == nullptr) {
    state.SkipWithError("cannot map the pool");
    return;
  }
  const int copies = static_cast<int>(setup.indices.size());
  int copy = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(GatherSum(setup.View(copy)));
    copy = (copy + 1) % copies;
  }
  SetCounters(state, KvBytesPerCall(context, batch));
}

// Dense path: per sequence, contiguous bf16 K/V [S, Hkv, d] through DenseAttention.
void BM_DenseDecodeTorch(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  const int copies = NumCopies(KvBytesPerCall(context, batch));
  std::vector<at::Tensor> k, v;  // [copy * batch + seq]
  for (int i = 0; i < copies * batch; ++i) {
    for (std::vector<at::Tensor>* t : {&k, &v}) {
      t->push_back(torch::empty({context, kHkv, kHeadDim}, torch::kBFloat16));
      FillBF16(static_cast<uint16_t*>(t->back().data_ptr()), t->back().numel(), 10 + i);
    }
  }
  const at::Tensor q = torch::rand({batch, 1, kHq, kHeadDim}) * 2 - 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  // Warm-up: thread pools and the allocator's first large blocks.
  benchmark::DoNotOptimize(DenseAttention(q[0], k[0], v[0], scale, /*causal=*/true));
  int copy = 0;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      const size_t at = static_cast<size_t>(copy * batch + i);
      benchmark::DoNotOptimize(DenseAttention(q[i], k[at], v[at], scale, /*causal=*/true));
    }
    copy = (copy + 1) % copies;
  }
  SetCounters(state, KvBytesPerCall(context, batch));
  state.counters["caches"] = copies;
}

void PagedArgs(benchmark::internal::Benchmark* b) {
  for (int batch : {1, 4}) {
    for (int64_t context : {1024, 4096, 16384}) b->Args({context, batch, kShuffledHugePages});
  }
  b->Args({16384, 1, kShuffled})->Args({16384, 1, kContiguousHugePages})->Args({16384, 1, kPrefillRunsHugePages});
  b->ArgNames({"ctx", "batch", "layout"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

void DenseArgs(benchmark::internal::Benchmark* b) {
  for (int batch : {1, 4}) {
    for (int64_t context : {1024, 4096, 16384}) b->Args({context, batch});
  }
  b->ArgNames({"ctx", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PagedGatherRead)
    ->ArgNames({"ctx", "batch", "layout"})
    ->Args({16384, 1, kShuffled})
    ->Args({16384, 1, kShuffledHugePages})
    ->Args({16384, 1, kContiguousHugePages})
    ->Args({16384, 1, kPrefillRunsHugePages})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PagedDecodeCpu)->Apply(PagedArgs);
BENCHMARK(BM_DenseDecodeTorch)->Apply(DenseArgs);

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return kvlab::BenchMain(argc, argv);
}
