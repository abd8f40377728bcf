// The paged decode attention kernel (flash-decoding over the PagedKV page
// table), included by one .cu per storage dtype so that they compile in
// parallel. Host code: paged_decode.cu.
//
// Grid: one CTA per (stream, split); a stream is (sequence, KV head), so a CTA
// serves ALL query heads of the KV head's group and reads each K/V row once.
// A CTA walks its token range in tiles staged through shared memory by
// cp.async (DecodeArgs::stages deep, 2 to kMaxStages: the next stages - 1
// tiles load while this one is computed): the
// stream's encoded blocks first (KIVI: a tile = one block; int8 / fp8: a tile
// = several consecutive blocks of the stream; dequantised in registers), then
// its plain blocks. Threads: head_slices x rows x TPR,
// where TPR = head_dim / (16 / sizeof(T)) threads share one row with one
// 16-byte vector each, `rows` row groups take different rows of the tile and
// keep their own online-softmax state, and head slices split the group's query
// heads (heads_per_thread each). Row groups merge by log-sum-exp at the end;
// splits of a stream merge in MergeSplitsKernel. docs/kernels.md has the picture.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/kv_encoding.h"

namespace kvlab {
namespace cuda {
namespace detail {

constexpr int kRowsPerThread = 4;      // rows one row group takes per sub-tile (RPT)
constexpr int kMaxThreads = 256;       // CTA size bound; with min 1 CTA/SM ptxas may use 255 registers
constexpr int kTargetSliceThreads = 128;
constexpr int kMinChunkTokens = 128;   // smallest split worth its combine
constexpr int kChunkGranule = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxEncTileTokens = 256;  // int8 / fp8: most tokens of one encoded tile
constexpr int kMaxStages = 4;           // pipeline depth bound (cp.async.wait_group takes an immediate)

// What the encoded segment of a kernel instantiation can be (a template
// parameter, so that plain / KIVI caches run exactly the kernel they ran
// before int8 / fp8 existed, in their own translation units).
enum EncFamily : int {
  kEncKivi = 0,  // none or KIVI (2 / 4 bits)
  kEncQ8 = 1,    // int8 or fp8 (e4m3): DecodeArgs::enc_kind says which
};

struct DecodeArgs : PageTableArgs<const uint8_t> {  // the plain segment's page table (PagedKV)
  const int32_t* last_block_len;
  // Encoded segment; enc_base == nullptr when there is none.
  const uint8_t* enc_base;
  int64_t enc_block_bytes;
  const int32_t* enc_indptr;
  const int32_t* enc_indices;
  int enc_tpb;             // tokens per encoded block
  int enc_bits;            // 2 or 4 (KIVI)
  int enc_kind;            // EncodingKind
  int enc_vgroup_shift;    // log2(value channel group) (KIVI)
  int enc_copy_bytes;      // BlockBytes(), a multiple of 4
  int enc_copy16;          // 1: BlockBytes() and the arena stride are multiples of 16 (16-byte copies)
  int enc_tile_blocks;     // encoded blocks per tile (1 for KIVI)
  int enc_smem_stride;     // bytes between the blocks of a tile in shared memory (multiple of 16)
  int enc_tpb_shift;       // int8 / fp8: log2(enc_tpb)
  int enc_scale_mask;      // int8 / fp8: enc_tpb - 1 with per-token scales, 0 with one per block
  int64_t enc_code_bytes;  // bytes of K codes (== V codes)
  int64_t enc_kscale_off, enc_kzero_off, enc_vscale_off, enc_vzero_off;
  // Queries and outputs.
  const float* q;
  float* o;
  float* tmp_o;    // [rows][max_splits][D] when max_splits > 1
  float* tmp_lse;  // [rows][max_splits]
  float* lse;      // [rows]: final log2-sum-exp2 of the scaled scores
  float* slot_attn;
  const int64_t* slot_offsets;
  const int32_t* first_visible;  // [streams] or null: the query's first visible slot (a sliding window)
  int num_kv_heads, num_qo_heads, group;
  int head_slices, rows, tile;
  int chunk, max_splits;
  int64_t stage_bytes;
  int stages;        // pipeline stages in shared memory (2..kMaxStages)
  int part_stride;  // floats per head slice in the slot_attn partial buffer
  float scale_log2;  // sm_scale * log2(e)
  int slot_pass;     // 0: attention, 1: slot_attn pass (needs lse)
};

// A thread's online-softmax state for its heads_per_thread query heads over
// its VEC channels (scores in log2 units).
template <int GPT, int VEC>
struct SoftmaxState {
  float m[GPT];
  float l[GPT];
  float acc[GPT][VEC];
};

// Rows of a plain tile in shared memory: K[tile][D] then V[tile][D].
template <typename T, int D>
struct PlainRows {
  const uint8_t* k;
  const uint8_t* v;
  __device__ __forceinline__ void Key(int row, int c, float* out) const {
    const uint4 raw = *reinterpret_cast<const uint4*>(k + (static_cast<int64_t>(row) * D) * sizeof(T) + c * 16);
    Storage<T>::ToF32(raw, out);
  }
  __device__ __forceinline__ void Value(int row, int c, float* out) const {
    const uint4 raw = *reinterpret_cast<const uint4*>(v + (static_cast<int64_t>(row) * D) * sizeof(T) + c * 16);
    Storage<T>::ToF32(raw, out);
  }
};

// Loads the NB-byte little-endian word holding VEC consecutive codes.
template <int NB>
__device__ __forceinline__ uint32_t LoadCodeWord(const uint8_t* p) {
  if constexpr (NB == 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (NB == 2) {
    return *reinterpret_cast<const uint16_t*>(p);
  } else {
    return *p;
  }
}

// Rows of one KIVI block in shared memory (layout of kv_encoding.h: K codes,
// V codes, K scales, K zeros, V scales, V zeros); keys per channel, values per
// token over runs of 2^vgroup_shift channels. x = code * scale + zero, as
// DecodeKvBlock (here one fused multiply-add: within 1 ulp of it).
template <int D, int VEC, int BITS>
struct KiviRows {
  static constexpr int kBytes = VEC * BITS / 8;  // 1, 2 or 4
  static constexpr uint32_t kMask = (1u << BITS) - 1u;
  const uint8_t* kcodes;
  const uint8_t* vcodes;
  const __half* kscale;
  const __half* kzero;
  const __half* vscale;
  const __half* vzero;
  int vgroup_shift;

  __device__ __forceinline__ void Init(const uint8_t* blk, const DecodeArgs& a) {
    kcodes = blk;
    vcodes = blk + a.enc_code_bytes;
    kscale = reinterpret_cast<const __half*>(blk + a.enc_kscale_off);
    kzero = reinterpret_cast<const __half*>(blk + a.enc_kzero_off);
    vscale = reinterpret_cast<const __half*>(blk + a.enc_vscale_off);
    vzero = reinterpret_cast<const __half*>(blk + a.enc_vzero_off);
    vgroup_shift = a.enc_vgroup_shift;
  }
  // Key parameters are per channel: the same for every row of the block
  // (re-read from shared memory rather than held in registers).
  __device__ __forceinline__ void Key(int row, int c, float* out) const {
    const uint32_t w = LoadCodeWord<kBytes>(kcodes + (row * D * BITS) / 8 + c * kBytes);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      out[e] = fmaf(static_cast<float>((w >> (e * BITS)) & kMask), __half2float(kscale[c * VEC + e]),
                    __half2float(kzero[c * VEC + e]));
    }
  }
  __device__ __forceinline__ void Value(int row, int c, float* out) const {
    const uint32_t w = LoadCodeWord<kBytes>(vcodes + (row * D * BITS) / 8 + c * kBytes);
    const int groups_per_token = D >> vgroup_shift;
    if ((1 << vgroup_shift) >= VEC) {  // all VEC channels in one value group
      const int g = row * groups_per_token + ((c * VEC) >> vgroup_shift);
      const float sc = __half2float(vscale[g]), zr = __half2float(vzero[g]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] = fmaf(static_cast<float>((w >> (e * BITS)) & kMask), sc, zr);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int g = row * groups_per_token + ((c * VEC + e) >> vgroup_shift);
        out[e] = fmaf(static_cast<float>((w >> (e * BITS)) & kMask), __half2float(vscale[g]), __half2float(vzero[g]));
      }
    }
  }
};

// Rows of an int8 / fp8 tile in shared memory: enc_tile_blocks blocks of
// enc_tpb tokens, enc_smem_stride bytes apart, each laid out as kv_encoding.h
// says (K codes [t][d], V codes [t][d], K scales, V scales; one fp16 scale per
// token row, or one per block). x = code * scale exactly as DecodeKvBlock.
template <int D, int VEC, bool FP8>
struct Quant8Rows {
  const uint8_t* stage;
  int stride, tpb_shift, tpb_mask, scale_mask;
  int64_t vcodes_off, kscale_off, vscale_off;

