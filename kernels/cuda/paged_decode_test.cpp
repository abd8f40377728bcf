// The CUDA paged decode against the CPU specification: PagedDecode (plain,
// KIVI-, int8- and fp8-encoded segments, splits, slot_attn) against PagedAttentionReference,
// or PagedAttentionEncodedReference when the streams have an encoded segment;
// and the planner and the argument checks, which run anywhere. Device tests skip when no GPU is present.
// The same file runs on the CPU emulation of CUDA (paged_decode_emu_test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_encoded.h"
#include "kernels/attention_reference.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/paged_decode.h"
#include "kernels/kv_encoding.h"

namespace kvlab {
namespace cuda_test {
namespace {

// ---------------------------------------------------------------------------
// PagedDecode against the reference.

struct DecodeCase {
  std::string name;
  DType dtype = DType::kBF16;
  int block_size = 16, hq = 8, hkv = 2, d = 128;
  std::vector<int> lens;        // plain slots of each sequence's streams
  int head_jitter = 0;          // stream (i, h) holds lens[i] - (h % 3) * head_jitter plain slots
  int kivi_bits = 0;            // 0: no KIVI segment
  int kivi_group = 32;          // tokens per KIVI block and value channel group
  EncodingKind q8 = EncodingKind::kKivi;  // kInt8 / kFp8: an int8 / fp8 segment (kKivi: none)
  int q8_tpb = 16;                        // tokens per int8 / fp8 block
  bool q8_per_token = true;               // per-token scales, else one per block
  bool q8_raw_codes = false;              // random codes and scales (every code) instead of encoded data
  std::vector<int> enc_blocks;  // encoded blocks of each sequence's streams
  int force_chunk = 0;          // > 0: split size (tests the split path on any GPU)
  bool expect_split = false;
  bool slot_attn = false;
  float q_scale = 1.0f;
  int stale_plan_divisor = 1;  // > 1: plan with lengths / this (the cache grew since planning)
  // > 0: a sliding window (AttentionParams::first_visible): stream s's query
  // sees its last `window` slots, minus (s % 5) * window / 8 (different
  // starts per stream; 0 past the start of the stream).
  int window = 0;
  // PagedDecodeOptions::stages / heads_per_thread (0: the plan's default).
  int stages = 0;
  int hpt = 0;
  int tc = 0;  // PagedDecodeOptions::tensor_cores: 0 where it applies, -1 the CUDA-core kernel
};

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

bool HasEncoded(const DecodeCase& c) { return c.kivi_bits > 0 || c.q8 != EncodingKind::kKivi; }

// Shared by AddKivi and AddQuant8: the encoded page table (shuffled block ids,
// two spares) and a pool of 0xff bytes (fp16 0xffff: NaN scales in spares).
void MakeEncodedTable(HostCache* hc, const std::vector<int>& enc_blocks, std::mt19937* rng) {
  const int64_t bb = hc->enc.BlockBytes();
  hc->enc_indptr.assign(1, 0);
  for (int nb : enc_blocks) {
    hc->enc_indptr.push_back(hc->enc_indptr.back() + nb);
    hc->enc_len.push_back(static_cast<int64_t>(nb) * hc->enc.tokens_per_block);
  }
  const int num_blocks = hc->enc_indptr.back() + 2;
  hc->enc_indices.resize(static_cast<size_t>(num_blocks));
  std::iota(hc->enc_indices.begin(), hc->enc_indices.end(), 0);
  std::shuffle(hc->enc_indices.begin(), hc->enc_indices.end(), *rng);
  hc->enc_pool.assign(static_cast<size_t>(num_blocks * bb), 0xff);
}

// Adds int8 / fp8 segments of enc_blocks[s] blocks per stream: encoded
// keys (per-channel offsets, an occasional outlier so that small values use
// fp8's subnormals) and values; or, with raw, uniformly random codes (every
// code but fp8's NaNs) and scales, so that each code's dequantisation is seen.
void AddQuant8(HostCache* hc, EncodingKind kind, int tpb, bool per_token, bool raw, int d,
               const std::vector<int>& enc_blocks, std::mt19937* rng) {
  KvEncoding& e = hc->enc;
  e.kind = kind;
  e.bits = 8;
  e.head_dim = d;
  e.tokens_per_block = tpb;
  e.group = tpb;
  e.scale_per_token = per_token;
  ASSERT_EQ(e.Validate(), "");
  MakeEncodedTable(hc, enc_blocks, rng);
  const int64_t bb = e.BlockBytes();
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), bias(-2.0f, 2.0f);
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 99);
  std::vector<float> chan_bias(static_cast<size_t>(d));
  for (float& b : chan_bias) b = bias(*rng);
  std::vector<float> k(static_cast<size_t>(tpb) * d), v(k.size());
  const float qmax = kind == EncodingKind::kInt8 ? 127.0f : 448.0f;
  for (int b = 0; b < hc->enc_indptr.back(); ++b) {
    uint8_t* dst = hc->enc_pool.data() + static_cast<int64_t>(hc->enc_indices[b]) * bb;
    if (raw) {
      for (int64_t i = 0; i < 2 * e.CodeBytes(); ++i) {
        uint8_t x = static_cast<uint8_t>(byte(*rng));
        if (kind == EncodingKind::kFp8 && (x & 0x7f) == 0x7f) x ^= 1;  // NaN codes are never written
        dst[i] = x;
      }
      uint16_t* scales = reinterpret_cast<uint16_t*>(dst + 2 * e.CodeBytes());
      for (int64_t i = 0; i < e.NumKeyParams() + e.NumValueParams(); ++i) {
        scales[i] = F32ToF16((1.0f + 0.5f * u(*rng)) / qmax);
      }
      continue;
    }
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = u(*rng) + chan_bias[i % d];
      v[i] = u(*rng);
      if (pick(*rng) == 0) k[i] *= 30.0f;
    }
    EncodeKvBlock(e, k.data(), v.data(), dst);
  }
}

