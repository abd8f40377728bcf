// Device-side pseudo-random fills for paged_decode_bench (benchmark support,
// not part of kvlab_cuda): gigabytes of cache data without a host round trip.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/base/dtype.h"
#include "kernels/kv_encoding.h"

namespace kvlab {
namespace cuda {

// n values uniform in [lo, hi) of dtype `dtype` at dst (a hash of seed and index).
cudaError_t FillUniform(DType dtype, void* dst, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

// num_blocks KIVI blocks of format `e` at dst (stride e.BlockBytes()): random
// codes, fp16 scales in [0.01, 0.1) and zeros in [-1, 0), so that decoded
// values are finite and spread like real keys and values.
cudaError_t FillKiviBlocks(const KvEncoding& e, uint8_t* dst, int64_t num_blocks, uint64_t seed, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvlab
