// Encoded (compressed) KV blocks: the storage formats that representation
// policies choose for sealed blocks, their encoder/decoder, and the view of a
// stream's encoded segment that attention kernels read. No libtorch here.
//
// A stream's slots are numbered encoded-first: slots [0, n_enc) live in
// encoded blocks (each exactly tokens_per_block tokens), slots [n_enc, len)
// in plain blocks (PagedKV). New tokens always land in the plain tail; core
// seals the oldest plain tokens into encoded blocks between steps.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/dtype.h"

namespace kvlab {

enum class EncodingKind : uint8_t {
  kKivi = 0,   // asymmetric integer (scale + zero point), 2 or 4 bits, KIVI's axes
  kInt8 = 1,   // symmetric int8, absmax scale
  kFp8 = 2,    // fp8 e4m3, absmax scale (448 = max finite)
  kThink = 3,  // ThinK key-channel pruning: the kept key channels and their mask, values whole
};

enum class QuantAxis : uint8_t {
  kChannel = 0,  // statistics over the tokens of a group, one scale per channel (KIVI keys)
  kToken = 1,    // statistics over a group of channels of one token (KIVI values)
};

// The format of one encoded block. All scales and zero points are fp16.
//
// kKivi: tokens_per_block = group. Per K and per V, `axis` decides the
// quantization groups: kChannel -> one (scale, zero) per channel over the
// block's `group` tokens; kToken -> one (scale, zero) per token per run of
// `group` channels (REQUIRES group divides head_dim). Values are
// round((x - zero) / scale) clamped to [0, 2^bits - 1], zero = min,
// scale = (max - min) / (2^bits - 1), so |x - decode(x)| <= scale / 2.
// Layout: K codes, V codes (bits packed little-endian within bytes, row-major
// [token][channel]), then K scales, K zeros, V scales, V zeros.
//
// kInt8 / kFp8: tokens_per_block = block size; per-token scales (one per
// token row of K and of V) when scale_per_token, else one scale for all of K
// and one for all of V in the block. Layout: K codes [t][d], V codes [t][d],
// then K scales, V scales.
//
// kThink: tokens_per_block = block size; each block keeps `key_channels` of
// the head_dim key channels, those with the largest energy sum_t k[t][c]^2
// over the block's tokens (ties to the lower channel), and every value
// channel, all at `dtype` (the cache's, so kept numbers are stored exactly).
// A pruned channel decodes as 0, so q.k over the decoded key is the dot
// product over the kept channels. Layout: K [t][key_channels] (kept channels
// in increasing order), V [t][d], then the channel mask as ceil(d / 32)
// uint32 words (bit c % 32 of word c / 32 set: channel c kept).
struct KvEncoding {
  EncodingKind kind = EncodingKind::kKivi;
  int bits = 2;
  int head_dim = 0;
  int tokens_per_block = 32;
  int group = 32;  // kKivi: see above
  QuantAxis key_axis = QuantAxis::kChannel;
  QuantAxis value_axis = QuantAxis::kToken;
  bool scale_per_token = true;  // kInt8 / kFp8
  int key_channels = 0;         // kThink: key channels kept per block, in [1, head_dim]
  // The dtype of the plain blocks (DeriveCacheShape sets it from the cache's
  // storage dtype): kThink stores its numbers at it; the quantizing formats
  // ignore it.
  DType dtype = DType::kF32;

  // Number of fp16 (scale, zero) pairs for K (or V) in one block (KIVI) or
  // scales (int8/fp8).
  int64_t NumKeyParams() const;
  int64_t NumValueParams() const;
  int64_t CodeBytes() const;  // bytes of K codes (== bytes of V codes; kThink: of the kept K numbers)
  int64_t BlockBytes() const;
  // Empty when the format is valid; else the message, naming the parameter.
  std::string Validate() const;
  std::string Describe() const;
  // kKivi: the shape the CPU int8 attention kernel (kernels/attention_kivi_int8.h)
  // is written for: 2 bits, group 32, keys per channel, values per token,
  // head_dim 128. The kivi policy refuses its attention = "int8" on any other
  // shape; the kernel runs the exact path there (AttentionParams::int8_attention).
  bool Int8AttentionShape() const;
  // Whether the sealed numbers are stored at `dtype` (the cache's) rather
  // than quantized: kThink.
  bool StoresAtCacheDType() const { return kind == EncodingKind::kThink; }
};

// Encodes tokens_per_block tokens: k and v are fp32 [tokens_per_block][head_dim].
void EncodeKvBlock(const KvEncoding& e, const float* k, const float* v, uint8_t* dst);
// Decodes one block back to fp32 [tokens_per_block][head_dim] K and V.
void DecodeKvBlock(const KvEncoding& e, const uint8_t* src, float* k, float* v);

// kKivi: the channel-wise range of a block's decoded keys, read from its key
// scales and zeros alone (no codes): codes are 0..2^bits - 1 and decode as
// code * scale + zero with scale >= 0, so channel c's keys lie in
// [zero, (2^bits - 1) * scale + zero] (per-channel keys), or in the union of
// those ranges over the block's tokens (per-token keys). lo and hi are
// [head_dim]. What a read policy ranks a sealed group by (Quest).
void KiviKeyRange(const KvEncoding& e, const uint8_t* block, float* lo, float* hi);
// Bytes KiviKeyRange reads of a block: its key scales and zeros.
inline int64_t KiviKeyRangeBytes(const KvEncoding& e) { return e.NumKeyParams() * 4; }

// kThink: word `word` of a block's channel mask (bit c % 32 of word c / 32:
// key channel c kept), for tests and tools.
uint32_t ThinkKeptMaskWord(const KvEncoding& e, const uint8_t* block, int word);

// The encoded segments of a batch's streams for one layer (same stream
// numbering as PagedKV). Every encoded block is full.
struct EncodedKV {
  const uint8_t* base = nullptr;  // encoded pool arena
  int64_t block_bytes = 0;
  KvEncoding enc;
  int num_streams = 0;
  const int32_t* indptr = nullptr;   // [num_streams + 1]
  const int32_t* indices = nullptr;  // encoded block ids
  // Optional: evicted slots inside sealed groups (a selection policy stacked
  // on an encoding keeps groups whole and marks what it evicts). null, or
  // [num_streams] entries each null or [StreamTokens(s)] flags; a slot whose
  // flag is 1 gets no attention (score -inf, weight 0, slot_attn 0).
  const uint8_t* const* dead = nullptr;
  const uint8_t* DeadFlags(int s) const { return dead == nullptr ? nullptr : dead[s]; }
  int64_t StreamTokens(int s) const {
    return static_cast<int64_t>(indptr[s + 1] - indptr[s]) * enc.tokens_per_block;
  }
  // Whether slot t (encoded or plain) of stream s is an evicted one.
  bool SlotDead(int s, int64_t t) const {
    const uint8_t* f = DeadFlags(s);
    return f != nullptr && t < StreamTokens(s) && f[t] != 0;
  }
  const uint8_t* Block(int s, int64_t i) const {
    return base + static_cast<int64_t>(indices[indptr[s] + i]) * block_bytes;
  }
};

}  // namespace kvlab
