// Encoders and decoders of sealed KV blocks: the specification that the
// attention kernels' fused dequantization must agree with.
#include "kernels/kv_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kvlab {

namespace {

// OCP FP8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity;
// 0x7f / 0xff are NaN; largest finite 448.
float Fp8ToF32(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 7;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-6 / 8
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return sign ? -v : v;
}

struct Fp8Table {
  float value[128];  // non-negative finite codes 0..126 in increasing order (127 is NaN)
  Fp8Table() {
    for (int i = 0; i < 128; ++i) value[i] = Fp8ToF32(static_cast<uint8_t>(i));
  }
};
const Fp8Table& Fp8Values() {
  static const Fp8Table t;
  return t;
}

// Round to nearest, ties to the even code, saturating at 448.
uint8_t F32ToFp8(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  const Fp8Table& t = Fp8Values();
  if (!(a < 448.0f)) return sign | 126;  // saturate (also NaN -> max; inputs are finite here)
  const float* hi = std::upper_bound(t.value, t.value + 127, a);
  const int u = static_cast<int>(hi - t.value);  // first code with value > a (1..126)
  const int l = u - 1;
  const float dl = a - t.value[l], du = t.value[u] - a;
  int code = dl < du ? l : (du < dl ? u : ((l & 1) == 0 ? l : u));
  return sign | static_cast<uint8_t>(code);
}

inline void PutCode(uint8_t* codes, int bits, int64_t i, uint32_t q) {
  const int per_byte = 8 / bits;
  codes[i / per_byte] |= static_cast<uint8_t>(q << ((i % per_byte) * bits));
}
inline uint32_t GetCode(const uint8_t* codes, int bits, int64_t i) {
  const int per_byte = 8 / bits;
  return (codes[i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1u);
}

// KIVI asymmetric quantization of x [T][D] along `axis` with groups of
// `group`, writing codes and fp16 (scale, zero) pairs.
void KiviEncode(const KvEncoding& e, QuantAxis axis, const float* x, uint8_t* codes, uint16_t* scales,
                uint16_t* zeros) {
  const int T = e.tokens_per_block, D = e.head_dim, bits = e.bits;
  const float qmax = static_cast<float>((1 << bits) - 1);
  std::memset(codes, 0, static_cast<size_t>(e.CodeBytes()));
  // A quantization group is a set of (t, c) indices; enumerate them by axis.
  const int num_groups = axis == QuantAxis::kChannel ? D : T * (D / e.group);
  for (int g = 0; g < num_groups; ++g) {
    int t0, t1, c0, c1;
    if (axis == QuantAxis::kChannel) {
      t0 = 0, t1 = T, c0 = g, c1 = g + 1;
    } else {
      const int per_tok = D / e.group;
      t0 = g / per_tok, t1 = t0 + 1, c0 = (g % per_tok) * e.group, c1 = c0 + e.group;
    }
    float mn = INFINITY, mx = -INFINITY;
    for (int t = t0; t < t1; ++t)
      for (int c = c0; c < c1; ++c) mn = std::min(mn, x[t * D + c]), mx = std::max(mx, x[t * D + c]);
    // Quantize with the fp16-rounded parameters the decoder will use.
    const uint16_t zh = F32ToF16(mn), sh = F32ToF16((mx - mn) / qmax);
    const float zero = F16ToF32(zh), scale = F16ToF32(sh);
    scales[g] = sh;
    zeros[g] = zh;
    for (int t = t0; t < t1; ++t) {
      for (int c = c0; c < c1; ++c) {
        float q = scale > 0 ? std::nearbyint((x[t * D + c] - zero) / scale) : 0.0f;
        q = std::min(std::max(q, 0.0f), qmax);
        PutCode(codes, bits, static_cast<int64_t>(t) * D + c, static_cast<uint32_t>(q));
      }
    }
  }
}

void KiviDecode(const KvEncoding& e, QuantAxis axis, const uint8_t* codes, const uint16_t* scales,
                const uint16_t* zeros, float* x) {
  const int T = e.tokens_per_block, D = e.head_dim;
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < D; ++c) {
      const int g = axis == QuantAxis::kChannel ? c : t * (D / e.group) + c / e.group;
      x[t * D + c] = static_cast<float>(GetCode(codes, e.bits, static_cast<int64_t>(t) * D + c)) * F16ToF32(scales[g]) +
                     F16ToF32(zeros[g]);
    }
  }
}