// Adds KIVI segments of enc_blocks[s] blocks per stream (keys with a per-channel
// offset, as real keys have; values centred).
void AddKivi(HostCache* hc, int bits, int group, int d, const std::vector<int>& enc_blocks, std::mt19937* rng) {
  KvEncoding& e = hc->enc;
  e.kind = EncodingKind::kKivi;
  e.bits = bits;
  e.head_dim = d;
  e.tokens_per_block = group;
  e.group = group;
  e.key_axis = QuantAxis::kChannel;
  e.value_axis = QuantAxis::kToken;
  ASSERT_EQ(e.Validate(), "");
  const int64_t bb = e.BlockBytes();
  MakeEncodedTable(hc, enc_blocks, rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), bias(-2.0f, 2.0f);
  std::vector<float> chan_bias(static_cast<size_t>(d));
  for (float& b : chan_bias) b = bias(*rng);
  std::vector<float> k(static_cast<size_t>(group) * d), v(k.size());
  for (int b = 0; b < hc->enc_indptr.back(); ++b) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = u(*rng) + chan_bias[i % d];
      v[i] = u(*rng);
    }
    EncodeKvBlock(e, k.data(), v.data(), hc->enc_pool.data() + static_cast<int64_t>(hc->enc_indices[b]) * bb);
  }
}

