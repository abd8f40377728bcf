// Layout of the work (planned in attention_cpu_plan.h and run by
// attention_cpu_run.h, as for attention_cpu.cpp): a job is (stream, tile of
// query vectors, range of the stream's units), where the stream's units are
// its encoded blocks (G tokens each) followed by its plain blocks. The query
// vectors of a job are all heads of the stream's GQA group for a few
// consecutive queries, so every code a job unpacks serves every query head
// that reads it. Rows are processed kTile at a time with an online
// softmax; jobs that cover only part of a stream (split-K) leave (max, sum,
// acc) partials that a second step merges by log-sum-exp.
//
// Lane order: every fp32 row (queries, accumulators, unpacked codes, key
// scales) is kept in the lane order in which Storage<DT>::Load16 returns the
// plain segment's 16-element chunks (for bf16: even elements, then odd ones),
// so that encoded and plain blocks feed the same accumulators. Unpacking codes
// in that order costs nothing: each lane masks its own bits (CodeRows).
//
// Cost (AVX2, llama-3.1-8b decode, 4 query heads per KV head): per token and
// KV head, 64 FMAs for the scores and 64 for the values, as for bf16 rows,
// plus about 5 integer ops per 16 codes, the per-block fold (queries times key
// scales) and the per-tile value weights. The step is bound by that
// arithmetic, not by the 5x fewer bytes. Exact integer arithmetic would not
// reduce the op count (AVX2 has no accumulating integer dot product, VNNI,
// and int16 queries or weights already err beyond the tests' tolerance); the
// kivi policy's attention = "int8" (attention_kivi_int8.h, EncodedBlockInt8)
// rounds queries and value weights to 8 bits instead, for vpmaddubsw's 32
// multiply-adds per instruction, at a stated error (on the avx512 path with
// VNNI, vpdpbusd for the scores: 4 instructions per row and vector instead of 8).
// The avx512 copy runs the encoded blocks' score and value loops 16 lanes wide
// (attention_cpu_tiles.h's 16-lane loops, CodeRows::Load16Z): half the FMAs, 2-bit codes
// unpacked in a masked broadcast and an unsigned convert; its speed on each
// host kind is in docs/performance.md.
#include "kernels/attention_kivi_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/base/dtype.h"
#include "kernels/attention_cpu_plan.h"
#include "kernels/cpu_isa.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

// Compiled once per kernel path (kernels/cpu_isa.h); this copy's code is in
// kvlab::KVLAB_ISA_NS and kernels/cpu_dispatch.cpp calls it.
#include "kernels/cpu_isa_begin.h"

#include "kernels/attention_cpu_run.h"
#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"
#include "kernels/attention_kivi_int8.h"
#include "kernels/attention_kivi_rows.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace {

using namespace cpu_simd;   // NOLINT: the vector vocabulary of this file
using namespace cpu_tiles;  // NOLINT: the tile kernels shared with attention_cpu.cpp
using namespace cpu_run;    // NOLINT: running the plan, shared with attention_cpu.cpp
using namespace cpu_kivi_rows;  // NOLINT: CodeRows, LoadHalf16

constexpr int kTile = 32;              // rows per online-softmax step (one 32-token KIVI block)
constexpr int kMaxScoreVecs = 8;       // query vectors per score pass
constexpr int kMaxValueVecs = 4;       // query vectors per value pass
constexpr int kPrefetchBytes = 16384;  // how far ahead of use units are prefetched

// ---- shape and scratch (the plan: attention_cpu_plan.h) ----

struct Shape {
  int d, group, hkv;
  int bs;                         // plain block size
  int G;                          // tokens per encoded block (== KIVI group)
  int ng, lg_ng;                  // value groups per token: d / G = 2^lg_ng
  int zlen;                       // floats of a query vector's zero-point accumulator: max(8, ng)
  int64_t plain_row_bytes, code_row_bytes, code_bytes;
  bool int8;  // encoded blocks take the int8 path (attention_kivi_int8.h)
  bool vnni;  // ... with VNNI scores (the avx512 copy, on a CPU that has it)
};