  __device__ __forceinline__ void Init(const uint8_t* st, const DecodeArgs& a) {
    stage = st;
    stride = a.enc_smem_stride;
    tpb_shift = a.enc_tpb_shift;
    tpb_mask = a.enc_tpb - 1;
    scale_mask = a.enc_scale_mask;
    vcodes_off = a.enc_code_bytes;
    kscale_off = a.enc_kscale_off;
    vscale_off = a.enc_vscale_off;
  }
  __device__ __forceinline__ void Row(int row, int c, int64_t codes_off, int64_t scale_off, float* out) const {
    const uint8_t* blk = stage + (row >> tpb_shift) * stride;
    const int t = row & tpb_mask;
    const float sc = __half2float(reinterpret_cast<const __half*>(blk + scale_off)[t & scale_mask]);
    const uint8_t* p = blk + codes_off + t * D + c * VEC;
    uint32_t w[VEC / 4];
    if constexpr (VEC == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x;
      w[1] = u.y;
    } else {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
      if constexpr (FP8) {
        Fp8x4ToF32(w[i], sc, out + 4 * i);
      } else {
        Int8x4ToF32(w[i], sc, out + 4 * i);
      }
    }
  }
  __device__ __forceinline__ void Key(int row, int c, float* out) const { Row(row, c, 0, kscale_off, out); }
  __device__ __forceinline__ void Value(int row, int c, float* out) const { Row(row, c, vcodes_off, vscale_off, out); }
};

// Scores of rows base + r + k*rows (k < RPT) for the thread's GPT heads,
// reduced over the TPR threads of the row group; -inf for rows >= row_end.
// Every thread of the CTA calls it the same number of times (shuffles).
template <int D, int VEC, int GPT, class Rows>
__device__ __forceinline__ void ScoreRows(const Rows& src, int base, int row_end, int r, int rows, int c,
                                          const float (&q)[GPT][VEC], float scale_log2,
                                          float (&s)[kRowsPerThread][GPT]) {
  constexpr int TPR = D / VEC;
#pragma unroll
  for (int k = 0; k < kRowsPerThread; ++k) {
    const int row = base + r + k * rows;
    const bool valid = row < row_end;
    float kf[VEC];
    if (valid) {
      src.Key(row, c, kf);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) kf[e] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < GPT; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) dot = fmaf(q[j][e], kf[e], dot);
#pragma unroll
      for (int off = TPR / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      s[k][j] = valid ? dot * scale_log2 : -INFINITY;
    }
  }
}

// Online softmax over rows [row_begin, row_end) of a tile for one thread.
template <int D, int VEC, int GPT, class Rows>
__device__ __forceinline__ void AttendRows(const Rows& src, int row_begin, int row_end, int r, int rows, int c,
                                           const float (&q)[GPT][VEC], float scale_log2, SoftmaxState<GPT, VEC>& st) {
  for (int base = row_begin; base < row_end; base += rows * kRowsPerThread) {
    float s[kRowsPerThread][GPT];
    ScoreRows<D, VEC, GPT>(src, base, row_end, r, rows, c, q, scale_log2, s);
    float p[kRowsPerThread][GPT];
#pragma unroll
    for (int j = 0; j < GPT; ++j) {
      float mt = s[0][j];
#pragma unroll
      for (int k = 1; k < kRowsPerThread; ++k) mt = fmaxf(mt, s[k][j]);
      const float m_new = fmaxf(st.m[j], mt);
      const bool any = m_new != -INFINITY;  // else no valid row yet: keep the state
      const float alpha = any ? exp2f(st.m[j] - m_new) : 1.0f;
      float psum = 0.0f;
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        p[k][j] = any ? exp2f(s[k][j] - m_new) : 0.0f;
        psum += p[k][j];
      }
      st.m[j] = m_new;
      st.l[j] = st.l[j] * alpha + psum;
#pragma unroll
      for (int e = 0; e < VEC; ++e) st.acc[j][e] *= alpha;
    }
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      const int row = base + r + k * rows;
      if (row < row_end) {
        float vf[VEC];
        src.Value(row, c, vf);
#pragma unroll
        for (int j = 0; j < GPT; ++j) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) st.acc[j][e] = fmaf(p[k][j], vf[e], st.acc[j][e]);
        }
      }
    }
  }
}