std::vector<DecodeCase> DecodeCases() {
  std::vector<DecodeCase> cs;
  auto add = [&](DecodeCase c) { cs.push_back(std::move(c)); };
  {
    DecodeCase c;  // block size 1, MHA, lengths that are not multiples of anything
    c.name = "f32_bs1_gqa1_d64";
    c.dtype = DType::kF32, c.block_size = 1, c.hq = 4, c.hkv = 4, c.d = 64;
    c.lens = {1, 7, 33, 100};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // partly filled last blocks around the block boundary, GQA 4
    c.name = "bf16_bs16_gqa4_d128_partial";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.lens = {1, 15, 16, 17, 300, 1000};
    c.slot_attn = true;
    c.q_scale = 4.0f;  // peaky softmax: the running max moves
    add(c);
  }
  {
    DecodeCase c;  // GQA 8, forced splits, one split shorter than a tile
    c.name = "f16_bs16_gqa8_d128_split";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 32, c.hkv = 4, c.d = 128;
    c.lens = {5000, 1234, 77, 257};
    c.force_chunk = 256;
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // long context, natural plan (small batch: splits)
    c.name = "bf16_bs16_gqa4_d128_long32k";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.lens = {32768, 20001};
    c.expect_split = true;
    add(c);
  }
  {
    DecodeCase c;  // long context, fp32, GQA 8, head_dim 64
    c.name = "f32_bs16_gqa8_d64_long32k";
    c.dtype = DType::kF32, c.block_size = 16, c.hq = 8, c.hkv = 1, c.d = 64;
    c.lens = {32768};
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // different lengths per KV head (per-head budgets)
    c.name = "f16_bs1_gqa4_d64_jitter";
    c.dtype = DType::kF16, c.block_size = 1, c.hq = 12, c.hkv = 3, c.d = 64;
    c.lens = {50, 513, 9};
    c.head_jitter = 4;
    c.force_chunk = 128;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // GQA 2 (two heads per thread)
    c.name = "bf16_bs16_gqa2_d64";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 4, c.hkv = 2, c.d = 64;
    c.lens = {3, 64, 65, 2049};
    add(c);
  }
  {
    DecodeCase c;  // GQA 6: three head slices of two heads
    c.name = "f32_bs16_gqa6_d128";
    c.dtype = DType::kF32, c.block_size = 16, c.hq = 12, c.hkv = 2, c.d = 128;
    c.lens = {700, 31};
    c.force_chunk = 192;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // GQA 3: three head slices of one head
    c.name = "bf16_bs1_gqa3_d128";
    c.dtype = DType::kBF16, c.block_size = 1, c.hq = 3, c.hkv = 1, c.d = 128;
    c.lens = {129, 2};
    add(c);
  }
  {
    DecodeCase c;  // a large batch: the streams alone fill the GPU, no split
    c.name = "bf16_bs16_gqa4_d128_batch64";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 32, c.hkv = 8, c.d = 128;
    for (int i = 0; i < 64; ++i) c.lens.push_back(1 + (i * 37) % 300);
    add(c);
  }
  {
    DecodeCase c;  // a plan made for shorter streams: the last split takes the excess
    c.name = "bf16_bs16_gqa4_d128_stale_plan";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.lens = {3000, 900};
    c.force_chunk = 256;
    c.stale_plan_divisor = 3;
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // KIVI-2 with a plain residual, forced splits inside the encoded segment
    c.name = "kivi2_bf16_bs16_gqa4_d128";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.kivi_bits = 2, c.kivi_group = 32;
    c.enc_blocks = {40, 3, 0, 10};
    c.lens = {20, 5, 1, 33};
    c.force_chunk = 128;
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // KIVI-4, group 64 over head_dim 64, MHA; one stream with no plain slot
    c.name = "kivi4_f16_bs16_gqa1_d64";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 2, c.hkv = 2, c.d = 64;
    c.kivi_bits = 4, c.kivi_group = 64;
    c.enc_blocks = {16, 1, 3};
    c.lens = {3, 128, 0};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // KIVI-2 at 32K, GQA 8, fp32 residual
    c.name = "kivi2_f32_bs16_gqa8_d128_long32k";
    c.dtype = DType::kF32, c.block_size = 16, c.hq = 8, c.hkv = 1, c.d = 128;
    c.kivi_bits = 2, c.kivi_group = 32;
    c.enc_blocks = {1020};
    c.lens = {128};
    c.expect_split = true;
    add(c);
  }
  {
    DecodeCase c;  // KIVI-4, block size 1, group 128 (a tile larger than the plain tile)
    c.name = "kivi4_bf16_bs1_gqa4_d128_g128";
    c.dtype = DType::kBF16, c.block_size = 1, c.hq = 8, c.hkv = 2, c.d = 128;
    c.kivi_bits = 4, c.kivi_group = 128;
    c.enc_blocks = {2, 5};
    c.lens = {7, 1};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // KIVI-2 with value groups of 4 channels (several groups per thread)
    c.name = "kivi2_f16_bs16_gqa4_d64_g4";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 4, c.hkv = 1, c.d = 64;
    c.kivi_bits = 2, c.kivi_group = 4;
    c.enc_blocks = {100, 7};
    c.lens = {9, 16};
    c.force_chunk = 64;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // int8, per-token scales, 16-token blocks (four per tile), forced splits
    c.name = "int8_bf16_bs16_gqa4_d128";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.q8 = EncodingKind::kInt8;
    c.enc_blocks = {40, 3, 0, 10};
    c.lens = {20, 5, 1, 33};
    c.force_chunk = 128;
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // fp8, MHA, head_dim 64; one stream with no plain slot
    c.name = "fp8_f16_bs16_gqa1_d64";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 2, c.hkv = 2, c.d = 64;
    c.q8 = EncodingKind::kFp8;
    c.enc_blocks = {30, 1, 5};
    c.lens = {3, 128, 0};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // fp8, one scale per block: 4100-byte blocks, copied 4 bytes at a time; GQA 8
    c.name = "fp8_bf16_bs16_gqa8_d128_block_scale";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 2, c.d = 128;
    c.q8 = EncodingKind::kFp8;
    c.q8_per_token = false;
    c.enc_blocks = {120, 9};
    c.lens = {16, 7};
    c.force_chunk = 256;
    c.expect_split = true;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // int8 blocks of one token (260 bytes, 64 per tile), block size 1, fp32 residual
    c.name = "int8_f32_bs1_gqa4_d128_tpb1";
    c.dtype = DType::kF32, c.block_size = 1, c.hq = 8, c.hkv = 2, c.d = 128;
    c.q8 = EncodingKind::kInt8;
    c.q8_tpb = 1;
    c.enc_blocks = {300, 17};
    c.lens = {5, 1};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // every fp8 code (subnormals, negative zero, 448) with random scales; 32-token blocks
    c.name = "fp8_raw_bf16_bs16_gqa4_d128";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.q8 = EncodingKind::kFp8;
    c.q8_tpb = 32;
    c.q8_raw_codes = true;
    c.enc_blocks = {12, 20};
    c.lens = {16, 40};
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // every int8 code, one scale per 64-token block, GQA 2
    c.name = "int8_raw_f16_bs16_gqa2_d64_block_scale";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 4, c.hkv = 2, c.d = 64;
    c.q8 = EncodingKind::kInt8;
    c.q8_tpb = 64;
    c.q8_per_token = false;
    c.q8_raw_codes = true;
    c.enc_blocks = {10, 3};
    c.lens = {1, 70};
    c.force_chunk = 128;
    c.expect_split = true;
    add(c);
  }
  {
    DecodeCase c;  // int8 with GQA 6: three head slices of two heads, fp32 residual
    c.name = "int8_f32_bs16_gqa6_d128";
    c.dtype = DType::kF32, c.block_size = 16, c.hq = 12, c.hkv = 2, c.d = 128;
    c.q8 = EncodingKind::kInt8;
    c.enc_blocks = {50, 8};
    c.lens = {3, 30};
    c.force_chunk = 192;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;  // fp8 at 32K, natural plan
    c.name = "fp8_bf16_bs16_gqa4_d128_long32k";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 4, c.hkv = 1, c.d = 128;
    c.q8 = EncodingKind::kFp8;
    c.enc_blocks = {2040};
    c.lens = {100};
    c.expect_split = true;
    add(c);
  }
  // Sliding windows (first_visible): smaller than, equal to and larger than a
  // block; splits wholly before the window and split starting inside it;
  // over encoded segments (KIVI, int8) and their plain residual.
  {
    DecodeCase c;
    c.name = "bf16_bs16_gqa4_d128_window5";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.lens = {1, 15, 16, 17, 300};
    c.window = 5;
    c.slot_attn = true;
    c.q_scale = 4.0f;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "f32_bs1_gqa1_d64_window16";
    c.dtype = DType::kF32, c.block_size = 1, c.hq = 4, c.hkv = 4, c.d = 64;
    c.lens = {7, 33, 100};
    c.window = 16;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "f16_bs16_gqa8_d128_window1000_split";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 32, c.hkv = 4, c.d = 128;
    c.lens = {5000, 1234, 77, 257};
    c.force_chunk = 256;
    c.expect_split = true;
    c.window = 1000;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "bf16_bs16_gqa4_d128_window4096_long32k";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.lens = {32768, 20001};
    c.expect_split = true;
    c.window = 4096;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "kivi2_bf16_gqa4_d128_window100_split";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.kivi_bits = 2;
    c.lens = {20, 40, 100};
    c.enc_blocks = {3, 10, 1};
    c.force_chunk = 64;
    c.window = 100;
    c.slot_attn = true;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "int8_f16_gqa8_d64_window40";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 8, c.hkv = 1, c.d = 64;
    c.q8 = EncodingKind::kInt8;
    c.lens = {9, 50};
    c.enc_blocks = {12, 3};
    c.force_chunk = 128;
    c.window = 40;
    c.slot_attn = true;
    add(c);
  }
  // Pipeline depths and head splits other than the defaults: the same cases
  // through 3- and 4-stage rings (a range of fewer tiles than stages, the
  // ring wrapping many times) and through 1 or 2 heads per thread.
  {
    DecodeCase c;
    c.name = "bf16_bs16_gqa4_d128_stages3_split";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.lens = {1, 15, 33, 300, 2000};
    c.force_chunk = 192;
    c.expect_split = true;
    c.slot_attn = true;
    c.stages = 3;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "kivi2_bf16_bs16_gqa4_d128_stages4";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.kivi_bits = 2, c.kivi_group = 32;
    c.enc_blocks = {40, 3, 0, 10};
    c.lens = {20, 5, 1, 33};
    c.force_chunk = 256;
    c.slot_attn = true;
    c.stages = 4;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "int8_bf16_bs16_gqa4_d128_stages4_hpt2";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 16, c.hkv = 4, c.d = 128;
    c.q8 = EncodingKind::kInt8;
    c.enc_blocks = {40, 3, 0, 10};
    c.lens = {20, 5, 1, 33};
    c.force_chunk = 128;
    c.expect_split = true;
    c.slot_attn = true;
    c.stages = 4;
    c.hpt = 2;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "f16_bs16_gqa8_d128_hpt1_window1000";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 32, c.hkv = 4, c.d = 128;
    c.lens = {5000, 1234, 77, 257};
    c.force_chunk = 512;
    c.window = 1000;
    c.slot_attn = true;
    c.hpt = 1;
    c.stages = 3;
    add(c);
  }
  {
    DecodeCase c;  // natural plan, 4 stages, 2 heads per thread
    c.name = "fp8_bf16_bs16_gqa4_d128_stages4_hpt2_natural";
    c.dtype = DType::kBF16, c.block_size = 16, c.hq = 8, c.hkv = 2, c.d = 128;
    c.q8 = EncodingKind::kFp8;
    c.lens = {7, 16};
    c.enc_blocks = {300, 90};
    c.stages = 4;
    c.hpt = 2;
    add(c);
  }
  // The tensor-core kernel (PagedDecodeOptions::tensor_cores = 1, not the
  // default yet): every plain bf16 / fp16 case above with a GQA group of 2-8
  // once more through it, and a few shapes of its own (group 8 at head_dim
  // 64, an odd group, 3 stages, splits wholly before a window).
  {
    std::vector<DecodeCase> tc;
    for (const DecodeCase& c : cs) {
      const int group = c.hq / c.hkv;
      if (c.dtype != DType::kF32 && !HasEncoded(c) && group >= 2 && group <= 8 && c.tc == 0) {
        DecodeCase d = c;
        d.name += "_tc";
        d.tc = 1;
        tc.push_back(d);
      }
    }
    for (DecodeCase& d : tc) add(d);
  }
  {
    DecodeCase c;
    c.name = "bf16_bs1_gqa8_d64_tc_stages3";
    c.dtype = DType::kBF16, c.block_size = 1, c.hq = 16, c.hkv = 2, c.d = 64;
    c.lens = {11, 63, 64, 65, 700};
    c.head_jitter = 5;
    c.stages = 3;
    c.q_scale = 4.0f;
    c.tc = 1;
    add(c);
  }
  {
    DecodeCase c;
    c.name = "f16_bs16_gqa5_d128_tc_window_split";
    c.dtype = DType::kF16, c.block_size = 16, c.hq = 10, c.hkv = 2, c.d = 128;
    c.lens = {3000, 130, 1};
    c.force_chunk = 256;
    c.expect_split = true;
    c.window = 300;
    c.slot_attn = true;
    c.tc = 1;
    add(c);
  }
  return cs;
}

class PagedDecodeCudaTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(PagedDecodeCudaTest, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const DecodeCase& c = GetParam();
  std::mt19937 rng(1234 + static_cast<unsigned>(c.name.size()) * 77);
  const int nseq = static_cast<int>(c.lens.size());
  const int S = nseq * c.hkv;
  std::vector<int64_t> plain_len;
  for (int s = 0; s < S; ++s) {
    plain_len.push_back(std::max<int64_t>(0, c.lens[s / c.hkv] - ((s % c.hkv) % 3) * c.head_jitter));
  }
  HostCache hc = MakePlainCache(c.dtype, c.block_size, c.d, plain_len, &rng);
  std::vector<int> enc_blocks;
  if (HasEncoded(c)) {
    for (int s = 0; s < S; ++s) enc_blocks.push_back(c.enc_blocks[s / c.hkv]);
  }
  if (c.kivi_bits > 0) {
    ASSERT_NO_FATAL_FAILURE(AddKivi(&hc, c.kivi_bits, c.kivi_group, c.d, enc_blocks, &rng));
  } else if (HasEncoded(c)) {
    ASSERT_NO_FATAL_FAILURE(AddQuant8(&hc, c.q8, c.q8_tpb, c.q8_per_token, c.q8_raw_codes, c.d, enc_blocks, &rng));
  }
  std::vector<int64_t> total_len(static_cast<size_t>(S));
  std::vector<int64_t> slot_offsets(static_cast<size_t>(S));
  int64_t total_slots = 0;
  for (int s = 0; s < S; ++s) {
    total_len[s] = plain_len[s] + (HasEncoded(c) ? hc.enc_len[s] : 0);
    slot_offsets[s] = total_slots;
    total_slots += total_len[s];
  }

  // Reference on the host copy of the cache (the specification).
  std::vector<int32_t> qo_indptr(static_cast<size_t>(nseq) + 1);
  std::iota(qo_indptr.begin(), qo_indptr.end(), 0);
  std::vector<float> q(static_cast<size_t>(nseq) * c.hq * c.d);
  std::uniform_real_distribution<float> uq(-c.q_scale, c.q_scale);
  for (float& x : q) x = uq(rng);
  std::vector<float> want_o(q.size()), want_slots(static_cast<size_t>(total_slots), 0.0f);
  AttentionParams p;
  p.num_seqs = nseq;
  p.num_qo_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.head_dim = c.d;
  p.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  p.qo_indptr = qo_indptr.data();
  p.q = q.data();
  p.o = want_o.data();
  if (c.slot_attn) {
    p.slot_attn = want_slots.data();
    p.slot_attn_offsets = slot_offsets.data();
  }
  std::vector<int32_t> first_visible;
  for (int s = 0; c.window > 0 && s < S; ++s) {
    const int64_t visible = c.window - (s % 5) * c.window / 8;
    first_visible.push_back(static_cast<int32_t>(std::max<int64_t>(0, total_len[s] - visible)));
  }
  if (c.window > 0) p.first_visible = first_visible.data();
  const PagedKV host_kv = HostView(hc, c.dtype, c.block_size, c.d);
  EncodedKV host_enc;
  if (HasEncoded(c)) {
    host_enc.base = hc.enc_pool.data();
    host_enc.block_bytes = hc.enc.BlockBytes();
    host_enc.enc = hc.enc;
    host_enc.num_streams = S;
    host_enc.indptr = hc.enc_indptr.data();
    host_enc.indices = hc.enc_indices.data();
    PagedAttentionEncodedReference(host_kv, host_enc, p);
  } else {
    const Status st = AttentionParamsCheck(host_kv, p);
    ASSERT_TRUE(st.ok()) << st.ToString();
    PagedAttentionReference(host_kv, p);
  }

  // Plan.
  cuda::PagedDecodeShape shape;
  shape.num_seqs = nseq;
  shape.num_qo_heads = c.hq;
  shape.num_kv_heads = c.hkv;
  shape.head_dim = c.d;
  shape.dtype = c.dtype;
  if (HasEncoded(c)) {
    shape.enc_tokens_per_block = hc.enc.tokens_per_block;
    shape.enc_block_bytes = hc.enc.BlockBytes();
    shape.enc_kind = hc.enc.kind;
  }
  cuda::PagedDecodeOptions opt;
  opt.force_chunk_tokens = c.force_chunk;
  opt.stages = c.stages;
  opt.heads_per_thread = c.hpt;
  opt.tensor_cores = c.tc;
  std::vector<int64_t> plan_len = total_len;
  for (int64_t& x : plan_len) x = std::max<int64_t>(1, x / c.stale_plan_divisor);
  cuda::PagedDecodePlan plan;
  CUDA_ASSERT(cuda::PlanPagedDecode(shape, plan_len.data(), opt, &plan));
  if (c.expect_split) {
    EXPECT_GT(plan.max_splits, 1) << "chunk " << plan.chunk_tokens;
  }
  if (c.tc != 0) {
    EXPECT_EQ(plan.tensor_cores, c.tc == 1);
  }

  // Device copies.
  DeviceCache dc;
  DeviceBuffer d_enc_pool, d_enc_indptr, d_enc_indices;
  DeviceBuffer d_q, d_o, d_slots, d_offsets, d_ws;
  CUDA_ASSERT(dc.Upload(hc));
  CUDA_ASSERT(d_q.Upload(q));
  CUDA_ASSERT(d_o.Alloc(q.size() * sizeof(float)));
  CUDA_ASSERT(cudaMemset(d_o.as<void>(), 0xff, q.size() * sizeof(float)));  // NaN: every element must be written
  const float kSlotBase = 0.25f;                                              // slot_attn is ADDED to
  CUDA_ASSERT(d_slots.Upload(std::vector<float>(static_cast<size_t>(total_slots), kSlotBase)));
  CUDA_ASSERT(d_offsets.Upload(slot_offsets));
  CUDA_ASSERT(d_ws.Alloc(static_cast<size_t>(plan.workspace_bytes)));
  CUDA_ASSERT(cudaMemset(d_ws.as<void>(), 0xff, static_cast<size_t>(plan.workspace_bytes)));

  const PagedKV kv = dc.On(host_kv);
  EncodedKV enc = host_enc;
  if (HasEncoded(c)) {
    CUDA_ASSERT(d_enc_pool.Upload(hc.enc_pool));
    CUDA_ASSERT(d_enc_indptr.Upload(hc.enc_indptr));
    CUDA_ASSERT(d_enc_indices.Upload(hc.enc_indices));
    enc.base = d_enc_pool.as<uint8_t>();
    enc.indptr = d_enc_indptr.as<int32_t>();
    enc.indices = d_enc_indices.as<int32_t>();
  }
  DeviceBuffer d_first;
  AttentionParams dp = p;
  if (c.window > 0) {
    CUDA_ASSERT(d_first.Upload(first_visible));
    dp.first_visible = d_first.as<int32_t>();
  }
  dp.qo_indptr = nullptr;  // decode: ignored by the CUDA backend
  dp.q = d_q.as<float>();
  dp.o = d_o.as<float>();
  dp.slot_attn = c.slot_attn ? d_slots.as<float>() : nullptr;
  dp.slot_attn_offsets = c.slot_attn ? d_offsets.as<int64_t>() : nullptr;
  const EncodedKV* encp = HasEncoded(c) ? &enc : nullptr;
  EXPECT_EQ(cuda::PagedDecodeCheck(plan, kv, encp, dp, d_ws.as<void>(), plan.workspace_bytes), "");
  CUDA_ASSERT(cuda::PagedDecode(plan, kv, encp, dp, d_ws.as<void>(), plan.workspace_bytes, nullptr));
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaGetLastError());

  std::vector<float> got_o, got_slots;
  CUDA_ASSERT(d_o.Download(&got_o));
  EXPECT_EQ(CountMismatches(got_o, want_o, kAtol, Rtol(c.dtype), "o"), 0)
      << c.name << ": splits " << plan.max_splits << " x " << plan.chunk_tokens << " tokens";
  if (c.slot_attn) {
    CUDA_ASSERT(d_slots.Download(&got_slots));
    for (float& x : got_slots) x -= kSlotBase;
    EXPECT_EQ(CountMismatches(got_slots, want_slots, 1e-6, 1e-4, "slot_attn"), 0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedDecodeCudaTest, ::testing::ValuesIn(DecodeCases()),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Host-side logic: runs without a GPU.

cuda::PagedDecodeShape LlamaShape(int num_seqs) {
  cuda::PagedDecodeShape sh;
  sh.num_seqs = num_seqs;
  sh.num_qo_heads = 32;
  sh.num_kv_heads = 8;
  sh.head_dim = 128;
  sh.dtype = DType::kBF16;
  return sh;
}

cuda::PagedDecodeOptions H200Like() {
  cuda::PagedDecodeOptions o;
  o.num_sms = 132;
  o.ctas_per_sm = 3;
  return o;
}

TEST(PagedDecodePlanTest, NoSplitWhenTheStreamsFillWholeWaves) {
  const cuda::PagedDecodeShape sh = LlamaShape(99);  // 792 streams: two full waves of 396
  std::vector<int64_t> len(99 * 8, 4096);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.max_splits, 1);
  EXPECT_GE(plan.chunk_tokens, 4096);
  EXPECT_EQ(plan.heads_per_thread, 4);
  EXPECT_EQ(plan.head_slices, 1);
  EXPECT_EQ(plan.threads, 128);
  EXPECT_EQ(plan.tile_tokens, 32);  // 8 rows of 16 threads x 4 rows each
  EXPECT_LE(plan.smem_bytes, 48 * 1024);
  EXPECT_GE(plan.workspace_bytes, 99 * 32 * 4);
}

TEST(PagedDecodePlanTest, SplitsRatherThanLeaveMostOfAWaveIdle) {
  const cuda::PagedDecodeShape sh = LlamaShape(64);  // 512 streams: 1.3 waves unsplit
  std::vector<int64_t> len(64 * 8, 4096);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_GT(plan.max_splits, 1);
  const int64_t ctas = 512LL * plan.max_splits, waves = (ctas + 395) / 396;
  EXPECT_GE(static_cast<double>(ctas) / (waves * 396), 0.85) << plan.max_splits << " splits";
}

TEST(PagedDecodePlanTest, SplitsLongStreamsIntoAboutOneWave) {
  const cuda::PagedDecodeShape sh = LlamaShape(1);
  std::vector<int64_t> len(8, 32768);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  const int64_t target = 132 * 3;
  EXPECT_GT(plan.max_splits, 1);
  EXPECT_EQ(plan.chunk_tokens % 64, 0);
  EXPECT_LE(8 * plan.max_splits, target);
  EXPECT_GT(8 * ((32768 + plan.chunk_tokens - 64 - 1) / (plan.chunk_tokens - 64)), target);  // smallest such chunk
  EXPECT_GE(plan.workspace_bytes, 32LL * plan.max_splits * (128 + 1) * 4);
}

TEST(PagedDecodePlanTest, ShortStreamsAreNotSplitBelowTheMinimumChunk) {
  const cuda::PagedDecodeShape sh = LlamaShape(1);
  std::vector<int64_t> len(8, 100);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.max_splits, 1);
  std::vector<int64_t> len2(8, 1000);
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len2.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_GE(plan.chunk_tokens, 128);
}

