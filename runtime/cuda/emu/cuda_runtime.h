// tcc's CUDA emulation stands in for the toolkit's cuda_runtime.h (see tcc_cuda_emu.h).
#include "tcc_cuda_emu.h"
