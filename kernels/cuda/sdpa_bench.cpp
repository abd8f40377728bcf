// kvlab's CUDA paged decode against PyTorch's attention on the same K/V, timed
// in one process: one Llama-3.1-8B attention layer (32 query heads, 8 KV
// heads, head_dim 128, bf16), batch 1/16/64 x context 1K..32K. kvlab reads a
// paged cache (block size 16, blocks in random order, fp32 queries rounded to
// bf16 values); PyTorch reads the same values laid out dense [B, 8, S, 128]
// bf16 and runs at::scaled_dot_product_attention (libtorch >= 2; before that
// matmul + softmax) with the group's 4 query heads as 4 query rows per KV head
// (no causal mask in decode, so this is exactly GQA decode, and K/V are not
// repeated per query head). Both are timed with CUDA events on the default
// stream, L2 flushed before each call, after warm-up; the outputs are compared
// (max |difference|; bf16 output rounding allows about 1e-2).
//
// Counters per point: kvlab_us, sdpa_us, sdpa_over_kvlab (> 1: kvlab is
// faster), kv_bytes (the K/V bytes each reads), kvlab_/sdpa_bytes_per_s and
// _frac_of_peak (of the H200's 4.8 TB/s), splits, max_abs_diff. Written as
// Google Benchmark-shaped JSON (--out=PATH; this file does not use Google
// Benchmark, whose std::string API need not match libtorch's C++ ABI) and
// printed as a table. Exit status: 0, or 1 when a point failed or the outputs
// disagree. Without a GPU (or when libtorch cannot use it) it says so and
// exits 0.
//
// Built only against a libtorch with CUDA (kernels/cuda/CMakeLists.txt);
// evals/gpu/device-check.sh builds and runs it on GPU machines.
//
//   sdpa_bench --out=results/gpu/sdpa_bench.json
//   sdpa_bench --self-check   # the layouts against kvlab's CPU reference, no GPU needed
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_reference.h"
#include "kernels/cuda/paged_decode.h"

namespace kvlab {
namespace {

constexpr double kPeakBytesPerSecond = 4.8e12;  // H200 HBM3e datasheet
constexpr int kHq = 32, kHkv = 8, kDim = 128, kBlock = 16;
constexpr double kAgreeAbs = 5e-2;  // outputs are ~0.1; bf16 rounding of o and of P (flash) is ~1e-3..1e-2

#if TORCH_VERSION_MAJOR >= 2
constexpr const char* kDenseName = "at::scaled_dot_product_attention";
#else
constexpr const char* kDenseName = "at::matmul + at::softmax (libtorch < 2)";
#endif

// PyTorch's attention over dense q [B, Hkv, group, D], k / v [B, Hkv, S, D].
at::Tensor DenseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);  // scale 1/sqrt(D), no mask
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const at::Tensor s = at::matmul(q, k.transpose(-2, -1)).mul(scale);
  return at::matmul(at::softmax(s, -1, at::kFloat).to(q.scalar_type()), v);
#endif
}

// The paged copy of dense k, v [B, 8, S, 128] (S a multiple of kBlock), on
// their device: pool [blocks, 2, kBlock, kDim] where block j of stream
// s = b * 8 + h is pool block perm[s * nblk + j] (a random permutation);
// indptr, indices (= perm) and last_block_len as PagedKV wants them.
struct PagedCopy {
  at::Tensor pool, indptr, indices, last;
  PagedKV View() const {
    PagedKV kv;
    kv.base = static_cast<uint8_t*>(pool.data_ptr());
    kv.block_bytes = 2LL * kBlock * kDim * 2;
    kv.dtype = DType::kBF16;
    kv.block_size = kBlock;
    kv.head_dim = kDim;
    kv.num_streams = static_cast<int>(last.size(0));
    kv.indptr = indptr.data_ptr<int32_t>();
    kv.indices = indices.data_ptr<int32_t>();
    kv.last_block_len = last.data_ptr<int32_t>();
    return kv;
  }
};

PagedCopy MakePagedCopy(const at::Tensor& k, const at::Tensor& v) {
  const int64_t streams = k.size(0) * k.size(1), nblk = k.size(2) / kBlock, num_blocks = streams * nblk;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks)), indptr(static_cast<size_t>(streams) + 1),
      last(static_cast<size_t>(streams), kBlock);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t s = 0; s <= streams; ++s) indptr[static_cast<size_t>(s)] = static_cast<int32_t>(s * nblk);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  PagedCopy pc;
  // clone(): from_blob does not own the vectors' memory.
  pc.indices = at::from_blob(perm.data(), {num_blocks}, i32).clone().to(k.device());
  pc.indptr = at::from_blob(indptr.data(), {streams + 1}, i32).clone().to(k.device());
  pc.last = at::from_blob(last.data(), {streams}, i32).clone().to(k.device());
  pc.pool = at::empty({num_blocks, 2, kBlock, kDim}, k.options());
  pc.pool.index_copy_(0, pc.indices.to(at::kLong),
                      at::stack({k.reshape({streams, nblk, kBlock, kDim}), v.reshape({streams, nblk, kBlock, kDim})}, 2)
                          .reshape({num_blocks, 2, kBlock, kDim}));
  return pc;
}

// --self-check, on the CPU (no GPU needed): the paged copy read by kvlab's CPU
// reference (PagedAttentionReference) against DenseAttention on the dense
// tensors, at batch 2, 48 tokens. Checks the layouts and the head mapping.
int SelfCheck() {
  const int batch = 2, ctx = 3 * kBlock, group = kHq / kHkv;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  at::manual_seed(1);
  const at::Tensor k = at::empty({batch, kHkv, ctx, kDim}, bf16).uniform_(-1.0, 1.0);
  const at::Tensor v = at::empty({batch, kHkv, ctx, kDim}, bf16).uniform_(-1.0, 1.0);
  const at::Tensor q_bf16 = at::empty({batch, kHq, kDim}, at::kFloat).uniform_(-1.0, 1.0).to(at::kBFloat16);
  const at::Tensor q = q_bf16.to(at::kFloat).contiguous();
  at::Tensor o = at::zeros({batch, kHq, kDim}, at::kFloat);
  const PagedCopy pc = MakePagedCopy(k, v);
  const std::vector<int32_t> qo_indptr = {0, 1, 2};
  AttentionParams p;
  p.num_seqs = batch;
  p.num_qo_heads = kHq;
  p.num_kv_heads = kHkv;
  p.head_dim = kDim;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  p.qo_indptr = qo_indptr.data();
  p.q = q.data_ptr<float>();
  p.o = o.data_ptr<float>();
  PagedAttentionReference(pc.View(), p);
  const at::Tensor dense = DenseAttention(q_bf16.view({batch, kHkv, group, kDim}), k, v).reshape({batch, kHq, kDim});
  const double diff = (o - dense.to(at::kFloat)).abs().max().item<double>();
  const double scale = o.abs().max().item<double>();
  std::printf("sdpa_bench --self-check: max |kvlab reference - %s| = %.3g (outputs up to %.3g): %s\n", kDenseName, diff,
              scale, diff <= kAgreeAbs ? "agree" : "DISAGREE");
  return diff <= kAgreeAbs ? 0 : 1;
}

struct Point {
  int batch = 0, ctx = 0, iters = 0, splits = 0;
  double kv_bytes = 0, kvlab_s = 0, sdpa_s = 0, max_abs_diff = 0;
  std::string error;
};

