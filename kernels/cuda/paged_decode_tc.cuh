// The tensor-core paged decode kernel: plain (not encoded) bf16 / fp16 caches
// and GQA groups of 2 to 8 query heads, included by paged_decode_bf16.cu and
// paged_decode_f16.cu. Same grid, splits, workspace and merge as
// PagedDecodeKernel (paged_decode_kernel.cuh); the slot_attn pass stays there.
//
// A CTA of 4 warps walks its range in 64-token tiles (the CUDA-core kernel's
// TileLoader and ForEachStagedTile ring, rows padded by 16 bytes so that a
// fragment's 8 rows fall in distinct banks); warp w takes rows 16w..16w+15 of each tile and
// keeps its own online softmax. Scores S = Q K^T and the output P V are
// m16n8k16 MMAs with fp32 accumulation. The 16 rows of A carry the group's
// query rows twice: rows 0..7 the 16-bit rounding of q (and of p), rows
// 8..15 the rounding of what that left (q - hi), so row g plus row g + 8 of
// the product is q K^T to about 16 bits of q's mantissa (fp32-like), in one
// MMA. Row g + 8 of a C fragment sits in the same lane as row g, so the sum
// costs one add. docs/kernels.md ("Tensor cores") has the picture.
#pragma once

#include <type_traits>

#include "kernels/cuda/paged_decode_kernel.cuh"

namespace kvlab {
namespace cuda {
namespace detail {

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcWarpRows = 16;
constexpr int kTcTile = kTcWarps * kTcWarpRows;  // tokens per stage
constexpr int kTcMaxGroup = 8;
constexpr int kTcRowPad = 16;  // bytes after each K / V row in shared memory

__host__ __device__ constexpr int TcRowBytes(int d) { return d * 2 + kTcRowPad; }
__host__ __device__ constexpr int64_t TcStageBytes(int d) { return int64_t{2} * kTcTile * TcRowBytes(d); }
// Shared memory of the merge at the end: per warp, group rows of o and (m, l).
__host__ __device__ constexpr int64_t TcMergeBytes(int d) { return int64_t{kTcWarps} * kTcMaxGroup * (d + 2) * 4; }

// 16-bit rounding of the MMA's operand type, as bits and back.
template <typename T>
struct TcOperand;

template <>
struct TcOperand<__nv_bfloat16> {
  static constexpr bool kBf16 = true;
  __device__ __forceinline__ static uint32_t Bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
  __device__ __forceinline__ static float Value(uint32_t bits) { return __uint_as_float(bits << 16); }
};

template <>
struct TcOperand<__half> {
  static constexpr bool kBf16 = false;
  __device__ __forceinline__ static uint32_t Bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ __forceinline__ static float Value(uint32_t bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    return Storage<__half>::One(&b);
  }
};

// x0, x1 as (hi, lo) pairs: hi = round(x), lo = round(x - hi); element 0 in
// the low 16 bits of each word.
template <typename T>
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t* hi, uint32_t* lo) {
  using Op = TcOperand<T>;
  const uint32_t h0 = Op::Bits(x0), h1 = Op::Bits(x1);
  *hi = h0 | (h1 << 16);
  *lo = Op::Bits(x0 - Op::Value(h0)) | (Op::Bits(x1 - Op::Value(h1)) << 16);
}

// One warp's 16 tokens (rows r0.. of the stage, nvalid valid) through the
// online softmax of its query rows: S = Q K^T, the running max and sums, P V.
template <typename T, int D>
__device__ __forceinline__ void TcWarpTile(const uint8_t* kst, const uint8_t* vst, int r0, int nvalid, int g, int t,
                                           const uint32_t (&qa)[D / 16][4], float scale_log2, float& m, float& l,
                                           float (&o)[D / 8][4]) {
  constexpr bool kBf16 = TcOperand<T>::kBf16;
  constexpr int RB = TcRowBytes(D);
  constexpr int KS = D / 16;
  constexpr int NT = D / 8;
  // S for the warp's 16 tokens: n-tile j is tokens r0 + 8j .. + 7.
  float sc[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[j][e] = 0.0f;
    const uint8_t* krow = kst + (r0 + 8 * j + g) * RB;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + (16 * kk + 2 * t) * 2);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + (16 * kk + 8 + 2 * t) * 2);
      Mma16816<kBf16>(qa[kk], b0, b1, sc[j]);
    }
  }
  // Row g's scores of tokens r0 + 8j + 2t + e.
  float sv[2][2];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = r0 + 8 * j + 2 * t + e;
      sv[j][e] = row < nvalid ? (sc[j][e] + sc[j][2 + e]) * scale_log2 : -INFINITY;
      mx = fmaxf(mx, sv[j][e]);
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m, mx);
  const bool any = m_new != -INFINITY;
  const float alpha = any ? exp2f(m - m_new) : 1.0f;
  float p[2][2];
  float psum = 0.0f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      p[j][e] = any ? exp2f(sv[j][e] - m_new) : 0.0f;
      psum += p[j][e];
    }
  }
  m = m_new;
  l = l * alpha + psum;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] *= alpha;
  }
  // P as A: reg 0 / 2 the rounding of tokens 2t, 2t+1 / 8+2t, 9+2t, reg 1 / 3 the remainder.
  uint32_t pa[4];
  SplitPair<T>(p[0][0], p[0][1], &pa[0], &pa[1]);
  SplitPair<T>(p[1][0], p[1][1], &pa[2], &pa[3]);
  // V as B (k = token r0 + 2t + {0, 1} (+ 8), n = channel 8n + g).
  const uint8_t* v0 = vst + (r0 + 2 * t) * RB;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int cb = (8 * n + g) * 2;
    const uint32_t b0 = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(v0 + cb)) |
                        (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(v0 + RB + cb)) << 16);
    const uint32_t b1 = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(v0 + 8 * RB + cb)) |
                        (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(v0 + 9 * RB + cb)) << 16);
    Mma16816<kBf16>(pa, b0, b1, o[n]);
  }
}