// Per-thread buffers, kept between calls (grown, never shrunk).
struct Scratch : ScratchBase {
  std::vector<float> qe, qk, kconst, w, wsum, zacc, vsf, vzf;
  // int8 path (grown only when a call takes it): queries in channel order,
  // their int8 form and scale, value accumulators in register order, rounded
  // value weights and their scales, the score tile's int32 partial sums.
  std::vector<float> qn, sigma, accr, half_omega;
  std::vector<int8_t> q8;
  std::vector<uint8_t> wv;
  std::vector<int32_t> iraw;
  void Reserve(int max_vecs, int d, int ng, int zlen, bool int8) {
    ScratchBase::Reserve(max_vecs, d, kTile, kMaxScoreVecs);
    const size_t nv = static_cast<size_t>(max_vecs);
    Grow(&qe, nv * d);
    Grow(&qk, nv * d);
    Grow(&wsum, nv * ng);
    Grow(&kconst, nv);
    Grow(&w, nv * kTile * ng);
    Grow(&zacc, nv * zlen);
    Grow(&vsf, static_cast<size_t>(kTile) * ng);
    Grow(&vzf, static_cast<size_t>(kTile) * ng);
    if (!int8) return;
    Grow(&qn, nv * d);
    Grow(&sigma, nv);
    Grow(&accr, nv * d);
    Grow(&half_omega, nv * kivi_int8::kGroups);
    Grow(&q8, nv * d);
    Grow(&wv, nv * kivi_int8::kRows * 4);
    Grow(&iraw, static_cast<size_t>(4 * 64));
  }
};

// PrepareQueries (attention_cpu_run.h), plus the queries in channel order
// (qn) for the int8 path.
template <DType DT>
int64_t PrepareTile(const AttentionParams& p, const Shape& sh, const CpuQueryTile& t, int64_t len, Scratch* sc) {
  const int64_t visible = PrepareQueries<DT>(p, sh.group, t, len, sc);
  const float scale = p.sm_scale * kLog2e;
  for (int n = 0; sh.int8 && n < t.q_count * sh.group; ++n) {
    const float* src = p.q + QoOffset(p, sh.group, t, n);
    float* qn = sc->qn.data() + static_cast<size_t>(n) * sh.d;
    for (int c = 0; c < sh.d; ++c) qn[c] = src[c] * scale;
  }
  return visible;
}

// p_n((f + lane) / ng) for the 8 flattened (row, value group) indices f .. f + 7;
// ng = 2^lg_ng.
class WeightExpander {
 public:
  explicit WeightExpander(int lg_ng) : lg_(lg_ng) {
#ifdef KVLAB_ATTN_AVX2
    idx_ = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(std::min(lg_ng, 3)));
#endif
  }
  KVLAB_ALWAYS_INLINE F8 operator()(const float* p_n, int f) const {
    if (lg_ >= 3) return Set1(p_n[f >> lg_]);
#ifdef KVLAB_ATTN_AVX2
    return _mm256_permutevar8x32_ps(Load(p_n + (f >> lg_)), idx_);
#else
    F8 r;
    for (int i = 0; i < 8; ++i) r.x[i] = p_n[(f + i) >> lg_];
    return r;
#endif
  }

 private:
  int lg_;
#ifdef KVLAB_ATTN_AVX2
  __m256i idx_;
#endif
};

