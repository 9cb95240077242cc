// Runs the build-time-compiled decoder layer plan (load_decoder_plan(), from the
// fxfuse_plan macro): random inputs, one run, CUDA graph capture, replays, output check.
//   decoder_example [TOKENS]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "kernels/runtime/fill.h"
#include "compiler/runtime/runtime.h"
#include "examples/decoder_fp8/decoder_plan.h"

namespace rt = fxfuse::runtime;

int main(int argc, char** argv) {
  long long tokens = argc > 1 ? std::atoll(argv[1]) : 16;
  std::string why = rt::deviceProblem();
  if (!why.empty()) {
    std::fprintf(stderr, "decoder_example: cannot run on the GPU: %s\n", why.c_str());
    return 2;
  }
  try {
    auto prog = load_decoder_plan();
    rt::Session s(*prog);
    s.bind({{"s0", tokens}});
    std::vector<void*> bufs;
    const auto& plan = prog->plan();
    for (int i = 0; i < plan.inputs_size(); ++i) {
      rt::DeviceTensor t = s.tensor(plan.inputs(i).tensor());
      long long span = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) span += (t.shape[d] - 1) * t.strides[d];
      void* p = nullptr;
      int bytes = t.dtype == fxfuse::DType::F8E4M3FN ? 1 : t.dtype == fxfuse::DType::I64 ? 8
                  : t.dtype == fxfuse::DType::F32 ? 4 : 2;
      if (cudaMalloc(&p, static_cast<size_t>(span * bytes)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
      if (rt::FillRandom(p, span, t.dtype, 7u + static_cast<unsigned>(i), nullptr) != cudaSuccess)
        throw std::runtime_error("fill");
      s.setInput(static_cast<size_t>(i), p);
      bufs.push_back(p);
    }
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    s.run(stream);
    s.capture(stream);
    for (int i = 0; i < 10; ++i) s.replay(stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("run failed");
    rt::DeviceTensor out = s.output(0);
    std::vector<unsigned short> host(static_cast<size_t>(out.numel()));
    cudaMemcpy(host.data(), out.data, host.size() * 2, cudaMemcpyDeviceToHost);
    long long nan = 0;
    for (unsigned short b : host)
      if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) ++nan;
    std::printf("decoder_example: %lld tokens, %d launches per run, arena %lld bytes, output %lld elements, %lld NaN\n",
                tokens, s.launchesPerRun(), static_cast<long long>(s.arenaBytes()), static_cast<long long>(out.numel()), nan);
    for (void* p : bufs) cudaFree(p);
    if (nan) return 1;
    std::printf("decoder_example: ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decoder_example: error: %s\n", e.what());
    return 2;
  }
}
