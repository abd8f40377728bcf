// Decode attention over KIVI-2 and quant (int8 / fp8) caches against the
// 16-bit cache, on the CPU:
// the Llama-3.1-8B layer shape (32 query heads, 8 KV heads, head_dim 128),
// batch 1, plain blocks of 16 tokens, KIVI-2 with group 32 (encoded blocks of
// 32 tokens) and the most recent 128 tokens kept in bf16 (the residual).
//
//   BM_DecodeBf16: PagedAttentionCpu, every slot plain bf16.
//   BM_DecodeKivi2: PagedAttentionEncodedCpu (the fused KIVI path), encoded
//                   segment + bf16 residual, as core's cache holds it.
//   BM_DecodeSinkKivi2: the fused KIVI path over the stream `sink` + `kivi`
//                   leaves: sealed groups stay whole while they keep a slot
//                   (KVCache::Compact), so at ctx live tokens the stream
//                   also holds the sinks' group (4 live, 28 evicted) and the
//                   window's oldest group (1 live, 31 evicted): ctx + 5 live
//                   of ctx + 64 slots, the evicted ones masked
//                   (EncodedKV::dead). vs_kivi = BM_DecodeKivi2's step_ms at
//                   the same ctx and layout over this one's.
//   BM_DecodeKivi2Int8: the same cache with the kivi policy's
//                   attention = "int8" (int8 queries, 8-bit value weights;
//                   approximate). err_rel = its largest |difference| from the
//                   exact reference over the largest |output|.
//   BM_DecodeQuantInt8, BM_DecodeQuantFp8: PagedAttentionEncodedCpu (the
//                   fused int8 / fp8 path, kernels/attention_quant_cpu.h) over
//                   the quant policy's cache: every whole 16-token block
//                   sealed as 8-bit codes with per-token fp16 scales (4160
//                   bytes a block and KV head against 8192 in bf16), the open
//                   tail block (1-16 tokens) in bf16.
//   BM_DecodeQuantInt8Generic: the same int8 cache through the generic
//                   decode-then-attend path (SetQuantFusedCpu(false)), which
//                   quant took before the fused kernel.
//
// Counters: GBps = bytes of cache the call reads (whole blocks touched:
// encoded blocks with their scales and zeros, plain blocks) per second;
// floor_frac = those bytes over the read bandwidth measured at start-up
// (read_bw_GBps), over step_ms: the fraction of the byte floor reached;
// step_ms = time per call; cpu_ms = CPU time of all threads per call;
// fma_frac = the 8-lane fp32 FMAs the call's arithmetic needs (per token and
// query head, head_dim / 8 for the score and as many for the value row: 32 x
// context x 32 heads in all) per second, over the machine's peak FMA rate
// (fma_peak_G_per_core, measured at start-up) times the threads: how close
// the kernel runs to its arithmetic bound. speedup (KIVI, quant) = the bf16 run's step_ms at the
// same context and layout (run earlier in the same process, mean over all
// its calls) / this one's step_ms. Each benchmark rotates over enough distinct
// caches (4x the host's L3, at least 256 MiB; printed at start, rotate_MiB in
// the context) that the cache comes from memory, as in a model step where the
// other layers have evicted it;
// --rotate_mib=0 keeps one cache instead (in L2/L3 when it fits: the kernels'
// arithmetic speed).
// Layouts (`layout`, as in attention_bench): 0 = every block of both pools at
// a random place, 4 KiB pages; 1 = the same on transparent huge pages; 3 =
// runs of 512 tokens' blocks in random order, huge pages — what the engine's
// chunked prefill leaves (a 512-token chunk takes 32 consecutive plain blocks
// per stream, and sealing it takes 16 consecutive encoded blocks).
//
// Run: ./<build dir>/kivi_bench --benchmark_min_time=1 --benchmark_repetitions=3
//      --benchmark_report_aggregates_only=true [--rotate_mib=N]
#include <benchmark/benchmark.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_cpu.h"
#include "kernels/attention_encoded.h"
#include "kernels/attention_reference.h"
#include "kernels/bench_memory.h"
#include "kernels/kv_encoding.h"