TEST(PagedDecodePlanTest, EncodedSplitsAreWholeBlocks) {
  cuda::PagedDecodeShape sh = LlamaShape(1);
  KvEncoding e;
  e.bits = 2, e.head_dim = 128, e.tokens_per_block = 128, e.group = 128;
  sh.enc_tokens_per_block = 128;
  sh.enc_block_bytes = e.BlockBytes();
  std::vector<int64_t> len(8, 20000);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.chunk_tokens % 128, 0);
  cuda::PagedDecodeOptions forced = H200Like();
  forced.force_chunk_tokens = 100;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), forced, &plan), cudaSuccess);
  EXPECT_EQ(plan.chunk_tokens, 128);
  EXPECT_EQ(plan.max_splits, (20000 + 127) / 128);
  EXPECT_GE(plan.smem_bytes, 2 * e.BlockBytes());
}

KvEncoding Quant8Encoding(EncodingKind kind, int tpb, bool per_token) {
  KvEncoding e;
  e.kind = kind;
  e.bits = 8;
  e.head_dim = 128;
  e.tokens_per_block = tpb;
  e.group = tpb;
  e.scale_per_token = per_token;
  return e;
}

TEST(PagedDecodePlanTest, Quant8TilesFillAStage) {
  std::vector<int64_t> len(8, 20000);
  struct Want {
    int tpb;
    bool per_token;
    int tile_blocks;
  };
  // bf16 plain stage at Llama-3.1-8B's shape: 32 tokens, 16 KB.
  for (const Want& w : {Want{16, true, 4}, Want{16, false, 4}, Want{1, true, 64}, Want{64, true, 1}, Want{32, false, 2}}) {
    const KvEncoding e = Quant8Encoding(EncodingKind::kFp8, w.tpb, w.per_token);
    ASSERT_EQ(e.Validate(), "");
    cuda::PagedDecodeShape sh = LlamaShape(1);
    sh.enc_kind = e.kind;
    sh.enc_tokens_per_block = w.tpb;
    sh.enc_block_bytes = e.BlockBytes();
    cuda::PagedDecodePlan plan;
    ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess) << w.tpb;
    EXPECT_EQ(plan.enc_tile_blocks, w.tile_blocks) << "tokens_per_block " << w.tpb << " per_token " << w.per_token;
    EXPECT_EQ(plan.chunk_tokens % std::max(64, w.tpb), 0);
    EXPECT_GE(plan.smem_bytes, 2 * plan.enc_tile_blocks * e.BlockBytes());
    EXPECT_LE(plan.smem_bytes, 48 * 1024);
  }
  cuda::PagedDecodeShape sh = LlamaShape(1);  // KIVI keeps one block per tile
  sh.enc_tokens_per_block = 32;
  sh.enc_block_bytes = 3072;
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.enc_tile_blocks, 1);
}

