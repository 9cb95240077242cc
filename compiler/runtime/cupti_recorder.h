// Records every kernel the GPU runs, CUDA graph nodes included, with CUPTI's activity API in
// its concurrent-kernel mode (kernels that overlap stay overlapping: programmatic dependent
// launch is seen as it runs). CUPTI is opened with dlopen (cuda_libs.h), so fxfuse starts and
// runs without it; only `fxfuse bench --timeline` needs it. One recorder at a time per process.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/runtime/kernel_timeline.h"

namespace fxfuse::runtime {

class KernelRecorder {
 public:
  // Starts recording. Throws FxError when CUPTI cannot be loaded, is older than the headers
  // fxfuse was built with, or refuses (another profiler attached), or a recorder is live.
  KernelRecorder();
  ~KernelRecorder();
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  // CUPTI's clock, the one the spans are on (ns).
  uint64_t now() const;
  // Waits for the recorded kernels' records and returns all spans since the start. Throws when
  // CUPTI dropped records or gave some without valid times (a timeline with holes would be
  // wrong, not just short).
  std::vector<KernelSpan> collect();
};

}  // namespace fxfuse::runtime