std::string CudaError(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Mean seconds per call of call() (which returns an error message, empty on
// success) over `iters` calls, each after writing `flush_bytes` (evicting L2).
template <class Call>
std::string TimeCalls(const Call& call, void* flush, size_t flush_bytes, int iters, double* mean_s) {
  for (int i = 0; i < 3; ++i) {
    const std::string err = call();
    if (!err.empty()) return err;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  double total = 0.0;
  std::string err;
  for (int i = 0; i < iters && e == cudaSuccess && err.empty(); ++i) {
    e = cudaMemsetAsync(flush, i & 0xff, flush_bytes, nullptr);
    if (e == cudaSuccess) e = cudaEventRecord(start, nullptr);
    if (e != cudaSuccess) break;
    err = call();
    if (e == cudaSuccess) e = cudaEventRecord(stop, nullptr);
    if (e == cudaSuccess) e = cudaEventSynchronize(stop);
    float ms = 0.0f;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, stop);
    total += ms * 1e-3;
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (!err.empty()) return err;
  if (e != cudaSuccess) return CudaError("timing", e);
  *mean_s = total / iters;
  return "";
}

// One (batch, ctx) point: builds both layouts of the same K/V, checks that the
// outputs agree, times both.
Point RunPoint(int batch, int ctx, void* flush, size_t flush_bytes) {
  Point pt;
  pt.batch = batch;
  pt.ctx = ctx;
  const int streams = batch * kHkv, group = kHq / kHkv;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  if (ctx % kBlock != 0) {
    pt.error = "ctx must be a multiple of the block size";
    return pt;
  }
  try {
    at::manual_seed(42);
    const at::Tensor k = at::empty({batch, kHkv, ctx, kDim}, bf16).uniform_(-1.0, 1.0);
    const at::Tensor v = at::empty({batch, kHkv, ctx, kDim}, bf16).uniform_(-1.0, 1.0);
    const at::Tensor q_bf16 = at::empty({batch, kHq, kDim}, f32).uniform_(-1.0, 1.0).to(at::kBFloat16);
    const at::Tensor q = q_bf16.to(at::kFloat).contiguous();  // kvlab's fp32 queries: the same values
    at::Tensor o = at::empty({batch, kHq, kDim}, f32);

    const PagedCopy pc = MakePagedCopy(k, v);
    const PagedKV kv = pc.View();
    AttentionParams p;
    p.num_seqs = batch;
    p.num_qo_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kDim;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    p.q = q.data_ptr<float>();
    p.o = o.data_ptr<float>();
    cuda::PagedDecodeShape shape;
    shape.num_seqs = batch;
    shape.num_qo_heads = kHq;
    shape.num_kv_heads = kHkv;
    shape.head_dim = kDim;
    shape.dtype = DType::kBF16;
    std::vector<int64_t> stream_len(static_cast<size_t>(streams), ctx);
    cuda::PagedDecodePlan plan;
    cudaError_t e = cuda::PlanPagedDecode(shape, stream_len.data(), cuda::PagedDecodeOptions(), &plan);
    if (e != cudaSuccess) {
      pt.error = CudaError("PlanPagedDecode", e);
      return pt;
    }
    pt.splits = plan.max_splits;
    const at::Tensor ws = at::empty({std::max<int64_t>(plan.workspace_bytes, 1)}, bf16.dtype(at::kByte));
    auto kvlab_call = [&]() -> std::string {
      const cudaError_t err = cuda::PagedDecode(plan, kv, nullptr, p, ws.data_ptr(), plan.workspace_bytes, nullptr);
      return err == cudaSuccess ? "" : CudaError("PagedDecode", err);
    };
    const at::Tensor q_dense = q_bf16.view({batch, kHkv, group, kDim});
    at::Tensor dense_out;
    auto sdpa_call = [&]() -> std::string {
      dense_out = DenseAttention(q_dense, k, v);
      return "";
    };

    // Same answer?
    std::string err = kvlab_call();
    if (err.empty()) err = sdpa_call();
    if (err.empty() && (e = cudaDeviceSynchronize()) != cudaSuccess) err = CudaError("first calls", e);
    if (!err.empty()) {
      pt.error = err;
      return pt;
    }
    pt.max_abs_diff = (o - dense_out.reshape({batch, kHq, kDim}).to(at::kFloat)).abs().max().item<double>();

    pt.kv_bytes = 2.0 * streams * static_cast<double>(ctx) * kDim * 2;
    pt.iters = static_cast<int>(std::min(200.0, std::max(10.0, std::ceil(0.02 / (pt.kv_bytes / 3e12 + 10e-6)))));
    err = TimeCalls(kvlab_call, flush, flush_bytes, pt.iters, &pt.kvlab_s);
    if (err.empty()) err = TimeCalls(sdpa_call, flush, flush_bytes, pt.iters, &pt.sdpa_s);
    if (err.empty() && (e = cudaGetLastError()) != cudaSuccess) err = CudaError("after timing", e);
    pt.error = err;
  } catch (const std::exception& ex) {
    pt.error = std::string("exception: ") + ex.what();
  }
  return pt;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// A JSON number: non-finite values (a NaN output, a zero time) as 1e30.
double Num(double x) { return std::isfinite(x) ? x : 1e30; }

void WriteJson(const std::string& path, const std::string& gpu, const std::vector<Point>& points, const char* skipped) {
  std::ofstream f(path);
  f << "{\n  \"context\": {\"gpu\": \"" << JsonEscape(gpu) << "\", \"torch_version\": \"" << TORCH_VERSION
    << "\", \"dense_attention\": \"" << kDenseName << "\", \"peak_bytes_per_s\": " << kPeakBytesPerSecond;
  if (skipped != nullptr) f << ", \"skipped\": \"" << JsonEscape(skipped) << "\"";
  f << "},\n  \"benchmarks\": [";
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& pt = points[i];
    f << (i == 0 ? "\n" : ",\n") << "    {\"name\": \"BM_KvlabVsSdpa/bf16/batch:" << pt.batch << "/ctx:" << pt.ctx
      << "\", \"run_type\": \"iteration\", \"time_unit\": \"us\"";
    if (!pt.error.empty()) {
      f << ", \"error_occurred\": true, \"error_message\": \"" << JsonEscape(pt.error) << "\"}";
      continue;
    }
    f << ", \"iterations\": " << pt.iters << ", \"real_time\": " << Num(pt.kvlab_s * 1e6)
      << ", \"kvlab_us\": " << Num(pt.kvlab_s * 1e6) << ", \"sdpa_us\": " << Num(pt.sdpa_s * 1e6)
      << ", \"sdpa_over_kvlab\": " << Num(pt.sdpa_s / pt.kvlab_s) << ", \"kv_bytes\": " << pt.kv_bytes
      << ", \"kvlab_bytes_per_s\": " << Num(pt.kv_bytes / pt.kvlab_s)
      << ", \"sdpa_bytes_per_s\": " << Num(pt.kv_bytes / pt.sdpa_s)
      << ", \"kvlab_frac_of_peak\": " << Num(pt.kv_bytes / pt.kvlab_s / kPeakBytesPerSecond)
      << ", \"sdpa_frac_of_peak\": " << Num(pt.kv_bytes / pt.sdpa_s / kPeakBytesPerSecond)
      << ", \"splits\": " << pt.splits << ", \"max_abs_diff\": " << Num(pt.max_abs_diff) << "}";
  }
  f << "\n  ]\n}\n";
}

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--out=", 6) == 0) {
      out = argv[i] + 6;
    } else if (std::strcmp(argv[i], "--self-check") == 0) {
      return kvlab::SelfCheck();
    } else {
      std::fprintf(stderr, "usage: sdpa_bench [--out=results.json] [--self-check]\n");
      return 2;
    }
  }
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  const char* skipped = nullptr;
  if (err != cudaSuccess || n == 0) {
    skipped = "no GPU (cudaGetDeviceCount)";
  } else if (!at::hasCUDA()) {
    skipped = "libtorch sees no CUDA device (its CUDA runtime and the driver may not match)";
  }
  std::string gpu = "?";
  cudaDeviceProp prop{};
  if (skipped == nullptr && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) gpu = prop.name;
  std::vector<kvlab::Point> points;
  if (skipped != nullptr) {
    std::printf("sdpa_bench: %s: nothing to measure\n", skipped);
    if (!out.empty()) kvlab::WriteJson(out, gpu, points, skipped);
    return 0;
  }

  int l2_bytes = 0;
  cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0);
  const size_t flush_bytes = std::max<size_t>(2 * static_cast<size_t>(l2_bytes), size_t{64} << 20);
  void* flush = nullptr;
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
    std::fprintf(stderr, "sdpa_bench: cudaMalloc of the L2 flush buffer failed\n");
    return 1;
  }
  std::printf("sdpa_bench: %s, libtorch %s, dense: %s\n", gpu.c_str(), TORCH_VERSION, kvlab::kDenseName);
  std::printf("%5s %6s | %9s %5s | %9s %5s | %7s %6s %9s\n", "batch", "ctx", "kvlab us", "TB/s", "sdpa us", "TB/s",
              "sdpa/kv", "splits", "max|diff|");
  int status = 0;
  for (int batch : {1, 16, 64}) {
    for (int ctx : {1024, 4096, 8192, 16384, 32768}) {
      const kvlab::Point pt = kvlab::RunPoint(batch, ctx, flush, flush_bytes);
      points.push_back(pt);
      if (!pt.error.empty()) {
        std::printf("%5d %6d | ERROR %s\n", batch, ctx, pt.error.c_str());
        status = 1;
        continue;
      }
      const bool agree = pt.max_abs_diff <= kvlab::kAgreeAbs;
      if (!agree) status = 1;
      std::printf("%5d %6d | %9.1f %5.2f | %9.1f %5.2f | %7.2f %6d %9.2e%s\n", batch, ctx, pt.kvlab_s * 1e6,
                  pt.kv_bytes / pt.kvlab_s / 1e12, pt.sdpa_s * 1e6, pt.kv_bytes / pt.sdpa_s / 1e12,
                  pt.sdpa_s / pt.kvlab_s, pt.splits, pt.max_abs_diff, agree ? "" : "  DISAGREE");
      std::fflush(stdout);
    }
  }
  cudaFree(flush);
  if (!out.empty()) kvlab::WriteJson(out, gpu, points, nullptr);
  return status;
}
