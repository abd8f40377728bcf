// Layout of the work (planned in attention_cpu_plan.h and run by
// attention_cpu_run.h, as for the plain and KIVI kernels): a job is (stream,
// tile of query vectors, range of the stream's units), where the units are
// the stream's encoded blocks (tokens_per_block slots each) followed by its
// plain blocks. The query vectors of a job are all heads of the stream's GQA
// group for a few consecutive queries, so each code row a job converts serves
// every query head that reads it. Rows go kTile at a time through the plain
// kernel's score, online-softmax and value-sum tiles, with a row loader
// (CodeRows8) that turns 16 codes into two 8-lane fp32 vectors in the lane
// order of the plain tail's rows, so both segments feed one set of
// accumulators.
//
// Cost per token and KV head (llama-3.1-8b decode, 4 query heads per KV
// head): 64 FMAs for the scores and 64 for the values, as for bf16 rows, plus
// the conversion of 2 x 128 codes: int8 2-3 integer ops and 2 conversions per
// 16 codes, fp8 3-5 integer ops and 2 fp16 conversions (bf16 rows take 2
// ops per 16), and one multiply per tile row and query vector for each scale.
#include "kernels/attention_quant_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/base/dtype.h"
#include "kernels/attention_cpu_plan.h"
#include "kernels/kv_encoding.h"
#include "kernels/paged_kv.h"

// Compiled once per kernel path (kernels/cpu_isa.h); this copy's code is in
// kvlab::KVLAB_ISA_NS and kernels/cpu_dispatch.cpp calls it.
#include "kernels/cpu_isa_begin.h"

#include "kernels/attention_cpu_run.h"
#include "kernels/attention_cpu_simd.h"
#include "kernels/attention_cpu_tiles.h"

namespace kvlab {
namespace KVLAB_ISA_NS {
namespace {

using namespace cpu_simd;   // NOLINT: the vector vocabulary of this file
using namespace cpu_tiles;  // NOLINT: the tile kernels shared with attention_cpu.cpp
using namespace cpu_run;    // NOLINT: running the plan, shared with attention_cpu.cpp

constexpr int kTile = 16;              // rows per online-softmax step (one 16-token block)
constexpr int kMaxScoreVecs = 8;       // query vectors per score pass
constexpr int kMaxValueVecs = 4;       // query vectors per value pass
constexpr int kPrefetchBytes = 16384;  // how far ahead of use units are prefetched

// The fp16 bit pattern of an e4m3 code: sign to bit 15, exponent and mantissa
// to bits 13..7. Its value is the e4m3 value times 2^-8 exactly (the exponent
// biases differ by 8; e4m3 subnormals become fp16 subnormals). The scalar copy
// calls it; the vector copies do the same shifts in registers.
[[maybe_unused]] inline uint16_t Fp8AsHalf(uint8_t b) {
  return static_cast<uint16_t>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
}

// Rows of 8-bit codes: channels [c, c + 16) of a row as two F8 in the lane
// order of Storage<DT>::Load16, each lane the code's value divided by kFactor
// exactly (int8 as is, fp8 through Fp8AsHalf: 2^-8). The per-row scales are
// multiplied by kFactor.
template <EncodingKind KIND, DType DT>
struct CodeRows8 {
  static constexpr float kFactor = KIND == EncodingKind::kFp8 ? 256.0f : 1.0f;
  static constexpr bool kEvenOdd = Storage<DT>::StoredIndex(1) != 1;  // bf16 on the vector paths
  static constexpr int ScoreRows(int nq) { return nq >= 8 ? 1 : 8 / nq; }
  static constexpr int ScoreSplit(int) { return 1; }

