// select_topk.cu compiled as C++ against the CUDA emulation (see kvlab_cuda_emu.h).
#include "kernels/cuda/select_topk.cu"
