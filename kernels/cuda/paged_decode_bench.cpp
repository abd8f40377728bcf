// Microbenchmark of the CUDA paged decode (Google Benchmark): one Llama-3.1-8B
// attention layer (32 query heads, 8 KV heads, head_dim 128, block size 16),
// bf16 cache, KIVI-2 (group 32, 128-token bf16 residual), and int8 / fp8
// (the quant policy's format: 16-token blocks, per-token fp16 scales, sealed
// by EncodeSealQuant8 from a bf16 cache, a 16-token bf16 residual), batch
// 1/16/64, context 1K..32K. Reports the KV bytes read per second, as a
// fraction of the H200's 4.8 TB/s datasheet peak and of a device-to-device
// cudaMemcpy measured in the same run (bytes read + written, BM_DeviceCopy),
// and for the encoded formats their time relative to bf16 at the same point.
// Timing: CUDA events around each call, L2 flushed before each, after
// warm-up; a fixed number of calls per point (about 20 ms of GPU time, 20 to
// 200 calls) so that the whole run takes well under a minute. Exits 0 with a
// message when there is no GPU.
//
//   paged_decode_bench --benchmark_format=json --benchmark_out=results.json
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/append_kv.h"
#include "kernels/cuda/bench_fill.h"
#include "kernels/cuda/paged_decode.h"

