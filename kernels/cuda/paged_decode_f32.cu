// PagedDecodeKernel instantiations for f32 storage (see paged_decode_kernel.cuh).
#include "kernels/cuda/paged_decode_kernel.cuh"

namespace kvlab {
namespace cuda {
namespace detail {

DecodeKernelFn SelectDecodeKernelF32(int head_dim, int heads_per_thread) {
  return SelectByDim<float>(head_dim, heads_per_thread);
}

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