namespace kvlab {
namespace {

constexpr int kHq = 32, kHkv = 8, kHeadDim = 128, kBlockSize = 16;
constexpr int kGroup = 32, kResidual = 128, kBits = 2;
constexpr int64_t kPlainBlockBytes = 2LL * kBlockSize * kHeadDim * 2;
constexpr int kUniqueEncodedBlocks = 256;  // distinct encoded contents, copied round the pool

enum class Format { kBf16, kKivi2, kInt8, kFp8 };

KvEncoding Kivi2() {
  KvEncoding e;
  e.kind = EncodingKind::kKivi;
  e.bits = kBits;
  e.head_dim = kHeadDim;
  e.tokens_per_block = kGroup;
  e.group = kGroup;
  e.key_axis = QuantAxis::kChannel;
  e.value_axis = QuantAxis::kToken;
  return e;
}

// The quant policy's encoding at this shape (policies/quant.cpp): blocks of
// the plain block size, per-token scales, no residual.
KvEncoding Quant8(EncodingKind kind) {
  KvEncoding e;
  e.kind = kind;
  e.bits = 8;
  e.head_dim = kHeadDim;
  e.tokens_per_block = kBlockSize;
  e.group = kBlockSize;
  e.scale_per_token = true;
  return e;
}

KvEncoding EncodingOf(Format f) {
  return f == Format::kInt8 ? Quant8(EncodingKind::kInt8) : f == Format::kFp8 ? Quant8(EncodingKind::kFp8) : Kivi2();
}

// Slots of a stream of ctx tokens that core's sealing leaves encoded: KIVI's
// whole groups outside the 128-token residual; quant's whole blocks but the
// open tail one (the step's token has just been appended to it).
int64_t EncodedSlots(Format f, int64_t ctx) {
  if (f == Format::kBf16) return 0;
  if (f == Format::kKivi2) return ctx > kResidual ? (ctx - kResidual) / kGroup * kGroup : 0;
  return (ctx - 1) / kBlockSize * kBlockSize;
}

constexpr int kRunTokens = 512;  // layout 3: the engine's prefill chunk

// Block ids 0..n-1 in random order, in runs of `run` consecutive ids.
std::vector<int32_t> ShuffledIds(int64_t n, int run, uint32_t seed) {
  std::vector<int32_t> starts;
  for (int64_t b = 0; b < n; b += run) starts.push_back(static_cast<int32_t>(b));
  std::shuffle(starts.begin(), starts.end(), std::mt19937(seed));
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int32_t b0 : starts) {
    for (int64_t b = b0; b < std::min<int64_t>(n, b0 + run); ++b) ids.push_back(static_cast<int32_t>(b));
  }
  return ids;
}

// ---- one layer's cache for batch 1, `copies` independent copies ----

struct Setup {
  int64_t context = 0;
  bool encoded = false;
  int64_t n_enc = 0, n_plain = 0;  // slots per stream
  int plain_blocks = 0, enc_blocks = 0;  // per stream
  int copies = 1;
  KvEncoding enc;
  std::unique_ptr<Mapping> plain_pool, enc_pool;
  std::vector<std::vector<int32_t>> plain_ids, enc_ids;  // per copy, [stream][block]
  std::vector<int32_t> plain_indptr, enc_indptr, last_block_len, qo_indptr = {0, 1};
  std::vector<float> q, o;
  std::vector<uint8_t> dead;               // per slot of the encoded segment (the same for every stream)
  std::vector<const uint8_t*> dead_ptrs;   // [kHkv], or empty: nothing evicted

  // Marks evicted slots as sink + kivi leaves them: all of group 0 but the
  // first n_sink, and all of group 1 but its last slot.
  void MarkSinkWindowDead(int n_sink) {
    dead.assign(static_cast<size_t>(n_enc), 0);
    for (int64_t t = n_sink; t < 2 * kGroup - 1 && t < n_enc; ++t) dead[static_cast<size_t>(t)] = 1;
    dead_ptrs.assign(kHkv, dead.data());
  }

  int64_t BytesPerCall() const {
    return static_cast<int64_t>(kHkv) *
           (plain_blocks * kPlainBlockBytes + (encoded ? enc_blocks * enc.BlockBytes() : 0));
  }