TEST(PagedDecodePlanTest, LayoutForLargeGroups) {
  cuda::PagedDecodeShape sh = LlamaShape(2);
  sh.num_qo_heads = 64;  // group 8: two slices of four heads
  std::vector<int64_t> len(16, 10);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.heads_per_thread, 4);
  EXPECT_EQ(plan.head_slices, 2);
  EXPECT_EQ(plan.threads, 128);
  sh.num_qo_heads = 56;  // group 7: seven slices of one head
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.heads_per_thread, 1);
  EXPECT_EQ(plan.threads, 7 * 32);
}

TEST(PagedDecodePlanTest, StagesAndHeadsPerThreadOptions) {
  const cuda::PagedDecodeShape sh = LlamaShape(4);
  std::vector<int64_t> len(32, 4096);
  cuda::PagedDecodePlan def, four, two_heads;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &def), cudaSuccess);
  EXPECT_EQ(def.stages, cuda::kPagedDecodeDefaultStages);
  cuda::PagedDecodeOptions o = H200Like();
  o.stages = 4;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), o, &four), cudaSuccess);
  EXPECT_EQ(four.stages, 4);
  const int64_t stage = 32 * 2 * 128 * 2;  // 32 bf16 tokens of K and V
  EXPECT_EQ(four.smem_bytes - def.smem_bytes, (4 - def.stages) * stage);
  o.stages = 0;
  o.heads_per_thread = 2;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), o, &two_heads), cudaSuccess);
  EXPECT_EQ(two_heads.heads_per_thread, 2);
  EXPECT_EQ(two_heads.head_slices, 2);
  EXPECT_EQ(two_heads.threads, 128);
  EXPECT_EQ(two_heads.tile_tokens, 16);  // 4 rows of 16 threads per slice x 4 rows each
  cuda::PagedDecodePlan bad;
  for (int stages : {1, 5, -1}) {
    o = H200Like();
    o.stages = stages;
    EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), o, &bad), cudaErrorInvalidValue) << stages;
  }
  for (int hpt : {3, 8, -2}) {
    o = H200Like();
    o.heads_per_thread = hpt;
    EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), o, &bad), cudaErrorInvalidValue) << hpt;
  }
  cuda::PagedDecodeShape g2 = sh;
  g2.num_qo_heads = 16;  // group 2: 4 heads per thread do not divide it
  o = H200Like();
  o.heads_per_thread = 4;
  EXPECT_EQ(cuda::PlanPagedDecode(g2, len.data(), o, &bad), cudaErrorInvalidValue);
  cuda::PagedDecodeShape g16 = sh;
  g16.num_qo_heads = 128;  // group 16 at one head per thread: 16 slices of 32 threads > 256
  o.heads_per_thread = 1;
  EXPECT_EQ(cuda::PlanPagedDecode(g16, len.data(), o, &bad), cudaErrorNotSupported);
}

