// append_kv.cu compiled as C++ against the CUDA emulation (see kvlab_cuda_emu.h).
#include "kernels/cuda/append_kv.cu"