// Symmetric 8-bit (int8 or fp8) with absmax scales per token row or per block.
void Sym8Encode(const KvEncoding& e, const float* x, uint8_t* codes, uint16_t* scales) {
  const int T = e.tokens_per_block, D = e.head_dim;
  const float qmax = e.kind == EncodingKind::kInt8 ? 127.0f : 448.0f;
  const int rows_per_scale = e.scale_per_token ? 1 : T;
  for (int r0 = 0; r0 < T; r0 += rows_per_scale) {
    float amax = 0;
    for (int i = r0 * D; i < (r0 + rows_per_scale) * D; ++i) amax = std::max(amax, std::fabs(x[i]));
    const uint16_t sh = F32ToF16(amax / qmax);
    float scale = F16ToF32(sh);
    scales[r0 / rows_per_scale] = sh;
    for (int i = r0 * D; i < (r0 + rows_per_scale) * D; ++i) {
      const float y = scale > 0 ? x[i] / scale : 0.0f;
      if (e.kind == EncodingKind::kInt8) {
        const float q = std::min(std::max(std::nearbyint(y), -127.0f), 127.0f);
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        codes[i] = F32ToFp8(y);
      }
    }
  }
}

void Sym8Decode(const KvEncoding& e, const uint8_t* codes, const uint16_t* scales, float* x) {
  const int T = e.tokens_per_block, D = e.head_dim;
  const int rows_per_scale = e.scale_per_token ? 1 : T;
  for (int i = 0; i < T * D; ++i) {
    const float scale = F16ToF32(scales[(i / D) / rows_per_scale]);
    const float q = e.kind == EncodingKind::kInt8 ? static_cast<float>(static_cast<int8_t>(codes[i]))
                                                  : Fp8ToF32(codes[i]);
    x[i] = q * scale;
  }
}

// ThinK: the block's key_channels highest-energy key channels (ties to the
// lower channel) and every value channel, at e.dtype, then the mask words.
int64_t ThinkMaskWords(const KvEncoding& e) { return (e.head_dim + 31) / 32; }

void ThinkEncode(const KvEncoding& e, const float* k, const float* v, uint8_t* dst) {
  const int T = e.tokens_per_block, D = e.head_dim, kept = e.key_channels;
  const int64_t nb = DTypeBytes(e.dtype);
  std::vector<double> energy(static_cast<size_t>(D), 0.0);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < D; ++c) energy[static_cast<size_t>(c)] += static_cast<double>(k[t * D + c]) * k[t * D + c];
  std::vector<int> order(static_cast<size_t>(D));
  for (int c = 0; c < D; ++c) order[static_cast<size_t>(c)] = c;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return energy[static_cast<size_t>(a)] > energy[static_cast<size_t>(b)]; });
  std::vector<uint32_t> mask(static_cast<size_t>(ThinkMaskWords(e)), 0u);
  for (int i = 0; i < kept; ++i) {
    const int c = order[static_cast<size_t>(i)];
    mask[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
  }
  std::vector<float> row(static_cast<size_t>(kept));
  uint8_t* kd = dst;
  for (int t = 0; t < T; ++t) {
    int j = 0;
    for (int c = 0; c < D; ++c) {
      if ((mask[static_cast<size_t>(c / 32)] >> (c % 32)) & 1u) row[static_cast<size_t>(j++)] = k[t * D + c];
    }
    ConvertFromF32(e.dtype, row.data(), kd + t * kept * nb, kept);
  }
  ConvertFromF32(e.dtype, v, dst + e.CodeBytes(), static_cast<int64_t>(T) * D);
  std::memcpy(dst + e.CodeBytes() + static_cast<int64_t>(T) * D * nb, mask.data(), mask.size() * sizeof(uint32_t));
}

