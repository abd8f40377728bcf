// Quest's decode step against a dense read on one Llama-3.1-8B layer (32
// query heads, 8 KV heads, head_dim 128, bf16 K/V, block size 16) in the
// engine's own KVCache (prompt reserved in 512-token chunks, as the engine's
// chunked prefill allocates), at 4K and 16K context and k from 256 to 4096
// tokens. A quest call is the whole step of one layer: ranking every page by
// its key bounds (SelectLayerReads), planning the split for the pages read,
// and the CPU kernel over them. Run:
//   ./<build dir>/read_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// BM_RankPages times the ranking alone (the part a dense read does not have).
// Counters: kv_MB = K/V bytes a call reads (MB), read_ratio = that / a dense
// read's, bound_MB = the key bounds ranked (min and max per page and
// channel, in the cache's bf16), kv_read = K/V bytes read per second, frac_bw = kv_read / the
// machine's read bandwidth measured at start-up. Each benchmark rotates over
// enough sequences (--rotate_mib, kernels/bench_memory.h) that K/V come from
// memory.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/cache/cache_test_util.h"
#include "core/cache/kv_cache.h"
#include "core/cache/read_selection.h"
#include "kernels/append_kv.h"
#include "kernels/attention_cpu.h"
#include "kernels/bench_memory.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

constexpr int kHq = 32, kHkv = 8, kHeadDim = 128, kBlockSize = 16;
constexpr int64_t kChunk = 512;

// `copies` sequences of `context` tokens of random K/V (keys with a per-page
// offset, so pages differ as real ones do), each with its decode token
// reserved, its page table and key bounds, and random queries.
struct Setup {
  std::unique_ptr<KVCache> cache;
  std::vector<PageTable> tables;
  std::vector<std::vector<float>> q;
  std::vector<int32_t> qo = {0, 1};
  std::vector<float> o = std::vector<float>(static_cast<size_t>(kHq) * kHeadDim);

  Setup(int64_t context, int copies) {
    CacheShape shape;
    shape.num_layers = 1;
    shape.num_kv_heads = kHkv;
    shape.head_dim = kHeadDim;
    shape.block_size = kBlockSize;
    shape.dtype = DType::kBF16;
    const int64_t blocks = copies * kHkv * ((context + 1 + kBlockSize - 1) / kBlockSize);
    if (!KVCache::Create(shape, blocks, true, &cache).ok()) return;
    cache->EnableKeyBounds();
    uint64_t x = 0x2545F4914F6CDD1Dull;
    auto rnd = [&x] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
    };
    for (int c = 0; c < copies; ++c) {
      cache->AddSequence(c);
      for (int64_t off = 0; off < context; off += kChunk) Write(c, off, std::min(kChunk, context - off), rnd);
      cache->UpdateKeyBounds({c});  // after the prompt, as the engine does after each step
      Write(c, context, 1, rnd);    // the decode token: its page is always read
      tables.emplace_back();
      cache->BuildPageTable({c}, &tables.back());
      cache->AttachKeyBounds({c}, &tables.back());
      q.emplace_back(static_cast<size_t>(kHq) * kHeadDim);
      for (float& f : q.back()) f = rnd();
    }
  }

  // Reserves and writes n tokens of sequence c from position off.
  template <typename Rnd>
  void Write(int c, int64_t off, int64_t n, Rnd& rnd) {
    const std::vector<int32_t> pos = Iota(off, n);
    cache->Reserve(c, n, pos.data());
    PageTable pt;
    cache->BuildPageTable({c}, &pt);
    std::vector<float> k(static_cast<size_t>(n * kHkv * kHeadDim)), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      const int64_t page = (off + static_cast<int64_t>(i) / (kHkv * kHeadDim)) / kBlockSize;
      k[i] = rnd() + 0.2f * static_cast<float>((page * 2654435761u) % 7);
      v[i] = rnd();
    }
    const std::vector<int32_t> qo_n = {0, static_cast<int32_t>(n)};
    AppendKV(pt.Layer(0), qo_n.data(), 1, kHkv, k.data(), v.data());
  }

  AttentionParams Params(int c) {
    AttentionParams p;
    p.num_seqs = 1;
    p.num_qo_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kHeadDim;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    p.qo_indptr = qo.data();
    p.q = q[static_cast<size_t>(c)].data();
    p.o = o.data();
    return p;
  }
};

