// Decode attention over a cache the engine's way grown: the blocks of one
// llama-3.1-8b-shaped sequence (32 layers x 8 KV heads = 256 streams, head_dim
// 128, bf16, block size 16) reserved in the engine's own KVCache, a prefill
// in 512-token chunks and then token by token, all streams interleaved as a
// decode step appends to every layer and head; then the CPU decode kernel
// reads one layer at 16K context, the calls cycling through the layers so
// that K/V come from memory (as in a model step). Runs off (run_blocks 0:
// one block at a time from the free list) against on (KVCache::SetRunBlocks).
// Run (three caches of ~2.2 GiB each live at once):
//   ./<build dir>/block_runs_bench --benchmark_min_time=2 --benchmark_repetitions=3
//     --benchmark_report_aggregates_only=true   (one line)
//
// Arguments: prefill = tokens reserved in 512-token chunks, decode = tokens
// then reserved one per step (prefill + decode = 16,384), runs = run_blocks,
// aged = 1: the pool's free list is first shuffled (every block allocated
// and freed in random order), as after a server has run for a while.
// BM_ReadBandwidth is the same 1 GiB sum as attention_bench's; BM_GrownDecode
// says its counters. With repetitions, min and max come with the median.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "kernels/attention_cpu.h"
#include "kernels/bench_memory.h"

namespace kvlab {
namespace {

constexpr int kHq = 32, kHkv = 8, kHeadDim = 128, kBlockSize = 16, kMinLayers = 32;
constexpr int64_t kContext = 16384, kChunk = 512, kMaxRun = 32;

int64_t LayerBytes() { return static_cast<int64_t>(kHkv) * kContext * kHeadDim * 2 * 2; }

struct Grown {
  int64_t prefill = -1, decode = -1, runs = -1, aged = -1;  // the arguments it was built for
  std::unique_ptr<KVCache> cache;
  PageTable pt;
  double adjacent = 0;
  int64_t reserve_bytes = 0;

  bool Build(int64_t p, int64_t d, int64_t r, int64_t a) {
    prefill = p, decode = d, runs = r, aged = a;
    cache.reset();  // one cache of ~2 GiB at a time
    CacheShape shape;
    shape.num_layers = std::max(kMinLayers, NumCopies(LayerBytes()));
    shape.num_kv_heads = kHkv;
    shape.head_dim = kHeadDim;
    shape.block_size = kBlockSize;
    shape.dtype = DType::kBF16;
    const int64_t streams = static_cast<int64_t>(shape.num_layers) * kHkv;
    // Room for the context and a full run per stream: the same pool for runs on and off.
    const int64_t blocks = streams * (kContext / kBlockSize + kMaxRun);
    if (!KVCache::Create(shape, blocks, /*with_storage=*/true, &cache).ok()) return false;
    cache->SetRunBlocks(static_cast<int>(r));
    BlockPool& pool = cache->pool();
    if (a != 0) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < blocks; ++i) ids.push_back(pool.Allocate());
      std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
      for (int32_t id : ids) pool.DecRef(id);
    }
    if (!cache->AddSequence(0).ok()) return false;
    for (int64_t off = 0; off < p; off += kChunk) {
      const std::vector<int32_t> pos = Iota(off, std::min(kChunk, p - off));
      if (!cache->Reserve(0, static_cast<int64_t>(pos.size()), pos.data()).ok()) return false;
    }
    for (int64_t t = p; t < p + d; ++t) {
      const int32_t pos = static_cast<int32_t>(t);
      if (!cache->Reserve(0, 1, &pos).ok()) return false;
    }
    // The bytes: random bf16 over the whole arena (where the blocks lie is what is measured).
    FillBF16(reinterpret_cast<uint16_t*>(pool.data()), blocks * pool.block_bytes() / 2, 1);
    cache->BuildPageTable({0}, &pt);
    int64_t pairs = 0, adj = 0;
    for (int l = 0; l < shape.num_layers; ++l) {
      for (int h = 0; h < kHkv; ++h) {
        const std::vector<int32_t>& b = cache->stream(0, l, h).blocks;
        for (size_t i = 1; i < b.size(); ++i, ++pairs) adj += b[i] == b[i - 1] + 1 ? 1 : 0;
      }
    }
    adjacent = static_cast<double>(adj) / static_cast<double>(pairs);
    reserve_bytes = cache->PeakRunReserveBytes();
    return true;
  }
};