  Setup(int64_t ctx, Format format, int layout)
      : context(ctx), encoded(format != Format::kBf16), enc(EncodingOf(format)) {
    const bool huge_pages = layout != 0;
    const int G = enc.tokens_per_block;
    n_enc = EncodedSlots(format, ctx);
    n_plain = ctx - n_enc;
    enc_blocks = static_cast<int>(n_enc / G);
    plain_blocks = static_cast<int>((n_plain + kBlockSize - 1) / kBlockSize);
    copies = NumCopies(BytesPerCall());
    const int64_t plain_total = static_cast<int64_t>(kHkv) * plain_blocks * copies;
    const int64_t enc_total = static_cast<int64_t>(kHkv) * enc_blocks * copies;
    plain_pool = std::make_unique<Mapping>(static_cast<size_t>(plain_total * kPlainBlockBytes), huge_pages);
    enc_pool = std::make_unique<Mapping>(static_cast<size_t>(enc_total * enc.BlockBytes()), huge_pages);
    if (plain_pool->data() == nullptr || enc_pool->data() == nullptr) return;
    FillBF16(reinterpret_cast<uint16_t*>(plain_pool->data()), plain_total * kPlainBlockBytes / 2, 1);
    if (enc_total > 0) {
      // Distinct encoded blocks from random K/V, copied over the whole pool:
      // what is read is what counts, not how many contents differ.
      std::mt19937 rng(5);
      std::normal_distribution<float> nd;
      std::vector<float> k(static_cast<size_t>(G) * kHeadDim), v(k.size());
      std::vector<uint8_t> unique(static_cast<size_t>(kUniqueEncodedBlocks * enc.BlockBytes()));
      for (int b = 0; b < kUniqueEncodedBlocks; ++b) {
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        EncodeKvBlock(enc, k.data(), v.data(), unique.data() + b * enc.BlockBytes());
      }
      for (int64_t b = 0; b < enc_total; ++b) {
        std::memcpy(enc_pool->data() + b * enc.BlockBytes(),
                    unique.data() + (b % kUniqueEncodedBlocks) * enc.BlockBytes(), static_cast<size_t>(enc.BlockBytes()));
      }
    }
    const int plain_run = layout == 3 ? kRunTokens / kBlockSize : 1, enc_run = layout == 3 ? kRunTokens / G : 1;
    const std::vector<int32_t> pp = ShuffledIds(plain_total, plain_run, 2), ep = ShuffledIds(enc_total, enc_run, 3);
    for (int c = 0; c < copies; ++c) {
      plain_ids.emplace_back(pp.begin() + c * (plain_total / copies), pp.begin() + (c + 1) * (plain_total / copies));
      enc_ids.emplace_back(ep.begin() + c * (enc_total / copies), ep.begin() + (c + 1) * (enc_total / copies));
    }
    for (int s = 0; s <= kHkv; ++s) {
      plain_indptr.push_back(s * plain_blocks);
      enc_indptr.push_back(s * enc_blocks);
    }
    last_block_len.assign(kHkv, static_cast<int32_t>((n_plain - 1) % kBlockSize + 1));
    q.resize(static_cast<size_t>(kHq) * kHeadDim);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (float& x : q) x = nd(rng);
    o.resize(q.size());
  }
  bool ok() const { return plain_pool->data() != nullptr && enc_pool->data() != nullptr; }