void ThinkDecode(const KvEncoding& e, const uint8_t* src, float* k, float* v) {
  const int T = e.tokens_per_block, D = e.head_dim, kept = e.key_channels;
  const int64_t nb = DTypeBytes(e.dtype);
  std::vector<uint32_t> mask(static_cast<size_t>(ThinkMaskWords(e)));
  std::memcpy(mask.data(), src + e.CodeBytes() + static_cast<int64_t>(T) * D * nb, mask.size() * sizeof(uint32_t));
  std::vector<float> row(static_cast<size_t>(kept));
  for (int t = 0; t < T; ++t) {
    ConvertToF32(e.dtype, src + t * kept * nb, row.data(), kept);
    int j = 0;
    for (int c = 0; c < D; ++c) {
      const bool on = (mask[static_cast<size_t>(c / 32)] >> (c % 32)) & 1u;
      k[t * D + c] = on && j < kept ? row[static_cast<size_t>(j++)] : 0.0f;
    }
  }
  ConvertToF32(e.dtype, src + e.CodeBytes(), v, static_cast<int64_t>(T) * D);
}

}  // namespace

uint32_t ThinkKeptMaskWord(const KvEncoding& e, const uint8_t* block, int word) {
  uint32_t w;
  std::memcpy(&w, block + e.CodeBytes() + static_cast<int64_t>(e.tokens_per_block) * e.head_dim * DTypeBytes(e.dtype) +
                      static_cast<int64_t>(word) * 4,
              sizeof w);
  return w;
}

void KiviKeyRange(const KvEncoding& e, const uint8_t* block, float* lo, float* hi) {
  const int D = e.head_dim;
  const float qmax = static_cast<float>((1 << e.bits) - 1);
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(block + 2 * e.CodeBytes());
  const uint16_t* zeros = scales + e.NumKeyParams();
  if (e.key_axis == QuantAxis::kChannel) {
    for (int c = 0; c < D; ++c) {
      const float z = F16ToF32(zeros[c]);
      lo[c] = z;
      hi[c] = qmax * F16ToF32(scales[c]) + z;  // the decoder's expression at the top code
    }
    return;
  }
  const int per_tok = D / e.group;
  for (int t = 0; t < e.tokens_per_block; ++t) {
    for (int c = 0; c < D; ++c) {
      const int g = t * per_tok + c / e.group;
      const float z = F16ToF32(zeros[g]), top = qmax * F16ToF32(scales[g]) + z;
      lo[c] = t == 0 ? z : std::min(lo[c], z);
      hi[c] = t == 0 ? top : std::max(hi[c], top);
    }
  }
}

int64_t KvEncoding::NumKeyParams() const {
  if (kind == EncodingKind::kThink) return 0;
  if (kind != EncodingKind::kKivi) return scale_per_token ? tokens_per_block : 1;
  return key_axis == QuantAxis::kChannel ? head_dim : static_cast<int64_t>(tokens_per_block) * (head_dim / group);
}

int64_t KvEncoding::NumValueParams() const {
  if (kind == EncodingKind::kThink) return 0;
  if (kind != EncodingKind::kKivi) return scale_per_token ? tokens_per_block : 1;
  return value_axis == QuantAxis::kChannel ? head_dim : static_cast<int64_t>(tokens_per_block) * (head_dim / group);
}

int64_t KvEncoding::CodeBytes() const {
  if (kind == EncodingKind::kThink) return static_cast<int64_t>(tokens_per_block) * key_channels * DTypeBytes(dtype);
  return static_cast<int64_t>(tokens_per_block) * head_dim * bits / 8; }

int64_t KvEncoding::BlockBytes() const {
  if (kind == EncodingKind::kThink) {
    const int64_t bytes =
        CodeBytes() + static_cast<int64_t>(tokens_per_block) * head_dim * DTypeBytes(dtype) + ThinkMaskWords(*this) * 4;
    return (bytes + 3) / 4 * 4;  // blocks of a pool stay 4-byte aligned
  }
  const int per_param = kind == EncodingKind::kKivi ? 4 : 2;  // fp16 scale (+ fp16 zero)
  return 2 * CodeBytes() + (NumKeyParams() + NumValueParams()) * per_param;
}