void BM_ReadBandwidth(benchmark::State& state) {
  const std::vector<uint64_t>& b = BandwidthBuffer();
  for (auto _ : state) benchmark::DoNotOptimize(SumBuffer(b));
  const double bytes = static_cast<double>(kBandwidthBytes) * static_cast<double>(state.iterations());
  state.counters["read"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
  state.counters["frac_bw"] = benchmark::Counter(bytes / ReadBandwidth(), benchmark::Counter::kIsRate);
}

AttentionParams Query(std::vector<float>* q, std::vector<float>* o, const int32_t* qo) {
  q->resize(static_cast<size_t>(kHq) * kHeadDim);
  o->resize(q->size());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : *q) x = u(rng);
  AttentionParams prm;
  prm.num_seqs = 1;
  prm.num_qo_heads = kHq;
  prm.num_kv_heads = kHkv;
  prm.head_dim = kHeadDim;
  prm.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  prm.qo_indptr = qo;
  prm.q = q->data();
  prm.o = o->data();
  return prm;
}

// One case, three caches read in turn, call by call, with a read-bandwidth
// slice between them, so that the host's load (shared with other jobs)
// weighs on all four alike: `l3` = all 16K prefilled (attention_bench's
// layout 3), `off` = grown as the arguments say without runs, `on` = the
// same with runs. A slice sums the next 64 MiB of the 1 GiB buffer.
// Counters: *_ms per call; frac_* = that call's K/V bytes per second over
// the slices' bandwidth (bw_GBps) in the same iterations; on_vs_off and
// on_vs_l3 = the ratios of those fractions; adjacent_*, reserve_MB (the run
// reserve's peak during growth) describe the caches.
void BM_GrownDecode(benchmark::State& state) {
  static Grown l3, off, on;  // kept across a case's repetitions
  const int64_t p = state.range(0), d = state.range(1), r = state.range(2), a = state.range(3);
  auto ready = [](Grown* g, int64_t p, int64_t d, int64_t r, int64_t a) {
    if (g->cache && g->prefill == p && g->decode == d && g->runs == r && g->aged == a) return true;
    if (g->Build(p, d, r, a)) return true;
    g->cache.reset();
    return false;
  };
  if (!ready(&l3, kContext, 0, 0, 0) || !ready(&off, p, d, 0, a) || !ready(&on, p, d, r, a)) {
    state.SkipWithError("could not build the caches");
    return;
  }
  std::vector<float> q, o;
  const int32_t qo[2] = {0, 1};
  const AttentionParams prm = Query(&q, &o, qo);
  const std::vector<uint64_t>& buf = BandwidthBuffer();
  const int64_t slice_words = (int64_t{64} << 20) / 8, slices = static_cast<int64_t>(buf.size()) / slice_words;
  Grown* caches[3] = {&l3, &off, &on};
  double sec[4] = {0, 0, 0, 0};
  const int layers = l3.pt.num_layers();
  PagedAttentionCpu(l3.pt.Layer(0), prm);  // warm-up: OpenMP thread pool
  int l = 0;
  int64_t slice = 0;
  for (auto _ : state) {
    for (int c = 0; c < 3; ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      PagedAttentionCpu(caches[c]->pt.Layer(l), prm);
      benchmark::DoNotOptimize(o.data());
      sec[c] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const uint64_t* w = buf.data() + slice * slice_words;
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < slice_words; ++i) total += w[i];
    benchmark::DoNotOptimize(total);
    sec[3] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    l = (l + 1) % layers;
    slice = (slice + 1) % slices;
  }
  const double n = static_cast<double>(state.iterations());
  const double bw = static_cast<double>(slice_words * 8) * n / sec[3];
  const double frac[3] = {static_cast<double>(LayerBytes()) * n / sec[0] / bw,
                          static_cast<double>(LayerBytes()) * n / sec[1] / bw,
                          static_cast<double>(LayerBytes()) * n / sec[2] / bw};
  state.counters["bw_GBps"] = bw / 1e9;
  state.counters["l3_ms"] = sec[0] / n * 1e3;
  state.counters["off_ms"] = sec[1] / n * 1e3;
  state.counters["on_ms"] = sec[2] / n * 1e3;
  state.counters["frac_l3"] = frac[0];
  state.counters["frac_off"] = frac[1];
  state.counters["frac_on"] = frac[2];
  state.counters["on_vs_off"] = frac[2] / frac[1];
  state.counters["on_vs_l3"] = frac[2] / frac[0];
  state.counters["adjacent_off"] = off.adjacent;
  state.counters["adjacent_on"] = on.adjacent;
  state.counters["reserve_MB"] = static_cast<double>(on.reserve_bytes) / 1e6;
}

double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void Args(benchmark::internal::Benchmark* b) {
  b->Args({kContext - 1024, 1024, 32, 0});
  for (int64_t runs : {16, 32}) b->Args({kContext - 1024, 1024, runs, 1});
  for (int64_t runs : {8, 16, 32}) b->Args({1024, kContext - 1024, runs, 0});
  b->ArgNames({"prefill", "decode", "runs", "aged"})->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", Min)->ComputeStatistics("max", Max);
}

BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("min", Min)->ComputeStatistics("max", Max);
BENCHMARK(BM_GrownDecode)->Apply(Args);

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  return kvlab::BenchMain(argc, argv);
}