// For the tile's rows [t0, t0 + rows) of an encoded block (rows: a multiple of
// 16): w_n(r, g) = p_n(r) * sv(t0 + r, g), and the zero-point term zacc_n +=
// p_n(r) (zv + mid * sv)(t0 + r, g), kept lane-wise with lane = (r * ng + g) %
// zlen; wsum_n(g) = sum_r w_n(r, g).
void ValueWeights(const Shape& sh, int nq, float mid, const uint16_t* vs, const uint16_t* vz, int t0, int rows,
                  Scratch* sc) {
  const int ng = sh.ng, nf = rows * ng;
  const uint16_t* vst = vs + static_cast<int64_t>(t0) * ng;
  const uint16_t* vzt = vz + static_cast<int64_t>(t0) * ng;
  float* const vsf = sc->vsf.data();
  float* const vzf = sc->vzf.data();
  const F8 midv = Set1(mid);
  for (int f = 0; f < nf; f += 8) {
    const F8 sv = LoadHalf8(vst + f);
    Store(vsf + f, sv);
    Store(vzf + f, Fma(midv, sv, LoadHalf8(vzt + f)));
  }
  const WeightExpander expand(sh.lg_ng);
  const int zv = sh.zlen / 8;
  for (int n = 0; n < nq; ++n) {
    const float* p_n = sc->s.data() + n * kTile;
    float* w_n = sc->w.data() + static_cast<size_t>(n) * kTile * ng;
    float* z_n = sc->zacc.data() + static_cast<size_t>(n) * sh.zlen;
    float* ws_n = sc->wsum.data() + static_cast<size_t>(n) * ng;
    if (zv == 1) {  // in registers: no store-to-load chain through z_n
      F8 z = Load(z_n), ws = Zero();
      for (int f = 0; f < nf; f += 8) {
        const F8 pe = expand(p_n, f);
        const F8 w = Mul(pe, Load(vsf + f));
        Store(w_n + f, w);
        ws = Add(ws, w);
        z = Fma(pe, Load(vzf + f), z);
      }
      Store(z_n, z);
      float lanes[8];
      Store(lanes, ws);
      for (int g = 0; g < ng; ++g) {
        float t = 0.0f;
        for (int lane = g; lane < 8; lane += ng) t += lanes[lane];
        ws_n[g] = t;
      }
    } else {  // ng >= 16: vector f covers groups f % ng .. f % ng + 7 of one row
      std::fill(ws_n, ws_n + ng, 0.0f);
      for (int f = 0; f < nf; f += 8) {
        const F8 pe = expand(p_n, f);
        const F8 w = Mul(pe, Load(vsf + f));
        Store(w_n + f, w);
        float* ws = ws_n + (f & (ng - 1));
        Store(ws, Add(Load(ws), w));
        float* z = z_n + (f & (ng - 1));
        Store(z, Fma(pe, Load(vzf + f), Load(z)));
      }
    }
  }
}

// qk_n = qe_n * ks and kconst_n = q_n . kz for the NF query vectors n0 ..
// n0 + NF - 1 of an encoded block. NF is fixed so that the NF zero-point sums
// stay in registers (a runtime count left them in a stack array, one
// store-to-load round trip per step of each sum).
constexpr int kFoldVecs = 4;
template <DType DT, int NF>
void FoldKeyParams(int d, const uint16_t* ks, const uint16_t* kz, int n0, Scratch* sc) {
  const float* q = sc->q.data() + static_cast<size_t>(n0) * d;
  const float* qe = sc->qe.data() + static_cast<size_t>(n0) * d;
  float* qk = sc->qk.data() + static_cast<size_t>(n0) * d;
  F8 z[NF][2];
  for (auto& zn : z) zn[0] = zn[1] = Zero();
  for (int c = 0; c < d; c += 16) {
    F8 slo, shi, zlo, zhi;
    LoadHalf16<DT>(ks + c, &slo, &shi);
    LoadHalf16<DT>(kz + c, &zlo, &zhi);
    for (int n = 0; n < NF; ++n) {
      const size_t o = static_cast<size_t>(n) * d + c;
      Store(qk + o, Mul(Load(qe + o), slo));
      Store(qk + o + 8, Mul(Load(qe + o + 8), shi));
      z[n][0] = Fma(Load(q + o), zlo, z[n][0]);
      z[n][1] = Fma(Load(q + o + 8), zhi, z[n][1]);
    }
  }
  for (int n = 0; n < NF; ++n) sc->kconst[n0 + n] = HSum(Add(z[n][0], z[n][1]));
}

