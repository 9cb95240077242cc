// fxfuse's memory-bound CUDA kernels: one params struct and one entry point per family.
#ifndef FXFUSE_KERNELS_KERNELS_H_
#define FXFUSE_KERNELS_KERNELS_H_

#include "kernels/quant_fp8.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"
#include "kernels/silu_and_mul.h"
#include "kernels/status.h"
#include "kernels/types.h"

#endif  // FXFUSE_KERNELS_KERNELS_H_