TEST(PagedDecodePlanTest, TensorCoresWhereTheyApply) {
  cuda::PagedDecodeShape sh = LlamaShape(4);
  std::vector<int64_t> len(32, 4096);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  EXPECT_EQ(plan.tensor_cores, cuda::kPagedDecodeTensorCoresByDefault);
  cuda::PagedDecodeOptions must = H200Like();
  must.tensor_cores = 1;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), must, &plan), cudaSuccess);
  EXPECT_TRUE(plan.tensor_cores);  // bf16, plain, group 4
  EXPECT_GE(plan.tc_smem_bytes, 2 * 64 * 2 * (128 * 2 + 16));  // two stages of 64 padded K and V rows
  EXPECT_EQ(plan.threads, 128);                                 // the CUDA-core kernel's (slot_attn pass)
  sh.dtype = DType::kF16;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), must, &plan), cudaSuccess);
  EXPECT_TRUE(plan.tensor_cores);
  cuda::PagedDecodeOptions never = H200Like();
  never.tensor_cores = -1;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), never, &plan), cudaSuccess);
  EXPECT_FALSE(plan.tensor_cores);
  for (int variant = 0; variant < 4; ++variant) {
    cuda::PagedDecodeShape other = LlamaShape(4);
    if (variant == 0) other.dtype = DType::kF32;
    if (variant == 1) other.num_qo_heads = 8;    // group 1
    if (variant == 2) other.num_qo_heads = 128;  // group 16
    if (variant == 3) {                          // an encoded segment
      other.enc_tokens_per_block = 32;
      other.enc_block_bytes = 3072;
    }
    ASSERT_EQ(cuda::PlanPagedDecode(other, len.data(), H200Like(), &plan), cudaSuccess) << variant;
    EXPECT_FALSE(plan.tensor_cores) << variant;
    EXPECT_EQ(cuda::PlanPagedDecode(other, len.data(), must, &plan), cudaErrorNotSupported) << variant;
  }
  must.tensor_cores = 2;
  EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), must, &plan), cudaErrorInvalidValue);
}

TEST(PagedDecodePlanTest, RejectsUnsupportedShapes) {
  cuda::PagedDecodeShape sh = LlamaShape(1);
  std::vector<int64_t> len(64, 10);
  cuda::PagedDecodePlan plan;
  sh.head_dim = 96;
  EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaErrorNotSupported);
  EXPECT_NE(cuda::PagedDecodeShapeCheck(sh).find("head_dim"), std::string::npos);
  sh = LlamaShape(1);
  sh.num_qo_heads = 12;  // not a multiple of 8
  EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaErrorInvalidValue);
  sh.num_qo_heads = 72;  // group 9
  EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaErrorNotSupported);
  sh = LlamaShape(1);
  EXPECT_EQ(cuda::PlanPagedDecode(sh, nullptr, H200Like(), &plan), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), nullptr), cudaErrorInvalidValue);
}

