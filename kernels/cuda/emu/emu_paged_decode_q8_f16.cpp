// paged_decode_q8_f16.cu compiled as C++ against the CUDA emulation (see kvlab_cuda_emu.h).
#include "kernels/cuda/paged_decode_q8_f16.cu"
