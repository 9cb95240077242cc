// The gated-SiLU and rotary cache-write steps a small-M GEMM can take in as its epilogue
// (gemm_epilogue.h), and the session's pass that fuses them once every step is prepared.
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

GemmEpilogues GemmEpiloguesFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_EPILOGUE");
  const std::string only = v ? v : "";
  if (only == "0") return {false, false};
  if (only == "all") return {true, true};
  if (only == "rotary") return {false, true};
  return {};  // unset, "1" or "silu"
}

namespace {

// The launch of a GEMM step that now does its epilogue too.
std::function<void(cudaStream_t)> fusedGemmRun(const SmallMFp8GemmParams& p, const std::string& where) {
  return [p, where](cudaStream_t s) {
    if (const cudaError_t e = LaunchSmallMFp8Gemm(p, s); e != cudaSuccess)
      fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
  };
}

}  // namespace

// The gated-SiLU form of step si + 1 as the epilogue of GEMM step si, or nullopt.
std::optional<SmallMFp8GemmParams> Session::gatedSiluEpilogue(size_t si) const {
  const Prepared& gemm = *steps_[si];
  const Prepared& silu = *steps_[si + 1];
  if (!gemm.own_gemm || !silu.gated_silu) return std::nullopt;
  const GatedSiluStep& g = *silu.gated_silu;
  SmallMFp8GemmParams p = *gemm.own_gemm;
  const pb::Step& st = plan_.steps(static_cast<int>(si));
  if (g.input != p.out || g.input_row_stride != p.out_row_stride || g.num_tokens != p.M || 2 * g.d != p.N ||
      g.dtype != p.out_dtype || g.input_tensor != st.matmul().d() ||
      !lowering::onlyNextStepReads(plan_, static_cast<int>(si), g.input_tensor, g.output_tensor))
    return std::nullopt;
  p.gated_silu = g.epilogue;
  // A block of the gated kernel holds gate/up pairs, so it takes fewer K slices, and a wgmma
  // tile of 128 rows only a d of whole 64-row halves: a split or tile height timed for the plain
  // GEMM that it cannot take falls back to the kernel's rule.
  const std::vector<int> splits = SmallMFp8GemmSplitChoices(p);
  if (std::find(splits.begin(), splits.end(), p.splits) == splits.end()) p.splits = 0;
  const std::vector<int> rows = SmallMFp8GemmWgmmaTileChoices(p);
  if (std::find(rows.begin(), rows.end(), p.wgmma_tile_rows) == rows.end()) p.wgmma_tile_rows = 0;
  if (SmallMFp8GemmUnsupported(p)) return std::nullopt;
  return p;
}

void Session::fuseGemmEpilogues() {
  epilogue_lines_.clear();
  const GemmEpilogues enabled = GemmEpiloguesFromEnv();
  for (size_t si = 0; si + 1 < steps_.size(); ++si) {
    Prepared& gemm = *steps_[si];
    Prepared& next = *steps_[si + 1];
    if (!gemm.own_gemm) continue;
    auto fuse = [&](const SmallMFp8GemmParams& p, FusedEpilogue::Kind kind) {
      gemm.own_gemm = p;  // what the step launches now
      gemm.run = fusedGemmRun(p, gemm.where);
      next.run = [](cudaStream_t) {};
      launches_--;
      epilogue_lines_.push_back({kind, fmt::format("{} into {}", next.where, gemm.where), true});
    };
    if (enabled.gated_silu) {
      if (const std::optional<SmallMFp8GemmParams> p = gatedSiluEpilogue(si)) {
        fuse(*p, FusedEpilogue::kGatedSilu);
        continue;
      }
    }
    if (!next.rotary_cache_write) continue;
    const std::optional<SmallMFp8GemmParams> p = SmallMFp8GemmWithRotaryCache(*gemm.own_gemm, *next.rotary_cache_write);
    if (!p) continue;
    if (enabled.rotary_cache)
      fuse(*p, FusedEpilogue::kRotaryCache);
    else  // said, not done: the user can ask for it
      epilogue_lines_.push_back({FusedEpilogue::kRotaryCache, fmt::format("{} into {}", next.where, gemm.where), false});
  }
}

}  // namespace fxfuse::runtime
