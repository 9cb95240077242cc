// `fxfuse bench --timeline N [--trace FILE]`: the kernels of N CUDA graph replays as the GPU ran
// them (CUPTI, compiler/runtime/cupti_recorder.h), summarized per kernel name with the idle
// gaps between them (compiler/runtime/kernel_timeline.h); docs/runtime.md "Kernel timeline".
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "compiler/runtime/runtime.h"

namespace fxfuse::cli {

constexpr int kMaxTimelineReplays = 1000;  // ~100 MB of CUPTI records for a 32-layer decode step

// Records `replays` replays of the session's graph (captured again while recording), prints the
// summary on stdout, writes the median replay as a Chrome trace to `trace_path` when given,
// and returns the summary as a JSON object for `bench --json`. `untraced_us`: the median replay
// without the recorder, printed beside the traced one (what recording costs the step).
std::string printTimeline(runtime::Session& s, cudaStream_t stream, int replays, const std::string& trace_path,
                          double untraced_us);

}  // namespace fxfuse::cli