  static KVLAB_ALWAYS_INLINE void Load16(const uint8_t* row, int c, F8* lo, F8* hi) {
    const uint8_t* p = row + c;
#ifdef KVLAB_ATTN_AVX2
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (KIND == EncodingKind::kInt8 && kEvenOdd) {
      // Words sign-extended to dwords: the even byte is the low one, the odd
      // byte the high one (already signed in the dword's upper bits).
      const __m256i w = _mm256_cvtepi16_epi32(x);
      *lo = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 24), 24));
      *hi = _mm256_cvtepi32_ps(_mm256_srai_epi32(w, 8));
    } else if constexpr (KIND == EncodingKind::kInt8) {
      *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
      *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)));
    } else if constexpr (kEvenOdd) {
      // Per word: the byte in bits 15..8, shifted right arithmetically by one
      // (sign in bits 15 and 14, exponent and mantissa in 13..7), bit 14 and
      // bits 6..0 cleared.
      const __m128i keep = _mm_set1_epi16(static_cast<int16_t>(0xBF80));
      *lo = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(_mm_slli_epi16(x, 8), 1), keep));
      *hi = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(x, 1), keep));
    } else {
      // Bytes sign-extended to words, shifted left by 7: sign in bits 15 and
      // 14, exponent and mantissa in 13..7; bit 14 cleared.
      const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7),
                                         _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
      *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
      *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    }
#else
    float f[16];
    for (int i = 0; i < 16; ++i) {
      const uint8_t b = p[Storage<DT>::StoredIndex(i)];
      f[i] = KIND == EncodingKind::kInt8 ? static_cast<float>(static_cast<int8_t>(b)) : F16ToF32(Fp8AsHalf(b));
    }
    *lo = Load(f);
    *hi = Load(f + 8);
#endif
  }

  static constexpr bool kWide = KVLAB_ISA_VECTOR >= 2;  // Load16Z below: the 16-lane tile loops
#if KVLAB_ISA_VECTOR >= 2
  // The 16 lanes of Load16 in one zmm (attention_cpu_tiles.h's 16-lane loops): the bytes
  // put in lane order first (even, then odd, for bf16), then int8 widened and
  // converted, fp8 widened to its fp16 pattern and converted (3-5 ops per 16).
  static KVLAB_ALWAYS_INLINE __m512 Load16Z(const uint8_t* row, int c) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
    if constexpr (kEvenOdd) x = _mm_shuffle_epi8(x, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    if constexpr (KIND == EncodingKind::kInt8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
    } else {
      const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7),
                                         _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
      return _mm512_cvtph_ps(h);
    }
  }
#endif
};

struct Shape {
  int d, group, hkv;
  int bs;  // plain block size
  int G;   // tokens per encoded block
  bool per_token;
  int64_t plain_row_bytes, code_bytes, key_params;
};

struct Scratch : ScratchBase {
  void Reserve(int max_vecs, int d) { ScratchBase::Reserve(max_vecs, d, kTile, kMaxScoreVecs); }
};

// rs[r] = the scale of row t0 + r of a block (per token, or the block's one)
// times `factor`, for r < nrows; 0 past them.
inline void RowScales(const Shape& sh, const uint16_t* scales, int t0, int nrows, float factor, float* rs) {
  if (!sh.per_token) {
    std::fill(rs, rs + kTile, F16ToF32(scales[0]) * factor);
    return;
  }
  if (nrows == kTile) {  // rows t0 .. t0 + 15 are all in the block
    const F8 f = Set1(factor);
    Store(rs, Mul(LoadHalf8(scales + t0), f));
    Store(rs + 8, Mul(LoadHalf8(scales + t0 + 8), f));
    return;
  }
  for (int r = 0; r < kTile; ++r) rs[r] = r < nrows ? F16ToF32(scales[t0 + r]) * factor : 0.0f;
}

// s[n * kTile + r] *= rs[r] for the nq query vectors.
inline void ScaleRows(int nq, const float* rs, float* s) {
  const F8 r0 = Load(rs), r1 = Load(rs + 8);
  for (int n = 0; n < nq; ++n) {
    float* s_n = s + n * kTile;
    Store(s_n, Mul(Load(s_n), r0));
    Store(s_n + 8, Mul(Load(s_n + 8), r1));
  }
}

// Evicted slots of a sealed block (EncodedKV::dead; `dead` is the tile's
// first row's flag, null when none): score -inf, so weight 0.
inline void MaskDeadRows(const uint8_t* dead, int nq, int nrows, float* s) {
  if (dead == nullptr) return;
  for (int r = 0; r < nrows; ++r) {
    if (dead[r] == 0) continue;
    for (int n = 0; n < nq; ++n) s[n * kTile + r] = kNegInf;
  }
}

