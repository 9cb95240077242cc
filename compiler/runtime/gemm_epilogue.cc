// The gated-SiLU steps a small-M gate/up GEMM can take in as its epilogue (gemm_epilogue.h),
// and the session's pass that fuses them once every step is prepared.
#include "compiler/runtime/gemm_epilogue.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/runtime.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace k = ::fxfuse::kernels;
namespace pb = ::fxfuse::plan::v1;

std::optional<GatedSiluStep> GatedSiluOf(const k::SiluAndMulParams& q, int input_tensor, int output_tensor) {
  if (q.output_dtype != DType::F8E4M3FN || !q.scale) return std::nullopt;
  GatedSiluStep s;
  s.epilogue.out = q.output;
  s.epilogue.out_row_stride = q.output_row_stride ? q.output_row_stride : q.hidden_size;
  s.epilogue.scale = q.scale;
  s.epilogue.divide = k::SiluAndMulScaleDivides(q);
  s.input = q.input;
  s.input_row_stride = q.input_row_stride ? q.input_row_stride : 2 * q.hidden_size;
  s.num_tokens = q.num_tokens, s.d = q.hidden_size, s.dtype = q.dtype;
  s.input_tensor = input_tensor, s.output_tensor = output_tensor;
  return s;
}

bool GemmEpilogueFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_EPILOGUE");
  return !(v && std::string(v) == "0");
}

void Session::fuseGemmEpilogues() {
  epilogue_lines_.clear();
  if (!GemmEpilogueFromEnv()) return;
  for (size_t si = 0; si + 1 < steps_.size(); ++si) {
    Prepared& gemm = *steps_[si];
    Prepared& silu = *steps_[si + 1];
    if (!gemm.own_gemm || !silu.gated_silu) continue;
    const GatedSiluStep& g = *silu.gated_silu;
    SmallMFp8GemmParams p = *gemm.own_gemm;
    const pb::Step& st = plan_.steps(static_cast<int>(si));
    if (g.input != p.out || g.input_row_stride != p.out_row_stride || g.num_tokens != p.M || 2 * g.d != p.N ||
        g.dtype != p.out_dtype || g.input_tensor != st.matmul().d() ||
        !lowering::onlyNextStepReads(plan_, static_cast<int>(si), g.input_tensor, g.output_tensor))
      continue;
    p.gated_silu = g.epilogue;
    // A block of the gated kernel holds gate/up pairs, so it takes fewer K slices: a count timed
    // for the plain GEMM that it cannot take falls back to the kernel's rule.
    const std::vector<int> splits = SmallMFp8GemmSplitChoices(p);
    if (std::find(splits.begin(), splits.end(), p.splits) == splits.end()) p.splits = 0;
    if (SmallMFp8GemmUnsupported(p)) continue;
    gemm.own_gemm = p;  // what the step launches now
    gemm.run = [p, where = gemm.where](cudaStream_t s) {
      if (const cudaError_t e = LaunchSmallMFp8Gemm(p, s); e != cudaSuccess)
        fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
    };
    silu.run = [](cudaStream_t) {};
    launches_--;
    epilogue_lines_.push_back(fmt::format("{} into {}", silu.where, gemm.where));
  }
}

}  // namespace fxfuse::runtime