// Evicted slots of a sealed group (EncodedKV::dead; `dead` is the block's
// first row's flag, null when none): their scores become -inf, so the online
// softmax gives them weight 0.
inline void MaskDeadRows(const uint8_t* dead, int nq, int nrows, float* s) {
  if (dead == nullptr) return;
  for (int r = 0; r < nrows; ++r) {
    if (dead[r] == 0) continue;
    for (int n = 0; n < nq; ++n) s[n * kTile + r] = kNegInf;
  }
}

// One encoded block: slots [slot0, slot0 + G) of the stream.
template <int BITS, DType DT>
void EncodedBlock(const Shape& sh, int nq, const uint8_t* blk, int64_t slot0, int64_t visible, const float* lane_scale,
                  const uint8_t* dead, Scratch* sc, PrefetchStream* pf) {
  using L = CodeRows<BITS, DT>;
  const int d = sh.d;
  const uint8_t* kc = blk;
  const uint8_t* vc = blk + sh.code_bytes;
  const uint16_t* ks = reinterpret_cast<const uint16_t*>(blk + 2 * sh.code_bytes);
  const uint16_t* kz = ks + d;
  const uint16_t* vs = kz + d;
  const uint16_t* vz = vs + d;  // G * (d / G) = d value parameters of each kind
  // Fold the per-channel key scales into the queries (qe: already divided by
  // the lanes' 2^Exp) and the zeros into one constant per query vector:
  // score = (q * s) . code + q . z.
  for (int n0 = 0; n0 < nq; n0 += kFoldVecs) {
    switch (std::min(kFoldVecs, nq - n0)) {
      case 1: FoldKeyParams<DT, 1>(d, ks, kz, n0, sc); break;
      case 2: FoldKeyParams<DT, 2>(d, ks, kz, n0, sc); break;
      case 3: FoldKeyParams<DT, 3>(d, ks, kz, n0, sc); break;
      default: FoldKeyParams<DT, 4>(d, ks, kz, n0, sc); break;
    }
  }
  const int rows = static_cast<int>(std::min<int64_t>(sh.G, visible - slot0));
  const int wstride = kTile * sh.ng;
  for (int t0 = 0; t0 < rows; t0 += kTile) {
    const int nrows = std::min(kTile, rows - t0);
    const uint8_t* kp = kc + t0 * sh.code_row_bytes;
    for (int n0 = 0; n0 < nq; n0 += kMaxScoreVecs) {
      ScoreTileAny<kTile, L>(
          std::min(kMaxScoreVecs, nq - n0), sc->qk.data() + static_cast<size_t>(n0) * d, d, kp, sh.code_row_bytes,
          nrows, sc->s.data() + n0 * kTile, sc->raw.data(), pf);
    }
    for (int n = 0; n < nq; ++n) {
      float* s_n = sc->s.data() + n * kTile;
      const F8 kv = Set1(sc->kconst[n]);
      for (int r = 0; r < nrows; r += 8) Store(s_n + r, Add(Load(s_n + r), kv));
    }
    MaskDeadRows(dead == nullptr ? nullptr : dead + t0, nq, nrows, sc->s.data());
    SoftmaxTile<kTile>(nq, nrows, slot0 + t0, sc->limit.data(), d, sc->s.data(), sc->m.data(), sc->l.data(),
                       sc->acc.data(), sc->zacc.data(), sh.zlen, sc->first.data());
    ValueWeights(sh, nq, L::kMid, vs, vz, t0, std::min(kTile, sh.G - t0), sc);
    const uint8_t* vp = vc + t0 * sh.code_row_bytes;
    for (int n0 = 0; n0 < nq; n0 += kMaxValueVecs) {
      const ValueEpilogue ep{lane_scale, sc->wsum.data() + static_cast<size_t>(n0) * sh.ng, L::kMid};
      AccumulateTileAny<L, true>(
          std::min(kMaxValueVecs, nq - n0), sc->w.data() + static_cast<size_t>(n0) * wstride, wstride, sh.ng, sh.G,
          vp, sh.code_row_bytes, nrows, d, sc->acc.data() + static_cast<size_t>(n0) * d, ep, pf);
    }
  }
}