// One encoded block: slots [slot0, slot0 + G) of the stream.
template <EncodingKind KIND, DType DT>
void EncodedBlock(const Shape& sh, int nq, const uint8_t* blk, int64_t slot0, int64_t visible, const uint8_t* dead,
                  Scratch* sc, PrefetchStream* pf) {
  using L = CodeRows8<KIND, DT>;
  const int d = sh.d;
  const uint8_t* kc = blk;
  const uint8_t* vc = blk + sh.code_bytes;
  const uint16_t* ks = reinterpret_cast<const uint16_t*>(blk + 2 * sh.code_bytes);
  const uint16_t* vs = ks + sh.key_params;
  const int rows = static_cast<int>(std::min<int64_t>(sh.G, visible - slot0));
  alignas(32) float rs[kTile];
  for (int t0 = 0; t0 < rows; t0 += kTile) {
    const int nrows = std::min(kTile, rows - t0);
    for (int n0 = 0; n0 < nq; n0 += kMaxScoreVecs) {
      ScoreTileAny<kTile, L>(
          std::min(kMaxScoreVecs, nq - n0), sc->q.data() + static_cast<size_t>(n0) * d, d,
          kc + static_cast<int64_t>(t0) * d, d, nrows, sc->s.data() + n0 * kTile, sc->raw.data(), pf);
    }
    RowScales(sh, ks, t0, nrows, L::kFactor, rs);
    ScaleRows(nq, rs, sc->s.data());
    MaskDeadRows(dead == nullptr ? nullptr : dead + t0, nq, nrows, sc->s.data());
    SoftmaxTile<kTile>(nq, nrows, slot0 + t0, sc->limit.data(), d, sc->s.data(), sc->m.data(), sc->l.data(),
                       sc->acc.data(), nullptr, 0, sc->first.data());
    // The weights stay in l unscaled; the value rows get p_t * s_v(t).
    RowScales(sh, vs, t0, nrows, L::kFactor, rs);
    ScaleRows(nq, rs, sc->s.data());
    for (int n0 = 0; n0 < nq; n0 += kMaxValueVecs) {
      AccumulateTileAny<L, false>(
          std::min(kMaxValueVecs, nq - n0), sc->s.data() + n0 * kTile, kTile, 1, d, vc + static_cast<int64_t>(t0) * d,
          d, nrows, d, sc->acc.data() + static_cast<size_t>(n0) * d, ValueEpilogue{}, pf);
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
                       sc->acc.data(), nullptr, 0, sc->first.data());
    for (int n0 = 0; n0 < nq; n0 += kMaxValueVecs) {
      AccumulateTileAny<L, false>(std::min(kMaxValueVecs, nq - n0), sc->s.data() + n0 * kTile, kTile, 1, d, vp,
                                  sh.plain_row_bytes, nrows, d, sc->acc.data() + static_cast<size_t>(n0) * d,
                                  ValueEpilogue{}, pf);
    }
  }
}