  PagedKV Plain(int copy) const {
    PagedKV kv;
    kv.base = plain_pool->data();
    kv.block_bytes = kPlainBlockBytes;
    kv.dtype = DType::kBF16;
    kv.block_size = kBlockSize;
    kv.head_dim = kHeadDim;
    kv.num_streams = kHkv;
    kv.indptr = plain_indptr.data();
    kv.indices = plain_ids[static_cast<size_t>(copy)].data();
    kv.last_block_len = last_block_len.data();
    return kv;
  }
  EncodedKV Encoded(int copy) const {
    EncodedKV e;
    e.base = enc_pool->data();
    e.block_bytes = enc.BlockBytes();
    e.enc = enc;
    e.num_streams = kHkv;
    e.indptr = enc_indptr.data();
    e.indices = enc_ids[static_cast<size_t>(copy)].data();
    if (!dead_ptrs.empty()) e.dead = dead_ptrs.data();
    return e;
  }
  AttentionParams Params() {
    AttentionParams p;
    p.num_seqs = 1;
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

// A kernel's time per (context, layout): ms summed over every call of the
// loop and the number of calls, over all of Google Benchmark's runs of the
// case (its short trial runs, which size the iteration count, weigh by their
// few calls instead of one run each: an unweighted mean of runs let a slow
// first one-call trial raise the bf16 time, and the speed-up, by 10-15%).
class MeanTimes {
 public:
  void Add(int64_t context, int layout, double ms, double calls) {
    auto& t = t_[{context, layout}];
    t.first += ms * calls;
    t.second += calls;
  }
  // Mean ms a call, or 0 when the case has not run.
  double Mean(int64_t context, int layout) const {
    const auto it = t_.find({context, layout});
    return it == t_.end() || it->second.second <= 0 ? 0.0 : it->second.first / it->second.second;
  }

 private:
  std::map<std::pair<int64_t, int>, std::pair<double, double>> t_;
};
MeanTimes& Bf16Times() {
  static MeanTimes t;
  return t;
}
MeanTimes& KiviTimes() {  // the exact KIVI-2 path's, for sink + kivi's vs_kivi
  static MeanTimes t;
  return t;
}

// One core's peak rate of 8-lane FMA instructions (G per second): best of 5
// runs of 10 independent chains, enough to cover the FMA latency on current
// x86 cores. Compiled for AVX2 + FMA whatever the build (the function's own
// target, in an isa_avx2 namespace as kernels/tools/check_baseline.py expects
// of guarded code); 0 on a CPU without them.
#if defined(__x86_64__) || defined(__i386__)
namespace isa_avx2 {
__attribute__((target("avx2,fma"))) double FmaPeakLoop() {
  double best = 0.0;
  for (int run = 0; run < 5; ++run) {
    // Ten named chains (an array of them went through memory).
    __m256 a0 = _mm256_set1_ps(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    constexpr int64_t kSteps = 20'000'000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < kSteps; ++k) {
#define KVLAB_FMA_STEP(x)        \
  x = _mm256_fmadd_ps(x, b, c); \
  asm volatile("" : "+x"(x));  // one FMA per chain and step, kept in a register
      KVLAB_FMA_STEP(a0) KVLAB_FMA_STEP(a1) KVLAB_FMA_STEP(a2) KVLAB_FMA_STEP(a3) KVLAB_FMA_STEP(a4)
      KVLAB_FMA_STEP(a5) KVLAB_FMA_STEP(a6) KVLAB_FMA_STEP(a7) KVLAB_FMA_STEP(a8) KVLAB_FMA_STEP(a9)
#undef KVLAB_FMA_STEP
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                     _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)),
                                                   _mm256_add_ps(a8, a9)));
    float sink[8];
    _mm256_storeu_ps(sink, sum);
    benchmark::DoNotOptimize(sink[0]);
    best = std::max(best, 10.0 * static_cast<double>(kSteps) / s / 1e9);
  }
  return best;
}
}  // namespace isa_avx2

// The same for 16-lane (zmm) FMAs, on CPUs with AVX-512: against the 8-lane
// rate, what 16-lane kernels could gain (about 2x on cores with two 512-bit
// FMA pipes, 1x where a zmm FMA splits into two halves).
namespace isa_avx512 {
__attribute__((target("avx512f"))) double FmaPeakLoop() {
  double best = 0.0;
  for (int run = 0; run < 5; ++run) {
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    constexpr int64_t kSteps = 20'000'000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < kSteps; ++k) {
#define KVLAB_FMA_STEP(x)        \
  x = _mm512_fmadd_ps(x, b, c); \
  asm volatile("" : "+v"(x));
      KVLAB_FMA_STEP(a0) KVLAB_FMA_STEP(a1) KVLAB_FMA_STEP(a2) KVLAB_FMA_STEP(a3) KVLAB_FMA_STEP(a4)
      KVLAB_FMA_STEP(a5) KVLAB_FMA_STEP(a6) KVLAB_FMA_STEP(a7) KVLAB_FMA_STEP(a8) KVLAB_FMA_STEP(a9)
#undef KVLAB_FMA_STEP
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                     _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                                   _mm512_add_ps(a8, a9)));
    float sink[16];
    _mm512_storeu_ps(sink, sum);
    benchmark::DoNotOptimize(sink[0]);
    best = std::max(best, 10.0 * static_cast<double>(kSteps) / s / 1e9);
  }
  return best;
}
}  // namespace isa_avx512

