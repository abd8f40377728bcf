// paged_decode_q8_f32.cu compiled as C++ against the CUDA emulation (see kvlab_cuda_emu.h).
#include "kernels/cuda/paged_decode_q8_f32.cu"
