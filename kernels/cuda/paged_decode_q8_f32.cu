// PagedDecodeKernel instantiations for f32 storage with an int8 / fp8 encoded
// segment (see paged_decode_kernel.cuh).
#include "kernels/cuda/paged_decode_kernel.cuh"

namespace kvlab {
namespace cuda {
namespace detail {

DecodeKernelFn SelectDecodeKernelQ8F32(int head_dim, int heads_per_thread) {
  return SelectByDim<float, kEncQ8>(head_dim, heads_per_thread);
}

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