double FmaPeakPerCore() { return HostHasCpuIsa(CpuIsa::kAvx2) ? isa_avx2::FmaPeakLoop() : 0.0; }
double Fma16PeakPerCore() { return HostHasCpuIsa(CpuIsa::kAvx512) ? isa_avx512::FmaPeakLoop() : 0.0; }
#else
double FmaPeakPerCore() { return 0.0; }
double Fma16PeakPerCore() { return 0.0; }
#endif

// Measured once, on first use.
double FmaPeak() {
  static const double peak = FmaPeakPerCore();
  return peak;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times the loop itself (ms per call) and sets the shared counters.
template <typename F>
double RunLoop(benchmark::State& state, const Setup& setup, F&& call) {
  int copy = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    call(copy);
    benchmark::ClobberMemory();
    copy = (copy + 1) % setup.copies;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double iters = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  const double ms = secs * 1e3 / iters;
  // CPU time of all threads per call (OpenMP's spin-wait included): a check on
  // step_ms when other processes share the cores.
  state.counters["cpu_ms"] = (ProcessCpuSeconds() - cpu0) * 1e3 / iters;
  const double bytes = static_cast<double>(setup.BytesPerCall()) * static_cast<double>(state.iterations());
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["step_ms"] = ms;
  state.counters["cache_MB"] = static_cast<double>(setup.BytesPerCall()) / 1e6;
  state.counters["caches"] = setup.copies;
  if (const double bw = ReadBandwidth(); bw > 0) {
    state.counters["floor_frac"] = static_cast<double>(setup.BytesPerCall()) / bw / (ms * 1e-3);
  }
  if (FmaPeak() > 0) {
    const double fmas = 2.0 * kHeadDim / 8 * kHq * static_cast<double>(setup.context);
    state.counters["fma_frac"] = fmas / (ms * 1e-3) / (FmaPeak() * 1e9 * omp_get_max_threads());
  }
  return ms;
}

void BM_DecodeBf16(benchmark::State& state) {
  const int64_t context = state.range(0);
  const int layout = static_cast<int>(state.range(1));
  Setup setup(context, Format::kBf16, layout);
  if (!setup.ok()) {
    state.SkipWithError("cannot map the pools");
    return;
  }
  const AttentionParams p = setup.Params();
  if (Status st = AttentionParamsCheck(setup.Plain(0), p); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  PagedAttentionCpu(setup.Plain(0), p);  // warm-up: OpenMP thread pool
  const double ms = RunLoop(state, setup, [&](int copy) { PagedAttentionCpu(setup.Plain(copy), p); });
  Bf16Times().Add(context, layout, ms, static_cast<double>(state.iterations()));
}

void DecodeKivi2(benchmark::State& state, bool int8, bool sink = false) {
  const int64_t context = state.range(0);
  const int layout = static_cast<int>(state.range(1));
  Setup setup(sink ? context + 2 * kGroup : context, Format::kKivi2, layout);
  if (!setup.ok()) {
    state.SkipWithError("cannot map the pools");
    return;
  }
  if (sink) setup.MarkSinkWindowDead(4);
  AttentionParams p = setup.Params();
  p.int8_attention = int8;  // the kernel's arithmetic; the bytes stored do not change
  // Once: the fast path against the reference on this cache, skipping the
  // case on a mismatch. Exact path: the tests' tolerance. int8 path: within
  // 5% of the output scale and not equal to the exact result (its tested
  // bound, in core/cache/attention_encoded_test.cpp, is the tighter one).
  {
    std::vector<float> ref(setup.o.size());
    AttentionParams pr = p;
    pr.o = ref.data();
    const EncodedKV e = setup.Encoded(0);
    PagedAttentionEncodedReference(setup.Plain(0), e, pr);
    PagedAttentionEncodedCpu(setup.Plain(0), e, p);
    double worst_tol = 0, worst = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double diff = std::abs(double(ref[i]) - setup.o[i]);
      worst_tol = std::max(worst_tol, diff / (1e-5 + 1e-4 * std::abs(ref[i])));
      worst = std::max(worst, diff);
      scale = std::max(scale, std::abs(double(ref[i])));
    }
    if (int8) state.counters["err_rel"] = worst / scale;
    const bool ok = int8 ? worst <= 0.05 * scale && worst > 0 : worst_tol <= 1.0;
    if (!ok) {
      state.SkipWithError(("KIVI output is off the reference: largest difference " + std::to_string(worst) +
                           (int8 ? " (int8: more than 5% of the output scale, or none)" : ""))
                              .c_str());
      return;
    }
  }
  const double ms = RunLoop(state, setup, [&](int copy) {
    const EncodedKV e = setup.Encoded(copy);
    PagedAttentionEncodedCpu(setup.Plain(copy), e, p);
  });
  if (const double bf16 = Bf16Times().Mean(context, layout); bf16 > 0) state.counters["speedup"] = bf16 / ms;
  if (!int8 && !sink) KiviTimes().Add(context, layout, ms, static_cast<double>(state.iterations()));
  if (const double kivi = KiviTimes().Mean(context, layout); sink && kivi > 0) state.counters["vs_kivi"] = kivi / ms;
}

// The quant policy's cache through PagedAttentionEncodedCpu: the fused int8 /
// fp8 kernel, or (generic) the decode-then-attend path. Once, before timing,
// against the reference at the tests' tolerance; a mismatch skips the case.
void DecodeQuant(benchmark::State& state, Format format, bool generic) {
  const int64_t context = state.range(0);
  const int layout = static_cast<int>(state.range(1));
  Setup setup(context, format, layout);
  if (!setup.ok()) {
    state.SkipWithError("cannot map the pools");
    return;
  }
  const AttentionParams p = setup.Params();
  const ScopedQuantFusedCpu path(!generic);
  {
    std::vector<float> ref(setup.o.size());
    AttentionParams pr = p;
    pr.o = ref.data();
    const EncodedKV e = setup.Encoded(0);
    PagedAttentionEncodedReference(setup.Plain(0), e, pr);
    PagedAttentionEncodedCpu(setup.Plain(0), e, p);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(double(ref[i]) - setup.o[i]) / (1e-5 + 1e-4 * std::abs(ref[i])));
    }
    if (!(worst <= 1.0)) {
      state.SkipWithError(("quant output is off the reference: " + std::to_string(worst) + " x the tolerance").c_str());
      return;
    }
  }
  const double ms = RunLoop(state, setup, [&](int copy) {
    const EncodedKV e = setup.Encoded(copy);
    PagedAttentionEncodedCpu(setup.Plain(copy), e, p);
  });
  if (const double bf16 = Bf16Times().Mean(context, layout); bf16 > 0) state.counters["speedup"] = bf16 / ms;
}

void BM_DecodeKivi2(benchmark::State& state) { DecodeKivi2(state, false); }
void BM_DecodeSinkKivi2(benchmark::State& state) { DecodeKivi2(state, false, /*sink=*/true); }
void BM_DecodeKivi2Int8(benchmark::State& state) { DecodeKivi2(state, true); }
void BM_DecodeQuantInt8(benchmark::State& state) { DecodeQuant(state, Format::kInt8, false); }
void BM_DecodeQuantFp8(benchmark::State& state) { DecodeQuant(state, Format::kFp8, false); }
void BM_DecodeQuantInt8Generic(benchmark::State& state) { DecodeQuant(state, Format::kInt8, true); }

void Args(benchmark::internal::Benchmark* b) {
  for (int layout : {1, 3, 0}) {
    for (int64_t context : {4096, 16384}) b->Args({context, layout});
  }
  b->ArgNames({"ctx", "layout"})->UseRealTime()->Unit(benchmark::kMillisecond);
  // Best and worst of the repetitions, next to mean and median: the machine is shared.
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

BENCHMARK(BM_DecodeBf16)->Apply(Args);
BENCHMARK(BM_DecodeKivi2)->Apply(Args);
BENCHMARK(BM_DecodeSinkKivi2)->Apply(Args);
BENCHMARK(BM_DecodeKivi2Int8)->Apply(Args);
BENCHMARK(BM_DecodeQuantInt8)->Apply(Args);
BENCHMARK(BM_DecodeQuantFp8)->Apply(Args);
BENCHMARK(BM_DecodeQuantInt8Generic)->Apply(Args);

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  return kvlab::BenchMain(argc, argv, /*rotate=*/true, [] {
    benchmark::AddCustomContext("fma_peak_G_per_core", std::to_string(kvlab::FmaPeak()));
    // 16-lane FMA instructions per second per core (0 without AVX-512); 2 x
    // this / fma_peak_G_per_core is what 16-lane code could gain in lanes.
    benchmark::AddCustomContext("fma16_peak_G_per_core", std::to_string(kvlab::Fma16PeakPerCore()));
  });
}
