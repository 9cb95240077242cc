// Launch shape of the fused all-reduce + RMSNorm kernels, for the simulated-rank harness (which
// must keep the kernels of all ranks sharing one GPU resident at once) and the benchmark.
#ifndef FXFUSE_KERNELS_ALLREDUCE_LAUNCH_INFO_H_
#define FXFUSE_KERNELS_ALLREDUCE_LAUNCH_INFO_H_

#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::kernels::allreduce {

// For the call `params` (which must resolve to a fused algorithm): threads per CTA, CTAs of
// that kernel resident per multiprocessor (occupancy API) and the multiprocessor count.
Status FusedLaunchShape(const AllReduceRmsNormParams& params, int* threads, int* ctas_per_sm, int* sm_count);

}  // namespace fxfuse::kernels::allreduce

#endif  // FXFUSE_KERNELS_ALLREDUCE_LAUNCH_INFO_H_
