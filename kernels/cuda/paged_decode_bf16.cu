// PagedDecodeKernel and PagedDecodeTcKernel instantiations for bf16 storage (see paged_decode_kernel.cuh).
#include "kernels/cuda/paged_decode_kernel.cuh"
#include "kernels/cuda/paged_decode_tc.cuh"

namespace kvlab {
namespace cuda {
namespace detail {

DecodeKernelFn SelectDecodeKernelBF16(int head_dim, int heads_per_thread) {
  return SelectByDim<__nv_bfloat16>(head_dim, heads_per_thread);
}

DecodeKernelFn SelectDecodeKernelTcBF16(int head_dim) { return SelectTcByDim<__nv_bfloat16>(head_dim); }

}  // namespace detail
}  // namespace cuda
}  // namespace kvlab