void SetCounters(benchmark::State& state, const ReadStats& r) {
  const double calls = static_cast<double>(state.iterations());
  state.counters["kv_MB"] = static_cast<double>(r.kv_read_bytes) / 1e6;
  state.counters["read_ratio"] = static_cast<double>(r.kv_read_bytes) / static_cast<double>(r.kv_dense_bytes);
  state.counters["bound_MB"] = static_cast<double>(r.bound_read_bytes) / 1e6;
  state.counters["kv_read"] = benchmark::Counter(static_cast<double>(r.kv_read_bytes) * calls, benchmark::Counter::kIsRate);
  state.counters["frac_bw"] =
      benchmark::Counter(static_cast<double>(r.kv_read_bytes) * calls / ReadBandwidth(), benchmark::Counter::kIsRate);
}

// Argument budget: quest's token_budget, or 0 for the dense read (`full`).
void BM_DecodeStep(benchmark::State& state) {
  const int64_t context = state.range(0), budget = state.range(1);
  const int64_t layer_bytes = static_cast<int64_t>(kHkv) * context * kHeadDim * 2 * 2;
  const int copies = NumCopies(layer_bytes);
  Setup s(context, copies);
  if (s.tables.size() != static_cast<size_t>(copies)) {
    state.SkipWithError("could not build the caches");
    return;
  }
  std::unique_ptr<KVPolicy> quest;
  if (budget > 0) {
    const PolicySpec spec{"quest", {{"token_budget", std::to_string(budget)}, {"dense_layers", "0"}}, "read_bench"};
    if (!PolicyRegistry::Global().Create(spec, &quest).ok()) {
      state.SkipWithError("quest refused the budget");
      return;
    }
  }
  ReadSelection sel;
  CpuDecodePlan plan;
  int c = 0;
  for (auto _ : state) {
    const AttentionParams p = s.Params(c);
    const PageTable& pt = s.tables[static_cast<size_t>(c)];
    SelectLayerReads(pt, 0, quest.get(), p, &sel);
    const PagedKV kv = sel.subset ? sel.View(pt.Layer(0)) : pt.Layer(0);
    PlanCpuDecodeLayer(kv, nullptr, p, &plan);
    PagedAttentionCpu(kv, p, plan);
    benchmark::DoNotOptimize(s.o.data());
    c = (c + 1) % copies;
  }
  SetCounters(state, sel.stats);
}

// The ranking alone (SelectLayerReads: every page's bound, the top k, the
// page table), the part of a quest step a dense read does not have.
void BM_RankPages(benchmark::State& state) {
  const int64_t context = state.range(0), budget = state.range(1);
  const int copies = NumCopies(static_cast<int64_t>(kHkv) * context * kHeadDim * 2 * 2);
  Setup s(context, copies);
  std::unique_ptr<KVPolicy> quest;
  const PolicySpec spec{"quest", {{"token_budget", std::to_string(budget)}, {"dense_layers", "0"}}, "read_bench"};
  if (s.tables.size() != static_cast<size_t>(copies) || !PolicyRegistry::Global().Create(spec, &quest).ok()) {
    state.SkipWithError("could not build the caches or the policy");
    return;
  }
  ReadSelection sel;
  int c = 0;
  for (auto _ : state) {
    SelectLayerReads(s.tables[static_cast<size_t>(c)], 0, quest.get(), s.Params(c), &sel);
    benchmark::DoNotOptimize(sel.indices.data());
    c = (c + 1) % copies;
  }
  SetCounters(state, sel.stats);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t context : {4096, 16384}) {
    for (int64_t budget : {0, 4096, 2048, 1024, 512, 256}) {
      if (budget < context) b->Args({context, budget});
    }
  }
  b->ArgNames({"ctx", "budget"})->UseRealTime()->Unit(benchmark::kMicrosecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

BENCHMARK(BM_DecodeStep)->Apply(Args);
void RankArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ctx", "budget"})->Args({4096, 512})->Args({16384, 512})->UseRealTime()->Unit(benchmark::kMicrosecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

BENCHMARK(BM_RankPages)->Apply(RankArgs);

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  return kvlab::BenchMain(argc, argv);
}