// slot_attn pass over rows [0, row_end) of a tile: each row group writes
// sum_j exp2(s_j - lse_j) over its heads into part[hs * part_stride + row]
// (0 for rows before row_lo, outside the query's window).
template <int D, int VEC, int GPT, class Rows>
__device__ __forceinline__ void SlotRows(const Rows& src, int row_lo, int row_end, int r, int rows, int c,
                                         const float (&q)[GPT][VEC], const float (&lse)[GPT], float scale_log2,
                                         float* part) {
  for (int base = 0; base < row_end; base += rows * kRowsPerThread) {
    float s[kRowsPerThread][GPT];
    ScoreRows<D, VEC, GPT>(src, base, row_end, r, rows, c, q, scale_log2, s);
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      const int row = base + r + k * rows;
      if (row < row_end && c == 0) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < GPT; ++j) sum += exp2f(s[k][j] - lse[j]);
        part[row] = row < row_lo ? 0.0f : sum;
      }
    }
  }
}

// Issues the cp.async copies of tile i of a CTA's range into a stage:
// enc_tile_blocks encoded blocks verbatim (fewer in the range's last encoded
// tile), or a.tile plain rows (K then V; rows past the range are zero-filled
// so that no stale value meets a zero weight). kRowBytes: the stage's bytes
// between rows (a row's own bytes, or more for a padded layout).
template <typename T, int D, int kRowBytes = D * static_cast<int>(sizeof(T))>
struct TileLoader {
  const DecodeArgs* a;
  int tid, n_enc_tiles, n_enc_blocks;  // encoded tiles and blocks of the range
  int64_t start, plain_start, end, n_enc;
  int32_t pb0, eb0;
  int kinds;  // 2: K and V; 1: K only

