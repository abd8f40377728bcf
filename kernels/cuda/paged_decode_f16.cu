// PagedDecodeKernel and PagedDecodeTcKernel instantiations for f16 storage (see paged_decode_kernel.cuh).
#include "kernels/cuda/paged_decode_kernel.cuh"
#include "kernels/cuda/paged_decode_tc.cuh"

namespace kvlab {
namespace cuda {
namespace detail {

DecodeKernelFn SelectDecodeKernelF16(int head_dim, int heads_per_thread) {
  return SelectByDim<__half>(head_dim, heads_per_thread);
}

DecodeKernelFn SelectDecodeKernelTcF16(int head_dim) { return SelectTcByDim<__half>(head_dim); }

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