namespace kvlab {
namespace {

constexpr double kPeakBytesPerSecond = 4.8e12;  // H200 HBM3e datasheet
constexpr int kHq = 32, kHkv = 8, kDim = 128, kBlock = 16;
constexpr int kKiviGroup = 32, kKiviResidual = 128;

double g_copy_bytes_per_second = 0.0;                   // measured by MeasureCopy()
std::map<std::pair<int, int>, double> g_bf16_seconds;  // (batch, ctx) -> mean seconds per call

// Device memory freed on scope exit.
struct DevicePtr {
  void* p = nullptr;
  ~DevicePtr() {
    if (p != nullptr) cudaFree(p);
  }
  cudaError_t Alloc(size_t bytes) { return cudaMalloc(&p, std::max<size_t>(bytes, 1)); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
  cudaError_t Create() {
    cudaError_t err = cudaEventCreate(&start);
    return err != cudaSuccess ? err : cudaEventCreate(&stop);
  }
  // Seconds between the two recorded events (waits for stop).
  cudaError_t Seconds(double* s) const {
    cudaError_t err = cudaEventSynchronize(stop);
    if (err != cudaSuccess) return err;
    float ms = 0.0f;
    err = cudaEventElapsedTime(&ms, start, stop);
    *s = ms * 1e-3;
    return err;
  }
};

#define BENCH_CHECK(expr)                                                                  \
  do {                                                                                     \
    const cudaError_t bench_err = (expr);                                                  \
    if (bench_err != cudaSuccess) {                                                        \
      state.SkipWithError((std::string(#expr) + ": " + cudaGetErrorString(bench_err)).c_str()); \
      return;                                                                              \
    }                                                                                      \
  } while (0)

// Device-to-device copy bandwidth (bytes read + written per second): the
// ceiling that decode, a pure stream over the cache, is compared with.
double MeasureCopy(size_t bytes, int iters) {
  DevicePtr a, b;
  Events ev;
  if (a.Alloc(bytes) != cudaSuccess || b.Alloc(bytes) != cudaSuccess || ev.Create() != cudaSuccess) return 0.0;
  if (cudaMemset(a.p, 1, bytes) != cudaSuccess) return 0.0;
  for (int i = 0; i < 3; ++i) cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, nullptr);
  cudaEventRecord(ev.start, nullptr);
  for (int i = 0; i < iters; ++i) cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, nullptr);
  cudaEventRecord(ev.stop, nullptr);
  double s = 0.0;
  if (ev.Seconds(&s) != cudaSuccess || s <= 0.0) return 0.0;
  return 2.0 * static_cast<double>(bytes) * iters / s;
}

void BM_DeviceCopy(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  DevicePtr a, b;
  Events ev;
  BENCH_CHECK(a.Alloc(bytes));
  BENCH_CHECK(b.Alloc(bytes));
  BENCH_CHECK(ev.Create());
  BENCH_CHECK(cudaMemset(a.p, 1, bytes));
  BENCH_CHECK(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  for (auto _ : state) {
    BENCH_CHECK(cudaEventRecord(ev.start, nullptr));
    BENCH_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, nullptr));
    BENCH_CHECK(cudaEventRecord(ev.stop, nullptr));
    double s = 0.0;
    BENCH_CHECK(ev.Seconds(&s));
    state.SetIterationTime(s);
  }
  const double rw = 2.0 * static_cast<double>(bytes);
  state.counters["bytes_rw_per_s"] = benchmark::Counter(rw, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["frac_of_peak"] = benchmark::Counter(rw / kPeakBytesPerSecond, benchmark::Counter::kIsIterationInvariantRate);
}

// The cache formats measured.
enum class Format { kBf16, kKivi2, kInt8, kFp8 };
const char* FormatName(Format f) {
  switch (f) {
    case Format::kBf16: return "bf16";
    case Format::kKivi2: return "kivi2";
    case Format::kInt8: return "int8";
    case Format::kFp8: return "fp8";
  }
  return "?";
}

// Copies a host vector to a new device allocation.
template <typename T>
cudaError_t Upload(DevicePtr* d, const std::vector<T>& v) {
  cudaError_t err = d->Alloc(v.size() * sizeof(T));
  if (err == cudaSuccess && !v.empty()) err = cudaMemcpy(d->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return err;
}

// Calls per point: about 20 ms of GPU time at ~3 TB/s (a call costs at least
// ~10 us), between 20 and 200 calls.
int64_t CallsFor(double kv_bytes) {
  const double est_s = kv_bytes / 3e12 + 10e-6;
  return static_cast<int64_t>(std::min(200.0, std::max(20.0, std::ceil(0.02 / est_s))));
}

// One layer's decode for `batch` sequences of `ctx` tokens each.
// `opts`: the plan's launch-shape overrides (BM_PagedDecodeTune); the
// default family passes none, and records its times for time_vs_bf16.
void BM_PagedDecode(benchmark::State& state, int batch, int ctx, Format fmt,
                    const cuda::PagedDecodeOptions& opts = cuda::PagedDecodeOptions(), bool tune = false) {
  const int streams = batch * kHkv;
  const bool kivi = fmt == Format::kKivi2;
  const bool q8 = fmt == Format::kInt8 || fmt == Format::kFp8;
  KvEncoding enc;
  enc.head_dim = kDim;
  if (q8) {  // the quant policy's format: sealed blocks of block_size tokens
    enc.kind = fmt == Format::kInt8 ? EncodingKind::kInt8 : EncodingKind::kFp8;
    enc.bits = 8;
    enc.tokens_per_block = enc.group = kBlock;
    enc.scale_per_token = true;
  } else {
    enc.kind = EncodingKind::kKivi;
    enc.bits = 2;
    enc.tokens_per_block = enc.group = kKiviGroup;
  }
  const int tpb = enc.tokens_per_block;
  const int residual = kivi ? kKiviResidual : kBlock;
  const int enc_blocks_per_stream = kivi || q8 ? std::max(0, (ctx - residual) / tpb) : 0;
  const int plain_len = ctx - enc_blocks_per_stream * tpb;
  const int plain_blocks_per_stream = (plain_len + kBlock - 1) / kBlock;
  // int8 / fp8 are sealed on the GPU from a bf16 cache of all ctx tokens: its
  // last plain_blocks_per_stream blocks of each stream are the decode's plain
  // segment.
  const int src_blocks_per_stream = q8 ? (ctx + kBlock - 1) / kBlock : plain_blocks_per_stream;
  const int64_t block_bytes = 2LL * kBlock * kDim * 2;
  const int64_t num_blocks = static_cast<int64_t>(streams) * src_blocks_per_stream;
  const int64_t num_enc_blocks = static_cast<int64_t>(streams) * enc_blocks_per_stream;

  // Page tables: blocks in a random order, as a long-running pool hands them out.
  std::mt19937 rng(42);
  std::vector<int32_t> all_indices(static_cast<size_t>(num_blocks));
  std::iota(all_indices.begin(), all_indices.end(), 0);
  std::shuffle(all_indices.begin(), all_indices.end(), rng);
  std::vector<int32_t> indptr(1, 0), indices, last(static_cast<size_t>(streams));
  std::vector<int32_t> enc_indptr(1, 0), enc_indices(static_cast<size_t>(num_enc_blocks));
  for (int s = 0; s < streams; ++s) {
    const auto first = all_indices.begin() + static_cast<int64_t>(s) * src_blocks_per_stream;
    indices.insert(indices.end(), first + (src_blocks_per_stream - plain_blocks_per_stream), first + src_blocks_per_stream);
    indptr.push_back(indptr.back() + plain_blocks_per_stream);
    last[s] = (plain_len - 1) % kBlock + 1;
    enc_indptr.push_back(enc_indptr.back() + enc_blocks_per_stream);
  }
  std::iota(enc_indices.begin(), enc_indices.end(), 0);
  std::shuffle(enc_indices.begin(), enc_indices.end(), rng);

  DevicePtr pool, d_indptr, d_indices, d_last, enc_pool, d_enc_indptr, d_enc_indices, q, o, ws, flush;
  BENCH_CHECK(pool.Alloc(static_cast<size_t>(num_blocks * block_bytes)));
  BENCH_CHECK(cuda::FillUniform(DType::kBF16, pool.p, num_blocks * block_bytes / 2, 1, -1.0f, 1.0f, nullptr));
  BENCH_CHECK(Upload(&d_indptr, indptr));
  BENCH_CHECK(Upload(&d_indices, indices));
  BENCH_CHECK(Upload(&d_last, last));
  EncodedKV ekv;
  if (q8 && num_enc_blocks > 0) {
    // Seal slots [0, enc_blocks_per_stream * tpb) of each stream of the full bf16 cache.
    BENCH_CHECK(enc_pool.Alloc(static_cast<size_t>(num_enc_blocks * enc.BlockBytes())));
    std::vector<int32_t> full_indptr(1, 0), full_last(static_cast<size_t>(streams), kBlock);
    std::vector<int32_t> job_stream, job_first, job_dst;
    for (int s = 0; s < streams; ++s) {
      full_indptr.push_back(full_indptr.back() + src_blocks_per_stream);
      full_last[s] = (ctx - 1) % kBlock + 1;
      for (int b = 0; b < enc_blocks_per_stream; ++b) {
        job_stream.push_back(s);
        job_first.push_back(b * tpb);
        job_dst.push_back(enc_indices[static_cast<size_t>(s) * enc_blocks_per_stream + b]);
      }
    }
    DevicePtr d_full_indptr, d_full_indices, d_full_last, d_js, d_jf, d_jd;
    BENCH_CHECK(Upload(&d_full_indptr, full_indptr));
    BENCH_CHECK(Upload(&d_full_indices, all_indices));
    BENCH_CHECK(Upload(&d_full_last, full_last));
    BENCH_CHECK(Upload(&d_js, job_stream));
    BENCH_CHECK(Upload(&d_jf, job_first));
    BENCH_CHECK(Upload(&d_jd, job_dst));
    PagedKV full;
    full.base = pool.as<uint8_t>();
    full.block_bytes = block_bytes;
    full.dtype = DType::kBF16;
    full.block_size = kBlock;
    full.head_dim = kDim;
    full.num_streams = streams;
    full.indptr = d_full_indptr.as<int32_t>();
    full.indices = d_full_indices.as<int32_t>();
    full.last_block_len = d_full_last.as<int32_t>();
    cuda::SealJobs jobs;
    jobs.num_jobs = static_cast<int>(job_stream.size());
    jobs.stream = d_js.as<int32_t>();
    jobs.first_slot = d_jf.as<int32_t>();
    jobs.dst_block = d_jd.as<int32_t>();
    BENCH_CHECK(cuda::EncodeSealQuant8(full, enc, enc_pool.as<uint8_t>(), enc.BlockBytes(), jobs, nullptr));
    BENCH_CHECK(cudaDeviceSynchronize());
  }
  if (kivi) {
    BENCH_CHECK(enc_pool.Alloc(static_cast<size_t>(num_enc_blocks * enc.BlockBytes())));
    BENCH_CHECK(cuda::FillKiviBlocks(enc, enc_pool.as<uint8_t>(), num_enc_blocks, 2, nullptr));
  }
  if (kivi || (q8 && num_enc_blocks > 0)) {
    BENCH_CHECK(d_enc_indptr.Alloc(enc_indptr.size() * 4));
    BENCH_CHECK(d_enc_indices.Alloc(enc_indices.size() * 4));
    BENCH_CHECK(cudaMemcpy(d_enc_indptr.p, enc_indptr.data(), enc_indptr.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(d_enc_indices.p, enc_indices.data(), enc_indices.size() * 4, cudaMemcpyHostToDevice));
    ekv.base = enc_pool.as<uint8_t>();
    ekv.block_bytes = enc.BlockBytes();
    ekv.enc = enc;
    ekv.num_streams = streams;
    ekv.indptr = d_enc_indptr.as<int32_t>();
    ekv.indices = d_enc_indices.as<int32_t>();
  }
  const size_t qo_elems = static_cast<size_t>(batch) * kHq * kDim;
  BENCH_CHECK(q.Alloc(qo_elems * 4));
  BENCH_CHECK(o.Alloc(qo_elems * 4));
  BENCH_CHECK(cuda::FillUniform(DType::kF32, q.p, static_cast<int64_t>(qo_elems), 3, -1.0f, 1.0f, nullptr));

  cuda::PagedDecodeShape shape;
  shape.num_seqs = batch;
  shape.num_qo_heads = kHq;
  shape.num_kv_heads = kHkv;
  shape.head_dim = kDim;
  shape.dtype = DType::kBF16;
  const bool has_enc = kivi || (q8 && num_enc_blocks > 0);
  if (has_enc) {
    shape.enc_tokens_per_block = tpb;
    shape.enc_block_bytes = enc.BlockBytes();
    shape.enc_kind = enc.kind;
  }
  std::vector<int64_t> stream_len(static_cast<size_t>(streams), ctx);
  cuda::PagedDecodePlan plan;
  BENCH_CHECK(cuda::PlanPagedDecode(shape, stream_len.data(), opts, &plan));
  BENCH_CHECK(ws.Alloc(static_cast<size_t>(plan.workspace_bytes)));

  PagedKV kv;
  kv.base = pool.as<uint8_t>();
  kv.block_bytes = block_bytes;
  kv.dtype = DType::kBF16;
  kv.block_size = kBlock;
  kv.head_dim = kDim;
  kv.num_streams = streams;
  kv.indptr = d_indptr.as<int32_t>();
  kv.indices = d_indices.as<int32_t>();
  kv.last_block_len = d_last.as<int32_t>();
  AttentionParams p;
  p.num_seqs = batch;
  p.num_qo_heads = kHq;
  p.num_kv_heads = kHkv;
  p.head_dim = kDim;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  p.q = q.as<float>();
  p.o = o.as<float>();
  const EncodedKV* ekvp = has_enc ? &ekv : nullptr;
  const double kv_bytes = static_cast<double>(streams) *
                          (static_cast<double>(plain_len) * 2 * kDim * 2 +
                           static_cast<double>(enc_blocks_per_stream) * (has_enc ? enc.BlockBytes() : 0));
  const std::string why = cuda::PagedDecodeCheck(plan, kv, ekvp, p, ws.p, plan.workspace_bytes);
  if (!why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }

  int dev = 0, l2_bytes = 0;
  BENCH_CHECK(cudaGetDevice(&dev));
  BENCH_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, dev));
  const size_t flush_bytes = std::max<size_t>(2 * static_cast<size_t>(l2_bytes), size_t{64} << 20);
  BENCH_CHECK(flush.Alloc(flush_bytes));
  Events ev;
  BENCH_CHECK(ev.Create());
  for (int i = 0; i < 3; ++i) BENCH_CHECK(cuda::PagedDecode(plan, kv, ekvp, p, ws.p, plan.workspace_bytes, nullptr));
  BENCH_CHECK(cudaDeviceSynchronize());

  double total_s = 0.0;
  int64_t calls = 0;
  for (auto _ : state) {
    BENCH_CHECK(cudaMemsetAsync(flush.p, calls & 0xff, flush_bytes, nullptr));  // evict the cache from L2
    BENCH_CHECK(cudaEventRecord(ev.start, nullptr));
    BENCH_CHECK(cuda::PagedDecode(plan, kv, ekvp, p, ws.p, plan.workspace_bytes, nullptr));
    BENCH_CHECK(cudaEventRecord(ev.stop, nullptr));
    double s = 0.0;
    BENCH_CHECK(ev.Seconds(&s));
    state.SetIterationTime(s);
    total_s += s;
    ++calls;
  }
  BENCH_CHECK(cudaGetLastError());

  using benchmark::Counter;
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["kv_bytes_per_s"] = Counter(kv_bytes, Counter::kIsIterationInvariantRate);
  state.counters["frac_of_peak"] = Counter(kv_bytes / kPeakBytesPerSecond, Counter::kIsIterationInvariantRate);
  if (g_copy_bytes_per_second > 0.0) {
    state.counters["frac_of_copy"] = Counter(kv_bytes / g_copy_bytes_per_second, Counter::kIsIterationInvariantRate);
  }
  state.counters["splits"] = plan.max_splits;
  state.counters["ctas"] = static_cast<double>(streams) * plan.max_splits;
  state.counters["ctas_per_sm"] = plan.ctas_per_sm;
  state.counters["stages"] = plan.stages;
  state.counters["heads_per_thread"] = plan.heads_per_thread;
  state.counters["tensor_cores"] = plan.tensor_cores ? 1 : 0;
  state.counters["tile_tokens"] = plan.tile_tokens;
  state.counters["smem_bytes"] = static_cast<double>(plan.tensor_cores ? plan.tc_smem_bytes : plan.smem_bytes);
  const double mean_s = calls > 0 ? total_s / static_cast<double>(calls) : 0.0;
  if (!tune && fmt == Format::kBf16) {
    g_bf16_seconds[{batch, ctx}] = mean_s;
  } else {
    const auto it = g_bf16_seconds.find({batch, ctx});
    if (it != g_bf16_seconds.end() && it->second > 0.0) {
      state.counters[tune ? "time_vs_default_bf16" : "time_vs_bf16"] = mean_s / it->second;
    }
  }
}

// Registers one point, sized by the bf16 cache's bytes at its shape.
void Register(const std::string& name, int batch, int ctx, Format fmt,
              const cuda::PagedDecodeOptions& opts = cuda::PagedDecodeOptions(), bool tune = false) {
  const double bf16_bytes = 2.0 * batch * kHkv * static_cast<double>(ctx) * kDim * 2;
  benchmark::RegisterBenchmark(name.c_str(),
                               [batch, ctx, fmt, opts, tune](benchmark::State& st) {
                                 BM_PagedDecode(st, batch, ctx, fmt, opts, tune);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(CallsFor(bf16_bytes));
}

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    std::printf("paged_decode_bench: no GPU (%s): nothing to measure\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    benchmark::AddCustomContext("gpu", prop.name);
    benchmark::AddCustomContext("gpu_sms", std::to_string(prop.multiProcessorCount));
  }
  kvlab::g_copy_bytes_per_second = kvlab::MeasureCopy(size_t{1} << 30, 20);
  benchmark::AddCustomContext("copy_bytes_rw_per_s", std::to_string(kvlab::g_copy_bytes_per_second));

  benchmark::RegisterBenchmark("BM_DeviceCopy/1GiB", kvlab::BM_DeviceCopy)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
  using kvlab::Format;
  for (int batch : {1, 16, 64}) {
    for (int ctx : {1024, 4096, 8192, 16384, 32768}) {
      // bf16 first: the others report their time relative to it.
      for (Format fmt : {Format::kBf16, Format::kKivi2, Format::kInt8, Format::kFp8}) {
        kvlab::Register(std::string("BM_PagedDecode/") + kvlab::FormatName(fmt) + "/batch:" + std::to_string(batch) +
                            "/ctx:" + std::to_string(ctx),
                        batch, ctx, fmt);
      }
    }
  }
  // Launch-shape sweep at a few points, after the default family
  // (time_vs_default_bf16: against its bf16 time): the CUDA-core kernel at
  // each pipeline depth x heads per thread, and bf16 on the tensor-core kernel
  // at each depth (no head split there; encoded caches have no such kernel).
  struct Shape {
    int tc, stages, hpt;
  };
  std::vector<Shape> shapes;
  for (int stages : {2, 3, 4}) shapes.push_back({1, stages, 0});
  for (int stages : {2, 3, 4}) {
    for (int hpt : {4, 2, 1}) shapes.push_back({-1, stages, hpt});
  }
  for (int batch : {1, 16, 64}) {
    const int ctx = 16384;
    for (Format fmt : {Format::kBf16, Format::kInt8, Format::kKivi2}) {
      for (const Shape& sh : shapes) {
        if (sh.tc == 1 && fmt != Format::kBf16) continue;
        kvlab::cuda::PagedDecodeOptions o;
        o.stages = sh.stages;
        o.heads_per_thread = sh.hpt;
        o.tensor_cores = sh.tc;
        kvlab::Register(std::string("BM_PagedDecodeTune/") + kvlab::FormatName(fmt) + "/batch:" +
                            std::to_string(batch) + "/ctx:" + std::to_string(ctx) + "/tc:" + (sh.tc == 1 ? "1" : "0") +
                            "/stages:" + std::to_string(sh.stages) + (sh.tc == 1 ? "" : "/hpt:" + std::to_string(sh.hpt)),
                        batch, ctx, fmt, o, true);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