  // Copies blocks [j0, j0 + nblk) of the range, `piece` bytes at a time.
  template <int PIECE>
  __device__ __forceinline__ void LoadEncoded(int j0, int nblk, uint8_t* stage) const {
    const int per_block = a->enc_copy_bytes / PIECE;
    const int64_t e0 = start / a->enc_tpb + j0;  // the stream's encoded block of the tile's first
    int j = tid / per_block, off = tid - j * per_block;
    while (j < nblk) {
      const uint8_t* src = a->enc_base + static_cast<int64_t>(a->enc_indices[eb0 + e0 + j]) * a->enc_block_bytes;
      uint8_t* dst = stage + j * a->enc_smem_stride;
      if constexpr (PIECE == 16) {
        CpAsync16(dst + off * 16, src + off * 16);
      } else {
        CpAsync4(dst + off * 4, src + off * 4);
      }
      off += blockDim.x;
      while (off >= per_block) {
        off -= per_block;
        ++j;
      }
    }
  }

  __device__ __forceinline__ void Load(int i, uint8_t* stage) const {
    constexpr int TPR = D * static_cast<int>(sizeof(T)) / 16;
    if (i < n_enc_tiles) {
      const int j0 = i * a->enc_tile_blocks;
      const int nblk = min(a->enc_tile_blocks, n_enc_blocks - j0);
      if (a->enc_copy16) {
        LoadEncoded<16>(j0, nblk, stage);
      } else {
        LoadEncoded<4>(j0, nblk, stage);
      }
      return;
    }
    const int64_t t0 = plain_start + static_cast<int64_t>(i - n_enc_tiles) * a->tile;
    const int64_t p0 = t0 - n_enc;  // plain slot of the tile's first row
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(a->tile), end - t0));
    const int pieces_per_kind = a->tile * TPR;
    for (int piece = tid; piece < pieces_per_kind * kinds; piece += blockDim.x) {
      const int kv = piece / pieces_per_kind;
      const int rem = piece - kv * pieces_per_kind;
      const int row = rem / TPR, pc = rem % TPR;
      uint8_t* dst = stage + (static_cast<int64_t>(kv) * a->tile + row) * kRowBytes + pc * 16;
      if (row < nvalid) {
        const int64_t slot = p0 + row;
        const int32_t blk = a->indices[pb0 + static_cast<int32_t>(slot / a->block_size)];
        const uint8_t* src = a->base + static_cast<int64_t>(blk) * a->block_bytes +
                             (static_cast<int64_t>(kv) * a->block_size + slot % a->block_size) * D * sizeof(T) + pc * 16;
        CpAsync16(dst, src);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
};

// One tile's rows through the attention (or the slot_attn) pass; rows before
// row_lo are outside the query's window.
template <int D, int VEC, int GPT, class Rows>
__device__ __forceinline__ void TileRows(const Rows& src, int row_lo, int nrows, const DecodeArgs& a, int r, int c,
                                         const float (&q)[GPT][VEC], const float (&lse)[GPT], float* part,
                                         SoftmaxState<GPT, VEC>& st) {
  if (a.slot_pass) {
    SlotRows<D, VEC, GPT>(src, row_lo, nrows, r, a.rows, c, q, lse, a.scale_log2, part);
  } else {
    AttendRows<D, VEC, GPT>(src, row_lo, nrows, r, a.rows, c, q, a.scale_log2, st);
  }
}

// Tiles 0 .. n_tiles - 1 of a CTA's range through a ring of `stages`
// shared-memory buffers of stage_bytes each: load(i, buffer) issues tile i's
// cp.async copies; body(i, buffer) runs once tile i has landed for every
// thread, and a barrier follows it (its buffer is refilled next). Tiles
// 0 .. stages - 2 are in flight before the first body; iteration i issues
// tile i + stages - 1 into the buffer tile i - 1 used. One commit group per
// tile (empty past the end), so "tile i has landed" is "at most stages - 1
// groups pending".
template <class Load, class Body>
__device__ __forceinline__ void ForEachStagedTile(uint8_t* smem, int64_t stage_bytes, int stages, int n_tiles,
                                                  const Load& load, const Body& body) {
  for (int k = 0; k + 1 < stages; ++k) {
    if (k < n_tiles) load(k, smem + k * stage_bytes);
    CpAsyncCommit();
  }
  for (int i = 0; i < n_tiles; ++i) {
    const int ahead = i + stages - 1;
    if (ahead < n_tiles) load(ahead, smem + (ahead % stages) * stage_bytes);
    CpAsyncCommit();
    CpAsyncWaitPending(stages - 1);  // this thread's copies of tile i are done
    __syncthreads();                 // ... and everyone's
    body(i, static_cast<const uint8_t*>(smem + (i % stages) * stage_bytes));
    __syncthreads();  // the buffer (and whatever else the body shared) may be overwritten next
  }
}

// One query row's output from `parts` partial online-softmax states
// (log-sum-exp merge): part k's max and sum at red_ml[index(k) * 2 + {0, 1}]
// and its normalised-by-nothing accumulator at red_acc[index(k) * D + d];
// writes channel d (and, for d == 0, the log2-sum-exp) to o / lse, or to the
// split's tmp_o / tmp_lse when the stream is split.
template <int D, class Index>
__device__ __forceinline__ void StoreMergedRow(const DecodeArgs& a, const float* red_acc, const float* red_ml,
                                               int parts, const Index& index, int64_t row, int split, int d) {
  float M = -INFINITY;
  for (int k = 0; k < parts; ++k) M = fmaxf(M, red_ml[index(k) * 2]);
  float L = 0.0f, O = 0.0f;
  if (M != -INFINITY) {
    for (int k = 0; k < parts; ++k) {
      const int g = index(k);
      const float m = red_ml[g * 2];
      if (m == -INFINITY) continue;
      const float w = exp2f(m - M);
      L = fmaf(red_ml[g * 2 + 1], w, L);
      O = fmaf(red_acc[g * D + d], w, O);
    }
  }
  const float out = L > 0.0f ? O / L : 0.0f;
  const float lse_out = L > 0.0f ? M + log2f(L) : -INFINITY;
  if (a.max_splits == 1) {
    a.o[row * D + d] = out;
    if (d == 0) a.lse[row] = lse_out;
  } else {
    a.tmp_o[(row * a.max_splits + split) * D + d] = out;
    if (d == 0) a.tmp_lse[row * a.max_splits + split] = lse_out;
  }
}

// The first row of a tile starting at slot tok0 (nrows rows) that the query sees.
__device__ __forceinline__ int RowLo(int64_t first, int64_t tok0, int nrows) {
  return static_cast<int>(min(static_cast<int64_t>(nrows), max(static_cast<int64_t>(0), first - tok0)));
}

template <typename T, int D, int GPT, int ENC = kEncKivi>
__global__ void __launch_bounds__(kMaxThreads, 1) PagedDecodeKernel(const __grid_constant__ DecodeArgs a) {
  constexpr int VEC = Storage<T>::kVec;
  constexpr int TPR = D / VEC;
  uint8_t* smem = DynamicSmem();

  const int tid = threadIdx.x;
  const int c = tid % TPR;
  const int slice_threads = a.rows * TPR;
  const int hs = tid / slice_threads;
  const int r = (tid % slice_threads) / TPR;
  const int s = blockIdx.x / a.max_splits;
  const int split = blockIdx.x % a.max_splits;
  const int seq = s / a.num_kv_heads, kvh = s % a.num_kv_heads;
  const int64_t qrow0 = static_cast<int64_t>(seq) * a.num_qo_heads + kvh * a.group + hs * GPT;

  // The stream's segments: encoded slots [0, n_enc), plain [n_enc, len).
  const int32_t pb0 = a.indptr[s];
  const int32_t nb = a.indptr[s + 1] - pb0;
  const int64_t n_plain = nb == 0 ? 0 : static_cast<int64_t>(nb - 1) * a.block_size + a.last_block_len[s];
  int32_t eb0 = 0;
  int64_t n_enc = 0;
  if (a.enc_base != nullptr) {
    eb0 = a.enc_indptr[s];
    n_enc = static_cast<int64_t>(a.enc_indptr[s + 1] - eb0) * a.enc_tpb;
  }
  const int64_t len = n_enc + n_plain;
  const int64_t start = static_cast<int64_t>(split) * a.chunk;
  // The last split takes everything left, so a stale plan loses no tokens.
  const int64_t end = split == a.max_splits - 1 ? len : min(len, start + a.chunk);
  const int64_t first = a.first_visible != nullptr ? a.first_visible[s] : 0;

  // Empty split (or empty stream, or a split wholly before the window): mark it for the merge.
  if (start >= end || end <= first) {
    if (a.slot_pass || r != 0) return;
#pragma unroll
    for (int j = 0; j < GPT; ++j) {
      if (a.max_splits > 1) {
        if (c == 0) a.tmp_lse[(qrow0 + j) * a.max_splits + split] = -INFINITY;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) a.o[(qrow0 + j) * D + c * VEC + e] = 0.0f;
        if (c == 0) a.lse[qrow0 + j] = -INFINITY;
      }
    }
    return;
  }

  float q[GPT][VEC];
#pragma unroll
  for (int j = 0; j < GPT; ++j) {
    const float4* qp = reinterpret_cast<const float4*>(a.q + (qrow0 + j) * D + c * VEC);
#pragma unroll
    for (int v = 0; v < VEC / 4; ++v) {
      const float4 x = qp[v];
      q[j][4 * v] = x.x;
      q[j][4 * v + 1] = x.y;
      q[j][4 * v + 2] = x.z;
      q[j][4 * v + 3] = x.w;
    }
  }
  float lse[GPT];
#pragma unroll
  for (int j = 0; j < GPT; ++j) lse[j] = a.slot_pass ? a.lse[qrow0 + j] : 0.0f;

  // Tiles: encoded blocks of [start, min(end, n_enc)) (start is a multiple of
  // enc_tpb: chunk is), enc_tile_blocks at a time, then plain tiles of a.tile
  // tokens.
  const int64_t enc_end = min(end, n_enc);
  const int n_enc_blocks = start < enc_end ? static_cast<int>((enc_end - start) / a.enc_tpb) : 0;
  const int n_enc_tiles = (n_enc_blocks + a.enc_tile_blocks - 1) / a.enc_tile_blocks;
  const int64_t plain_start = max(start, n_enc);
  const int64_t plain_rows = end > plain_start ? end - plain_start : 0;
  const int n_tiles = n_enc_tiles + static_cast<int>((plain_rows + a.tile - 1) / a.tile);
  const int kinds = a.slot_pass ? 1 : 2;  // the slot pass needs keys only

  const TileLoader<T, D> loader{&a, tid, n_enc_tiles, n_enc_blocks, start, plain_start, end, n_enc, pb0, eb0, kinds};
  SoftmaxState<GPT, VEC> st;
#pragma unroll
  for (int j = 0; j < GPT; ++j) {
    st.m[j] = -INFINITY;
    st.l[j] = 0.0f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) st.acc[j][e] = 0.0f;
  }
  float* part = reinterpret_cast<float*>(smem + a.stages * a.stage_bytes);

  auto load = [&](int i, uint8_t* stage) { loader.Load(i, stage); };
  ForEachStagedTile(smem, a.stage_bytes, a.stages, n_tiles, load, [&](int i, const uint8_t* stage) {
    int64_t tok0;  // logical slot of the tile's row 0
    int nrows;
    float* hs_part = part + hs * a.part_stride;
    if (i < n_enc_tiles) {
      const int j0 = i * a.enc_tile_blocks;
      tok0 = start + static_cast<int64_t>(j0) * a.enc_tpb;
      nrows = min(a.enc_tile_blocks, n_enc_blocks - j0) * a.enc_tpb;
      const int lo = RowLo(first, tok0, nrows);
      if constexpr (ENC == kEncKivi) {
        if (a.enc_bits == 2) {
          KiviRows<D, VEC, 2> src;
          src.Init(stage, a);
          TileRows<D, VEC, GPT>(src, lo, nrows, a, r, c, q, lse, hs_part, st);
        } else {
          KiviRows<D, VEC, 4> src;
          src.Init(stage, a);
          TileRows<D, VEC, GPT>(src, lo, nrows, a, r, c, q, lse, hs_part, st);
        }
      } else {
        if (a.enc_kind == static_cast<int>(EncodingKind::kFp8)) {
          Quant8Rows<D, VEC, true> src;
          src.Init(stage, a);
          TileRows<D, VEC, GPT>(src, lo, nrows, a, r, c, q, lse, hs_part, st);
        } else {
          Quant8Rows<D, VEC, false> src;
          src.Init(stage, a);
          TileRows<D, VEC, GPT>(src, lo, nrows, a, r, c, q, lse, hs_part, st);
        }
      }
    } else {
      tok0 = plain_start + static_cast<int64_t>(i - n_enc_tiles) * a.tile;
      nrows = static_cast<int>(min(static_cast<int64_t>(a.tile), end - tok0));
      const int lo = RowLo(first, tok0, nrows);
      PlainRows<T, D> src{stage, stage + static_cast<int64_t>(a.tile) * D * sizeof(T)};
      TileRows<D, VEC, GPT>(src, lo, nrows, a, r, c, q, lse, hs_part, st);
    }
    if (a.slot_pass) {
      __syncthreads();  // partials of every head slice are in
      float* out = a.slot_attn + a.slot_offsets[s] + tok0;
      for (int row = tid; row < nrows; row += blockDim.x) {
        float sum = 0.0f;
        for (int h = 0; h < a.head_slices; ++h) sum += part[h * a.part_stride + row];
        out[row] += sum;  // this CTA is the only writer of these slots
      }
    }
  });
  if (a.slot_pass) return;

  // Merge the row groups of each head slice (log-sum-exp), through shared
  // memory that the stages no longer use.
  const int row_groups = blockDim.x / TPR;
  const int rg = tid / TPR;  // == hs * rows + r
  float* red_acc = reinterpret_cast<float*>(smem);            // [row_groups][GPT][D]
  float* red_ml = red_acc + static_cast<int64_t>(row_groups) * GPT * D;  // [row_groups][GPT][2]