std::string KvEncoding::Validate() const {
  if (head_dim <= 0 || tokens_per_block <= 0) return "encoding: head_dim and tokens_per_block must be positive";
  if (kind == EncodingKind::kKivi) {
    if (bits != 2 && bits != 4) return "kivi: 'bits' must be 2 or 4, got " + std::to_string(bits);
    if (group <= 0) return "kivi: 'group' must be positive, got " + std::to_string(group);
    if (tokens_per_block != group) return "kivi: encoded blocks hold exactly 'group' tokens";
    if ((key_axis == QuantAxis::kToken || value_axis == QuantAxis::kToken) && head_dim % group != 0) {
      return "kivi: 'group' " + std::to_string(group) + " must divide the head dimension " + std::to_string(head_dim) +
             " for per-token quantization";
    }
    if ((static_cast<int64_t>(tokens_per_block) * head_dim * bits) % 8 != 0) return "kivi: block codes are not whole bytes";
  } else if (kind == EncodingKind::kThink) {
    if (key_channels < 1 || key_channels > head_dim) {
      return "think: kept key channels must be in [1, head_dim " + std::to_string(head_dim) + "], got " +
             std::to_string(key_channels);
    }
  } else if (bits != 8) {
    return "quant: 'bits' must be 8 for int8 and fp8, got " + std::to_string(bits);
  }
  return "";
}

bool KvEncoding::Int8AttentionShape() const {
  return kind == EncodingKind::kKivi && bits == 2 && group == 32 && tokens_per_block == group && head_dim == 128 &&
         key_axis == QuantAxis::kChannel && value_axis == QuantAxis::kToken;
}

std::string KvEncoding::Describe() const {
  if (kind == EncodingKind::kKivi) {
    return "kivi" + std::to_string(bits) + "-g" + std::to_string(group) + "-k" +
           (key_axis == QuantAxis::kChannel ? "channel" : "token") + "-v" +
           (value_axis == QuantAxis::kChannel ? "channel" : "token");
  }
  if (kind == EncodingKind::kThink) {
    return std::string("think-k") + std::to_string(key_channels) + "of" + std::to_string(head_dim) + "-" + DTypeName(dtype);
  }
  return std::string(kind == EncodingKind::kInt8 ? "int8" : "fp8") + (scale_per_token ? "-token" : "-block");
}

void EncodeKvBlock(const KvEncoding& e, const float* k, const float* v, uint8_t* dst) {
  if (e.kind == EncodingKind::kThink) {
    ThinkEncode(e, k, v, dst);
    return;
  }
  uint8_t* kc = dst;
  uint8_t* vc = dst + e.CodeBytes();
  uint16_t* params = reinterpret_cast<uint16_t*>(dst + 2 * e.CodeBytes());
  if (e.kind == EncodingKind::kKivi) {
    const int64_t nk = e.NumKeyParams(), nv = e.NumValueParams();
    KiviEncode(e, e.key_axis, k, kc, params, params + nk);
    KiviEncode(e, e.value_axis, v, vc, params + 2 * nk, params + 2 * nk + nv);
  } else {
    Sym8Encode(e, k, kc, params);
    Sym8Encode(e, v, vc, params + e.NumKeyParams());
  }
}

void DecodeKvBlock(const KvEncoding& e, const uint8_t* src, float* k, float* v) {
  if (e.kind == EncodingKind::kThink) {
    ThinkDecode(e, src, k, v);
    return;
  }
  const uint8_t* kc = src;
  const uint8_t* vc = src + e.CodeBytes();
  const uint16_t* params = reinterpret_cast<const uint16_t*>(src + 2 * e.CodeBytes());
  if (e.kind == EncodingKind::kKivi) {
    const int64_t nk = e.NumKeyParams(), nv = e.NumValueParams();
    KiviDecode(e, e.key_axis, kc, params, params + nk, k);
    KiviDecode(e, e.value_axis, vc, params + 2 * nk, params + 2 * nk + nv, v);
  } else {
    Sym8Decode(e, kc, params, k);
    Sym8Decode(e, vc, params + e.NumKeyParams(), v);
  }
}

}  // namespace kvlab