// One encoded block on the int8 path (attention_kivi_int8.h): scores, online
// softmax and value sums into the register-order accumulators accr.
void EncodedBlockInt8(const Shape& sh, int nq, const uint8_t* blk, int64_t slot0, int64_t visible,
                      const uint8_t* dead, Scratch* sc, PrefetchStream* pf) {
  namespace k8 = kivi_int8;
  const int d = sh.d;  // == k8::kDim
  const uint16_t* ks = reinterpret_cast<const uint16_t*>(blk + 2 * sh.code_bytes);
  const uint16_t* vs = ks + 2 * d;
  k8::BlockScores(sh.vnni, blk, ks, ks + d, nq, sc->qn.data(), sc->q8.data(), sc->sigma.data(), sc->kconst.data(),
                  sc->iraw.data(), sc->s.data(), pf);
  const int nrows = static_cast<int>(std::min<int64_t>(sh.G, visible - slot0));
  MaskDeadRows(dead, nq, nrows, sc->s.data());
  SoftmaxTile<kTile>(nq, nrows, slot0, sc->limit.data(), d, sc->s.data(), sc->m.data(), sc->l.data(), sc->accr.data(),
                     sc->zacc.data(), sh.zlen, sc->first.data());
  k8::BlockValues(blk + sh.code_bytes, vs, vs + d, nq, sc->s.data(), sc->vsf.data(), sc->vzf.data(), sc->wv.data(),
                  sc->half_omega.data(), sc->zacc.data(), sh.zlen, sc->accr.data(), pf);
}

// The int8 path's value accumulators (register order) into acc (lane order).
template <DType DT>
void RegisterToLaneOrder(const Shape& sh, int nq, Scratch* sc) {
  for (int n = 0; n < nq; ++n) {
    const float* src = sc->accr.data() + static_cast<size_t>(n) * sh.d;
    float* dst = sc->acc.data() + static_cast<size_t>(n) * sh.d;
    for (int c = 0; c < sh.d; c += 16) {
      for (int i = 0; i < 16; ++i) dst[c + i] = src[kivi_int8::RegIndex(c + Storage<DT>::StoredIndex(i))];
    }
  }
}

// One plain block: slots [slot0, slot0 + rows) of the stream.
template <DType DT>
void PlainBlock(const Shape& sh, int nq, const uint8_t* kb, int64_t slot0, int64_t visible, Scratch* sc,
                PrefetchStream* pf) {
  using L = PlainRows<DT>;
  const int d = sh.d;
  const int rows = static_cast<int>(std::min<int64_t>(sh.bs, visible - slot0));
  for (int t0 = 0; t0 < rows; t0 += kTile) {
    const int nrows = std::min(kTile, rows - t0);
    const uint8_t* kp = kb + t0 * sh.plain_row_bytes;
    const uint8_t* vp = kb + (sh.bs + t0) * sh.plain_row_bytes;
    for (int n0 = 0; n0 < nq; n0 += kMaxScoreVecs) {
      ScoreTileAny<kTile, L>(std::min(kMaxScoreVecs, nq - n0), sc->q.data() + static_cast<size_t>(n0) * d, d, kp,
                             sh.plain_row_bytes, nrows, sc->s.data() + n0 * kTile, sc->raw.data(), pf);
    }
    SoftmaxTile<kTile>(nq, nrows, slot0 + t0, sc->limit.data(), d, sc->s.data(), sc->m.data(), sc->l.data(),
                       sc->acc.data(), sc->zacc.data(), sh.zlen, sc->first.data());
    for (int n0 = 0; n0 < nq; n0 += kMaxValueVecs) {
      AccumulateTileAny<L, false>(std::min(kMaxValueVecs, nq - n0), sc->s.data() + n0 * kTile, kTile, 1, d, vp,
                                  sh.plain_row_bytes, nrows, d, sc->acc.data() + static_cast<size_t>(n0) * d,
                                  ValueEpilogue{}, pf);
    }
  }
}

// Runs part `part` of a planned tile over its units, leaving unnormalised
// (m, l, acc) in `sc`, the zero-point terms already added to acc.
template <int BITS, DType DT>
void RunJob(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const Shape& sh,
            const CpuDecodePlan::Tile& tile, int part, Scratch* sc) {
  const CpuQueryTile& t = tile.q;
  const int nq = t.q_count * sh.group;
  const int d = sh.d;
  const int stream = t.seq * sh.hkv + t.kv_head;
  const int64_t n_enc = enc.StreamTokens(stream);
  const int n_eb = static_cast<int>(n_enc / sh.G);
  const uint8_t* dead_flags = enc.DeadFlags(stream);
  const int64_t visible = PrepareTile<DT>(p, sh, t, n_enc + kv.StreamLength(stream), sc);
  int u_begin, u_end;
  PartUnits(UnitGrid{sh.G, sh.bs, n_enc}, FirstVisible(p, t, t.q_begin), visible, part, tile.num_parts, &u_begin,
            &u_end);
  float lane_scale[16];
  for (int i = 0; i < 16; ++i) lane_scale[i] = CodeRows<BITS, DT>::LaneScale(i);
  if (u_begin < n_eb && !sh.int8) {  // the exact path's folded-query input
    for (size_t i = 0; i < static_cast<size_t>(nq) * d; ++i) sc->qe[i] = sc->q[i] * lane_scale[i % 16];
  }
  std::fill(sc->m.begin(), sc->m.begin() + nq, kNegInf);
  std::fill(sc->l.begin(), sc->l.begin() + nq, 0.0f);
  std::fill(sc->acc.begin(), sc->acc.begin() + static_cast<size_t>(nq) * d, 0.0f);
  std::fill(sc->zacc.begin(), sc->zacc.begin() + static_cast<size_t>(nq) * sh.zlen, 0.0f);
  // The int8 path sums encoded blocks into accr, in register order, and hands
  // them to acc before the first plain block (or at the end).
  bool in_accr = sh.int8 && u_begin < n_eb;
  if (in_accr) std::fill(sc->accr.begin(), sc->accr.begin() + static_cast<size_t>(nq) * d, 0.0f);
  const int64_t plain_bytes = kv.block_bytes;
  auto unit_base = [&](int u) -> const uint8_t* {
    if (u < n_eb) return enc.Block(stream, u);
    return kv.base + static_cast<int64_t>(kv.indices[kv.indptr[stream] + (u - n_eb)]) * plain_bytes;
  };
  auto unit_bytes = [&](int u) { return u < n_eb ? enc.block_bytes : plain_bytes; };
  const int ahead = std::max<int>(1, static_cast<int>(kPrefetchBytes / unit_bytes(u_begin)));
  PrefetchStream pf;
  for (int u = u_begin + 1; u < std::min(u_end, u_begin + ahead); ++u) pf.NextBlock(unit_base(u), unit_bytes(u));
  for (int u = u_begin; u < u_end; ++u) {
    const int next = u + ahead;
    pf.NextBlock(next < u_end ? unit_base(next) : nullptr, next < u_end ? unit_bytes(next) : 0);
    const uint8_t* dead = u < n_eb && dead_flags != nullptr ? dead_flags + static_cast<int64_t>(u) * sh.G : nullptr;
    if (u < n_eb && sh.int8) {
      EncodedBlockInt8(sh, nq, unit_base(u), static_cast<int64_t>(u) * sh.G, visible, dead, sc, &pf);
    } else if (u < n_eb) {
      EncodedBlock<BITS, DT>(sh, nq, unit_base(u), static_cast<int64_t>(u) * sh.G, visible, lane_scale, dead, sc, &pf);
    } else {
      if (in_accr) {
        RegisterToLaneOrder<DT>(sh, nq, sc);
        in_accr = false;
      }
      PlainBlock<DT>(sh, nq, unit_base(u), n_enc + static_cast<int64_t>(u - n_eb) * sh.bs, visible, sc, &pf);
    }
  }
  if (in_accr) RegisterToLaneOrder<DT>(sh, nq, sc);
  if (u_begin >= n_eb) return;  // no encoded block, no zero-point terms
  // acc += sum_t p_t zv(t, g) on the channels of value group g.
  for (int n = 0; n < nq; ++n) {
    const float* z = sc->zacc.data() + static_cast<size_t>(n) * sh.zlen;
    float* acc = sc->acc.data() + static_cast<size_t>(n) * d;
    for (int c = 0; c < d; c += 16) {
      const int g = c / sh.G;
      float b = 0.0f;
      if (sh.ng >= 8) {
        b = z[g];
      } else {
        for (int lane = g; lane < 8; lane += sh.ng) b += z[lane];
      }
      const F8 bv = Set1(b);
      Store(acc + c, Add(Load(acc + c), bv));
      Store(acc + c + 8, Add(Load(acc + c + 8), bv));
    }
  }
}

