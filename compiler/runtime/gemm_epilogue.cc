// The gated-SiLU steps a small-M gate/up GEMM can take in as its epilogue (gemm_epilogue.h),
// and the session's pass that fuses them once every step is prepared.
#include "compiler/runtime/gemm_epilogue.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

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

std::optional<RowNormStep> RowNormOf(const k::RmsNormQuantFp8Params& q) {
  if (q.scale.kind != k::Fp8ScaleKind::kStaticPerTensor || !q.scale.scale) return std::nullopt;
  if (q.weight && q.weight_dtype != q.dtype) return std::nullopt;
  k::RmsNormRowPartition part;
  if (!k::RmsNormQuantFp8RowPartition(q, &part).ok()) return std::nullopt;
  RowNormStep s;
  SmallMFp8RowNorm& e = s.epilogue;
  e.out = q.output;
  e.out_row_stride = q.output_row_stride ? q.output_row_stride : q.hidden_size;
  e.residual = q.residual;
  e.residual_row_stride = q.residual_row_stride ? q.residual_row_stride : q.hidden_size;
  e.residual_unrounded = part.residual_unrounded;
  e.weight = q.weight;
  e.epsilon = q.epsilon;
  e.scale = q.scale.scale, e.divide = part.divide;
  e.norm_threads = part.threads, e.norm_vecs_per_thread = part.vecs_per_thread;
  s.input = q.input;
  s.input_row_stride = q.input_row_stride ? q.input_row_stride : q.hidden_size;
  s.num_tokens = q.num_tokens, s.hidden = q.hidden_size, s.dtype = q.dtype;
  return s;
}

bool GemmEpilogueFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_EPILOGUE");
  return !(v && std::string(v) == "0");
}

namespace {

// Whether the GEMM output `gemm_out` of step `writer` is the SiLU step's input, read by that
// step (writer + 1) only and no other operand of it: then it need not be written at all.
bool onlyTheSiluReads(const pb::Plan& plan, int writer, int gemm_out, const GatedSiluStep& silu) {
  if (silu.input_tensor != gemm_out) return false;
  const int buffer = plan.tensors(gemm_out).buffer();
  const pb::Buffer& b = plan.buffers(buffer);
  return b.kind() == pb::ARENA && b.last_step() == writer + 1 && plan.tensors(silu.output_tensor).buffer() != buffer;
}

// The GEMM of `gemm` with the gated-SiLU step `g` as its epilogue, or nullopt when it cannot.
std::optional<SmallMFp8GemmParams> withGatedSilu(const pb::Plan& plan, int si, SmallMFp8GemmParams p,
                                                 const GatedSiluStep& g) {
  if (g.input != p.out || g.input_row_stride != p.out_row_stride || g.num_tokens != p.M || 2 * g.d != p.N ||
      g.dtype != p.out_dtype || !onlyTheSiluReads(plan, si, plan.steps(si).matmul().d(), g))
    return std::nullopt;
  p.gated_silu = g.epilogue;
  return p;
}

// The GEMM with the row-norm step `n` as its epilogue (its output y is still written: the last
// CTA reads it, and so may later steps), or nullopt when it cannot.
std::optional<SmallMFp8GemmParams> withRowNorm(SmallMFp8GemmParams p, const RowNormStep& n) {
  if (n.input != p.out || n.input_row_stride != p.out_row_stride || n.num_tokens != p.M || n.hidden != p.N ||
      n.dtype != p.out_dtype)
    return std::nullopt;
  p.row_norm = n.epilogue;
  return p;
}

}  // namespace

void Session::fuseGemmEpilogues() {
  epilogue_lines_.clear();
  if (!GemmEpilogueFromEnv()) return;
  for (size_t si = 0; si + 1 < steps_.size(); ++si) {
    Prepared& gemm = *steps_[si];
    Prepared& next = *steps_[si + 1];
    if (!gemm.own_gemm) continue;
    std::optional<SmallMFp8GemmParams> fused;
    if (next.gated_silu) fused = withGatedSilu(plan_, static_cast<int>(si), *gemm.own_gemm, *next.gated_silu);
    if (next.row_norm) fused = withRowNorm(*gemm.own_gemm, *next.row_norm);
    if (!fused) continue;
    SmallMFp8GemmParams p = *fused;
    if (p.row_norm.out) {
      void* arrivals = nullptr;
      cudaError_t e = cudaMalloc(&arrivals, sizeof(unsigned int));
      if (e == cudaSuccess) gemm.cleanup.push_back([arrivals] { cudaFree(arrivals); });
      if (e == cudaSuccess) e = cudaMemset(arrivals, 0, sizeof(unsigned int));
      if (e != cudaSuccess) fail("CUDA error in {}: {} (the row-norm epilogue's counter)", gemm.where, cudaGetErrorString(e));
      p.row_norm.arrivals = static_cast<unsigned int*>(arrivals);
    }
    if (SmallMFp8GemmUnsupported(p)) continue;
    gemm.run = [p, where = gemm.where](cudaStream_t s) {
      if (const cudaError_t e = LaunchSmallMFp8Gemm(p, s); e != cudaSuccess)
        fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
    };
    next.run = [](cudaStream_t) {};
    launches_--;
    epilogue_lines_.push_back(
        fmt::format("{} into {} ({})", next.where, gemm.where, p.row_norm.out ? "row norm" : "gated SiLU"));
  }
}

}  // namespace fxfuse::runtime