// The end of a CTA: each row's sum over its 4 lanes, then the warps merged
// by log-sum-exp through the shared memory the stages no longer use, and the
// split's output and log-sum-exp written.
template <int D>
__device__ __forceinline__ void TcMergeWarps(const DecodeArgs& a, uint8_t* smem, int64_t qrow0, int split, int G,
                                             int warp, int g, int t, float m, float l, const float (&o)[D / 8][4]) {
  constexpr int NT = D / 8;
  const int tid = threadIdx.x;
  const bool row_ok = g < G;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* red_o = reinterpret_cast<float*>(smem);                         // [warps][kTcMaxGroup][D]
  float* red_ml = red_o + static_cast<int64_t>(kTcWarps) * kTcMaxGroup * D;  // [warps][kTcMaxGroup][2]
  if (row_ok) {
    float* dst = red_o + (warp * kTcMaxGroup + g) * D;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      dst[8 * n + 2 * t] = o[n][0] + o[n][2];
      dst[8 * n + 2 * t + 1] = o[n][1] + o[n][3];
    }
    if (t == 0) {
      red_ml[(warp * kTcMaxGroup + g) * 2] = m;
      red_ml[(warp * kTcMaxGroup + g) * 2 + 1] = l;
    }
  }
  __syncthreads();
  for (int x = tid; x < G * D; x += kTcThreads) {
    const int j = x / D;
    StoreMergedRow<D>(a, red_o, red_ml, kTcWarps, [&](int w) { return w * kTcMaxGroup + j; }, qrow0 + j, split, x % D);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads, 3) PagedDecodeTcKernel(const __grid_constant__ DecodeArgs a) {
  constexpr int RB = TcRowBytes(D);
  constexpr int KS = D / 16;  // k-steps of Q K^T
  constexpr int NT = D / 8;   // n-tiles of P V
  uint8_t* smem = DynamicSmem();

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int s = blockIdx.x / a.max_splits;
  const int split = blockIdx.x % a.max_splits;
  const int seq = s / a.num_kv_heads, kvh = s % a.num_kv_heads;
  const int G = a.group;
  const int64_t qrow0 = static_cast<int64_t>(seq) * a.num_qo_heads + static_cast<int64_t>(kvh) * G;

  const int32_t pb0 = a.indptr[s];
  const int32_t nb = a.indptr[s + 1] - pb0;
  const int64_t len = nb == 0 ? 0 : static_cast<int64_t>(nb - 1) * a.block_size + a.last_block_len[s];
  const int64_t start = static_cast<int64_t>(split) * a.chunk;
  const int64_t end = split == a.max_splits - 1 ? len : min(len, start + a.chunk);
  const int64_t first = a.first_visible != nullptr ? a.first_visible[s] : 0;
  const int64_t begin = max(start, first);

  if (begin >= end) {  // empty split, empty stream, or wholly before the window
    for (int x = tid; x < G * D; x += kTcThreads) {
      const int64_t row = qrow0 + x / D;
      if (a.max_splits > 1) {
        if (x % D == 0) a.tmp_lse[row * a.max_splits + split] = -INFINITY;
      } else {
        a.o[row * D + x % D] = 0.0f;
        if (x % D == 0) a.lse[row] = -INFINITY;
      }
    }
    return;
  }

  // Q as A fragments: regs 0 / 2 the rounding (rows g), 1 / 3 the remainder
  // (rows g + 8), columns 16 kk + 2t (+ 8 for regs 2, 3).
  uint32_t qa[KS][4];
  const bool row_ok = g < G;
  const float* qrow = a.q + (qrow0 + (row_ok ? g : 0)) * D;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = 16 * kk + 8 * h + 2 * t;
      const float x0 = row_ok ? qrow[col] : 0.0f, x1 = row_ok ? qrow[col + 1] : 0.0f;
      SplitPair<T>(x0, x1, &qa[kk][2 * h], &qa[kk][2 * h + 1]);
    }
  }

  // The range's rows, 64 a tile, K then V, through the shared plain-row
  // loader with this kernel's padded rows (a.tile is kTcTile here).
  const int n_tiles = static_cast<int>((end - begin + kTcTile - 1) / kTcTile);
  const TileLoader<T, D, RB> loader{&a, tid, 0, 0, start, begin, end, 0, pb0, 0, 2};

  float m = -INFINITY;  // row g's running max (log2 units), the same in its 4 lanes
  float l = 0.0f;       // this lane's part of row g's sum
  float o[NT][4];       // P V: [n][0..1] row g (hi part), [n][2..3] row g + 8 (lo part)
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
  }

  auto load = [&](int i, uint8_t* stage) { loader.Load(i, stage); };
  ForEachStagedTile(smem, a.stage_bytes, a.stages, n_tiles, load, [&](int i, const uint8_t* kst) {
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(kTcTile), end - (begin + static_cast<int64_t>(i) * kTcTile)));
    const int r0 = warp * kTcWarpRows;
    if (r0 < nvalid) TcWarpTile<T, D>(kst, kst + kTcTile * RB, r0, nvalid, g, t, qa, a.scale_log2, m, l, o);  // warp-uniform
  });

  TcMergeWarps<D>(a, smem, qrow0, split, G, warp, g, t, m, l, o);
}

template <typename T>
DecodeKernelFn SelectTcByDim(int d) {
  switch (d) {
    case 64: return PagedDecodeTcKernel<T, 64>;
    case 128: return PagedDecodeTcKernel<T, 128>;
  }
  return nullptr;
}

// In paged_decode_bf16.cu / paged_decode_f16.cu; nullptr for another head_dim.
DecodeKernelFn SelectDecodeKernelTcBF16(int head_dim);
DecodeKernelFn SelectDecodeKernelTcF16(int head_dim);

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
