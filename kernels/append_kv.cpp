#include "kernels/append_kv.h"

#include <string>

namespace kvlab {

Status AppendKVCheck(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads) {
  if (num_seqs < 0 || num_kv_heads <= 0 || kv.num_streams != num_seqs * num_kv_heads) {
    return Status::InvalidArgument("append_kv: cache has " + std::to_string(kv.num_streams) +
                                   " streams, expected num_seqs * num_kv_heads = " +
                                   std::to_string(num_seqs) + " * " + std::to_string(num_kv_heads));
  }
  if (qo_indptr == nullptr) return Status::InvalidArgument("append_kv: qo_indptr is null");
  for (int i = 0; i < num_seqs; ++i) {
    const int q_len = qo_indptr[i + 1] - qo_indptr[i];
    if (q_len < 0) return Status::InvalidArgument("append_kv: qo_indptr decreases at sequence " + std::to_string(i));
    for (int h = 0; h < num_kv_heads; ++h) {
      const int s = i * num_kv_heads + h;
      if (kv.StreamLength(s) < q_len) {
        return Status::InvalidArgument("append_kv: stream " + std::to_string(s) + " holds " +
                                       std::to_string(kv.StreamLength(s)) + " slots, fewer than the " +
                                       std::to_string(q_len) + " new tokens (reserve them first)");
      }
    }
  }
  return Status::OK();
}

void AppendKV(const PagedKV& kv, const int32_t* qo_indptr, int num_seqs, int num_kv_heads, const float* k,
              const float* v) {
  const int d = kv.head_dim;
  const int64_t total_rows = static_cast<int64_t>(qo_indptr[num_seqs]) * num_kv_heads;
  // Threads only pay off for prefill-sized appends; a decode step writes a few KB.
#pragma omp parallel for schedule(static) if (total_rows * d >= (1 << 18))
  for (int s = 0; s < num_seqs * num_kv_heads; ++s) {
    const int i = s / num_kv_heads, h = s % num_kv_heads;
    const int q_len = qo_indptr[i + 1] - qo_indptr[i];
    const int64_t first_slot = kv.StreamLength(s) - q_len;
    for (int j = 0; j < q_len; ++j) {
      const int64_t src = (static_cast<int64_t>(qo_indptr[i] + j) * num_kv_heads + h) * d;
      ConvertFromF32(kv.dtype, k + src, kv.KeyPtr(s, first_slot + j), d);
      ConvertFromF32(kv.dtype, v + src, kv.ValuePtr(s, first_slot + j), d);
    }
  }
}

}  // namespace kvlab
