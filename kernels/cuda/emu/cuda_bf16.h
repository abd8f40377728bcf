// Emulation stand-in for CUDA's <cuda_bf16.h> (see kvlab_cuda_emu.h).
#pragma once
#include "kernels/cuda/emu/kvlab_cuda_emu.h"
