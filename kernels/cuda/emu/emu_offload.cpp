// offload.cu compiled as C++ against the CUDA emulation (see kvlab_cuda_emu.h).
#include "kernels/cuda/offload.cu"