#pragma unroll
  for (int j = 0; j < GPT; ++j) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) red_acc[(rg * GPT + j) * D + c * VEC + e] = st.acc[j][e];
    if (c == 0) {
      red_ml[(rg * GPT + j) * 2] = st.m[j];
      red_ml[(rg * GPT + j) * 2 + 1] = st.l[j];
    }
  }
  __syncthreads();
  for (int x = tid % slice_threads; x < GPT * D; x += slice_threads) {
    const int j = x / D;
    StoreMergedRow<D>(a, red_acc, red_ml, a.rows, [&](int rr) { return (hs * a.rows + rr) * GPT + j; }, qrow0 + j,
                      split, x % D);
  }
}

using DecodeKernelFn = void (*)(DecodeArgs);

template <typename T, int D, int ENC>
DecodeKernelFn SelectByHeads(int gpt) {
  switch (gpt) {
    case 1: return PagedDecodeKernel<T, D, 1, ENC>;
    case 2: return PagedDecodeKernel<T, D, 2, ENC>;
    case 4: return PagedDecodeKernel<T, D, 4, ENC>;
  }
  return nullptr;
}

template <typename T, int ENC = kEncKivi>
DecodeKernelFn SelectByDim(int d, int gpt) {
  switch (d) {
    case 64: return SelectByHeads<T, 64, ENC>(gpt);
    case 128: return SelectByHeads<T, 128, ENC>(gpt);
  }
  return nullptr;
}

// One per storage dtype and encoded family, each in its own translation unit
// (paged_decode_{f32,f16,bf16}.cu: none / KIVI; paged_decode_q8_*.cu: int8 /
// fp8); nullptr when the head_dim / heads_per_thread pair has no instantiation.
DecodeKernelFn SelectDecodeKernelF32(int head_dim, int heads_per_thread);
DecodeKernelFn SelectDecodeKernelF16(int head_dim, int heads_per_thread);
DecodeKernelFn SelectDecodeKernelBF16(int head_dim, int heads_per_thread);
DecodeKernelFn SelectDecodeKernelQ8F32(int head_dim, int heads_per_thread);
DecodeKernelFn SelectDecodeKernelQ8F16(int head_dim, int heads_per_thread);
DecodeKernelFn SelectDecodeKernelQ8BF16(int head_dim, int heads_per_thread);

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
