// Loads the launch plan compiled at build time (load_model_plan() from fxfuse_plan) and runs
// it once on zeroed inputs; without a usable GPU it says why and exits 2.
#include <cstdio>
#include <exception>
#include <vector>

#include "app/model_plan.h"

namespace rt = fxfuse::runtime;

int main() {
  std::string why = rt::deviceProblem();
  if (!why.empty()) {
    std::fprintf(stderr, "app: cannot run on the GPU: %s\n", why.c_str());
    return 2;
  }
  try {
    auto prog = load_model_plan();
    rt::Session s(*prog);
    s.bind({{"s0", 8}});
    std::vector<void*> buffers;
    for (int i = 0; i < prog->plan().inputs_size(); ++i) {
      rt::DeviceTensor t = s.tensor(prog->plan().inputs(i).tensor());
      void* p = nullptr;
      size_t bytes = static_cast<size_t>(t.numel()) * 4;  // widest input dtype: f32
      if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
        std::fprintf(stderr, "app: cannot allocate input %d\n", i);
        return 2;
      }
      s.setInput(static_cast<size_t>(i), p);
      buffers.push_back(p);
    }
    s.run(nullptr);
    if (cudaStreamSynchronize(nullptr) != cudaSuccess) {
      std::fprintf(stderr, "app: the plan failed on the GPU\n");
      return 2;
    }
    for (void* p : buffers) cudaFree(p);
    std::printf("app: ok (%d launches per run)\n", s.launchesPerRun());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "app: error: %s\n", e.what());
    return 2;
  }
}