// Runs part `part` of a planned tile over its units, leaving unnormalised
// (m, l, acc) in `sc`.
template <EncodingKind KIND, DType DT>
void RunJob(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const Shape& sh,
            const CpuDecodePlan::Tile& tile, int part, Scratch* sc) {
  const CpuQueryTile& t = tile.q;
  const int nq = t.q_count * sh.group;
  const int stream = t.seq * sh.hkv + t.kv_head;
  const int64_t n_enc = enc.StreamTokens(stream);
  const int n_eb = static_cast<int>(n_enc / sh.G);
  const uint8_t* dead_flags = enc.DeadFlags(stream);
  const int64_t visible = PrepareQueries<DT>(p, sh.group, t, n_enc + kv.StreamLength(stream), sc);
  int u_begin, u_end;
  PartUnits(UnitGrid{sh.G, sh.bs, n_enc}, FirstVisible(p, t, t.q_begin), visible, part, tile.num_parts, &u_begin,
            &u_end);
  std::fill(sc->m.begin(), sc->m.begin() + nq, kNegInf);
  std::fill(sc->l.begin(), sc->l.begin() + nq, 0.0f);
  std::fill(sc->acc.begin(), sc->acc.begin() + static_cast<size_t>(nq) * sh.d, 0.0f);
  auto unit_base = [&](int u) -> const uint8_t* {
    if (u < n_eb) return enc.Block(stream, u);
    return kv.base + static_cast<int64_t>(kv.indices[kv.indptr[stream] + (u - n_eb)]) * kv.block_bytes;
  };
  auto unit_bytes = [&](int u) { return u < n_eb ? enc.block_bytes : kv.block_bytes; };
  const int ahead = std::max<int>(1, static_cast<int>(kPrefetchBytes / unit_bytes(u_begin)));
  PrefetchStream pf;
  for (int u = u_begin + 1; u < std::min(u_end, u_begin + ahead); ++u) pf.NextBlock(unit_base(u), unit_bytes(u));
  for (int u = u_begin; u < u_end; ++u) {
    const int next = u + ahead;
    pf.NextBlock(next < u_end ? unit_base(next) : nullptr, next < u_end ? unit_bytes(next) : 0);
    if (u < n_eb) {
      const int64_t slot0 = static_cast<int64_t>(u) * sh.G;
      const uint8_t* dead = dead_flags == nullptr ? nullptr : dead_flags + slot0;
      EncodedBlock<KIND, DT>(sh, nq, unit_base(u), slot0, visible, dead, sc, &pf);
    } else {
      PlainBlock<DT>(sh, nq, unit_base(u), n_enc + static_cast<int64_t>(u - n_eb) * sh.bs, visible, sc, &pf);
    }
  }
}

template <EncodingKind KIND, DType DT>
void Run(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const CpuDecodePlan& plan) {
  Shape sh;
  sh.d = p.head_dim;
  sh.group = plan.group;
  sh.hkv = p.num_kv_heads;
  sh.bs = kv.block_size;
  sh.G = enc.enc.tokens_per_block;
  sh.per_token = enc.enc.scale_per_token;
  sh.plain_row_bytes = static_cast<int64_t>(sh.d) * DTypeBytes(DT);
  sh.code_bytes = enc.enc.CodeBytes();
  sh.key_params = enc.enc.NumKeyParams();
  const int max_vecs = plan.q_tile * plan.group;
  RunPlan<DT, Scratch>(
      plan, p, nullptr, [&](Scratch* sc) { sc->Reserve(max_vecs, sh.d); },
      [&](const CpuDecodePlan::Tile& tile, int part, Scratch* sc) {
        RunJob<KIND, DT>(kv, enc, p, sh, tile, part, sc);
      },
      [](const CpuDecodePlan::SlotJob&, Scratch*) {});  // QuantCpuSupports excludes slot_attn
}

template <EncodingKind KIND>
void RunKind(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p, const CpuDecodePlan& plan) {
  switch (kv.dtype) {
    case DType::kF32: return Run<KIND, DType::kF32>(kv, enc, p, plan);
    case DType::kF16: return Run<KIND, DType::kF16>(kv, enc, p, plan);
    case DType::kBF16: return Run<KIND, DType::kBF16>(kv, enc, p, plan);
  }
}

}  // namespace

void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p,
                            const CpuDecodePlan& plan) {
  if (enc.enc.kind == EncodingKind::kInt8) {
    RunKind<EncodingKind::kInt8>(kv, enc, p, plan);
  } else {
    RunKind<EncodingKind::kFp8>(kv, enc, p, plan);
  }
}

void PagedAttentionQuantCpu(const PagedKV& kv, const EncodedKV& enc, const AttentionParams& p) {
  static thread_local CpuDecodePlan plan;  // reused: no allocation per call once grown
  PlanCpuDecodeLayer(kv, &enc, p, &plan);
  KVLAB_ISA_NS::PagedAttentionQuantCpu(kv, enc, p, plan);  // qualified: ADL finds kvlab:: too
}

}  // namespace KVLAB_ISA_NS
}  // namespace kvlab

#include "kernels/cpu_isa_end.h"