template <int BITS, DType DT>
void Run(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const CpuDecodePlan& plan) {
  Shape sh;
  sh.d = p.head_dim;
  sh.group = plan.group;
  sh.hkv = p.num_kv_heads;
  sh.bs = kv.block_size;
  sh.G = enc.enc.tokens_per_block;
  sh.ng = sh.d / sh.G;
  sh.lg_ng = 0;
  while ((1 << sh.lg_ng) < sh.ng) ++sh.lg_ng;
  sh.zlen = std::max(8, sh.ng);
  sh.plain_row_bytes = static_cast<int64_t>(sh.d) * DTypeBytes(DT);
  sh.code_row_bytes = static_cast<int64_t>(sh.d) * BITS / 8;
  sh.code_bytes = enc.enc.CodeBytes();
  static_assert(kivi_int8::kDim == 128 && kivi_int8::kRows == 32, "KvEncoding::Int8AttentionShape names this shape");
  sh.int8 = kivi_int8::kAvailable && p.int8_attention && enc.enc.Int8AttentionShape();
  sh.vnni = KVLAB_ISA_VECTOR >= 2 && sh.int8 && ActiveCpuVnni();
  const int max_vecs = plan.q_tile * plan.group;
  RunPlan<DT, Scratch>(
      plan, p, nullptr, [&](Scratch* sc) { sc->Reserve(max_vecs, sh.d, sh.ng, sh.zlen, sh.int8); },
      [&](const CpuDecodePlan::Tile& tile, int part, Scratch* sc) { RunJob<BITS, DT>(kv, enc, p, sh, tile, part, sc); },
      [](const CpuDecodePlan::SlotJob&, Scratch*) {});  // KiviCpuSupports excludes slot_attn
}

template <int BITS>
void RunBits(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const CpuDecodePlan& plan) {
  switch (kv.dtype) {
    case DType::kF32: return Run<BITS, DType::kF32>(kv, enc, p, plan);
    case DType::kF16: return Run<BITS, DType::kF16>(kv, enc, p, plan);
    case DType::kBF16: return Run<BITS, DType::kBF16>(kv, enc, p, plan);
  }
}

}  // namespace

void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                           const CpuDecodePlan& plan) {
  if (enc.enc.bits == 2) {
    RunBits<2>(kv, enc, p, plan);
  } else {
    RunBits<4>(kv, enc, p, plan);
  }
}

void PagedAttentionKiviCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  static thread_local CpuDecodePlan plan;  // reused: no allocation per call once grown
  PlanCpuDecodeLayer(kv, &enc, p, &plan);
  KVLAB_ISA_NS::PagedAttentionKiviCpu(kv, enc, p, plan);  // qualified: ADL finds kvlab:: too
}

}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#include "kernels/cpu_isa_end.h"