// The launchers check their arguments before touching the device, so these
// run (and must fail cleanly) on a machine without a GPU.
TEST(PagedDecodeArgsTest, RejectsBadCallsBeforeLaunching) {
  const cuda::PagedDecodeShape sh = LlamaShape(1);
  std::vector<int64_t> len(8, 64);
  cuda::PagedDecodePlan plan;
  ASSERT_EQ(cuda::PlanPagedDecode(sh, len.data(), H200Like(), &plan), cudaSuccess);
  alignas(256) static float fake[1024];
  static int32_t fake_i[16];
  PagedKV kv;
  kv.base = reinterpret_cast<uint8_t*>(fake);
  kv.block_bytes = 2 * 16 * 128 * 2;
  kv.dtype = DType::kBF16;
  kv.block_size = 16;
  kv.head_dim = 128;
  kv.num_streams = 8;
  kv.indptr = kv.indices = kv.last_block_len = fake_i;
  AttentionParams p;
  p.num_seqs = 1;
  p.num_qo_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.sm_scale = 0.1f;
  p.q = fake;
  p.o = fake;
  void* ws = fake;
  EXPECT_EQ(cuda::PagedDecodeCheck(plan, kv, nullptr, p, ws, plan.workspace_bytes), "");

  AttentionParams bad = p;
  bad.q = nullptr;
  EXPECT_EQ(cuda::PagedDecode(plan, kv, nullptr, bad, ws, plan.workspace_bytes, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.rope_inv_freq = fake;
  EXPECT_EQ(cuda::PagedDecode(plan, kv, nullptr, bad, ws, plan.workspace_bytes, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.slot_attn = fake;
  EXPECT_EQ(cuda::PagedDecode(plan, kv, nullptr, bad, ws, plan.workspace_bytes, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::PagedDecode(plan, kv, nullptr, p, ws, plan.workspace_bytes - 4, nullptr), cudaErrorInvalidValue);
  PagedKV bad_kv = kv;
  bad_kv.block_bytes = 100;
  EXPECT_EQ(cuda::PagedDecode(plan, bad_kv, nullptr, p, ws, plan.workspace_bytes, nullptr), cudaErrorInvalidValue);
  bad_kv = kv;
  bad_kv.num_streams = 7;
  EXPECT_NE(cuda::PagedDecodeCheck(plan, bad_kv, nullptr, p, ws, plan.workspace_bytes).find("streams"),
            std::string::npos);

  // An encoded view the plan does not expect, and axes the kernel does not read.
  EncodedKV enc;
  enc.base = reinterpret_cast<uint8_t*>(fake);
  enc.enc.bits = 2, enc.enc.head_dim = 128, enc.enc.tokens_per_block = 32, enc.enc.group = 32;
  enc.block_bytes = enc.enc.BlockBytes();
  enc.num_streams = 8;
  enc.indptr = enc.indices = fake_i;
  EXPECT_EQ(cuda::PagedDecode(plan, kv, &enc, p, ws, plan.workspace_bytes, nullptr), cudaErrorInvalidValue);
  cuda::PagedDecodeShape esh = sh;
  esh.enc_tokens_per_block = 32;
  esh.enc_block_bytes = enc.enc.BlockBytes();
  cuda::PagedDecodePlan eplan;
  ASSERT_EQ(cuda::PlanPagedDecode(esh, len.data(), H200Like(), &eplan), cudaSuccess);
  EXPECT_EQ(cuda::PagedDecodeCheck(eplan, kv, &enc, p, ws, eplan.workspace_bytes), "");
  enc.enc.value_axis = QuantAxis::kChannel;
  enc.enc.key_axis = QuantAxis::kToken;
  esh.enc_block_bytes = enc.enc.BlockBytes();
  ASSERT_EQ(cuda::PlanPagedDecode(esh, len.data(), H200Like(), &eplan), cudaSuccess);
  EXPECT_EQ(cuda::PagedDecode(eplan, kv, &enc, p, ws, eplan.workspace_bytes, nullptr), cudaErrorNotSupported);

  // int8 / fp8: the kind must match the plan's; blocks of a power-of-two size only.
  enc.enc = Quant8Encoding(EncodingKind::kInt8, 16, true);
  enc.block_bytes = enc.enc.BlockBytes();
  esh.enc_kind = EncodingKind::kInt8;
  esh.enc_tokens_per_block = 16;
  esh.enc_block_bytes = enc.enc.BlockBytes();
  ASSERT_EQ(cuda::PlanPagedDecode(esh, len.data(), H200Like(), &eplan), cudaSuccess);
  EXPECT_EQ(cuda::PagedDecodeCheck(eplan, kv, &enc, p, ws, eplan.workspace_bytes), "");
  enc.enc.kind = EncodingKind::kFp8;
  EXPECT_NE(cuda::PagedDecodeCheck(eplan, kv, &enc, p, ws, eplan.workspace_bytes).find("enc_kind"), std::string::npos);
  EXPECT_EQ(cuda::PagedDecode(eplan, kv, &enc, p, ws, eplan.workspace_bytes, nullptr), cudaErrorInvalidValue);
  esh.enc_tokens_per_block = 12;
  esh.enc_block_bytes = Quant8Encoding(EncodingKind::kInt8, 12, true).BlockBytes();
  EXPECT_EQ(cuda::PlanPagedDecode(esh, len.data(), H200Like(), &eplan), cudaErrorNotSupported);
  EXPECT_NE(cuda::PagedDecodeShapeCheck(esh).find("power of two"), std::string::npos);
}

}  // namespace
}  // namespace cuda_test
}  // namespace kvlab
