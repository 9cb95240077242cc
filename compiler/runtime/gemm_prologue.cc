// The producer steps a small-M FP8 GEMM can take in as its prologue (gemm_prologue.h), and the
// session's pass that fuses them after every step is prepared.
#include "compiler/runtime/gemm_prologue.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "compiler/runtime/runtime.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace k = ::fxfuse::kernels;
namespace pb = ::fxfuse::plan::v1;

std::optional<GemmPrologueSource> NormPrologueSource(const k::RmsNormQuantFp8Params& q, int output_tensor) {
  if (q.scale.kind != k::Fp8ScaleKind::kStaticPerTensor || !q.scale.scale) return std::nullopt;
  if (q.num_tokens < 1 || q.num_tokens > kSmallMFp8PrologueMaxRows) return std::nullopt;
  k::RmsNormRowPartition part;
  if (!k::RmsNormQuantFp8RowPartition(q, &part).ok()) return std::nullopt;  // the scalar path
  GemmPrologueSource s;
  SmallMFp8PrologueParams& p = s.params;
  p.kind = SmallMFp8Prologue::kRmsNormQuant;
  p.dtype = q.dtype;
  p.input = q.input, p.input_row_stride = q.input_row_stride ? q.input_row_stride : q.hidden_size;
  p.residual = q.residual;
  p.residual_row_stride = q.residual_row_stride ? q.residual_row_stride : q.hidden_size;
  p.residual_unrounded = part.residual_unrounded;
  p.weight = q.weight;
  p.epsilon = q.epsilon;
  p.scale = q.scale.scale, p.divide = part.divide;
  p.norm_threads = part.threads, p.norm_vecs_per_thread = part.vecs_per_thread;
  s.output = q.output;
  s.output_row_stride = q.output_row_stride ? q.output_row_stride : q.hidden_size;
  s.output_tensor = output_tensor;
  return s;
}

std::optional<GemmPrologueSource> SiluPrologueSource(const k::SiluAndMulParams& q, int output_tensor) {
  if (q.output_dtype != DType::F8E4M3FN || !q.scale) return std::nullopt;
  if (q.num_tokens < 1 || q.num_tokens > kSmallMFp8PrologueMaxRows) return std::nullopt;
  GemmPrologueSource s;
  SmallMFp8PrologueParams& p = s.params;
  p.kind = SmallMFp8Prologue::kSiluAndMulQuant;
  p.dtype = q.dtype;
  p.input = q.input, p.input_row_stride = q.input_row_stride ? q.input_row_stride : 2 * q.hidden_size;
  p.scale = q.scale, p.divide = k::SiluAndMulScaleDivides(q);
  s.output = q.output;
  s.output_row_stride = q.output_row_stride ? q.output_row_stride : q.hidden_size;
  s.output_tensor = output_tensor;
  return s;
}

bool GemmPrologueFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_PROLOGUE");
  return !(v && std::string(v) == "0");
}

// Whether tensor `id` lives in an arena buffer that step `reader` is the last to read, and
// that no other operand of the matmul `mm` lies in: the value is then the matmul's alone and
// need not be written.
bool onlyTheGemmReads(const pb::Plan& plan, int id, int reader, const pb::Matmul& mm) {
  const int buffer = plan.tensors(id).buffer();
  const pb::Buffer& b = plan.buffers(buffer);
  if (b.kind() != pb::ARENA || b.last_step() != reader || mm.a() != id) return false;
  for (int other : {mm.b(), mm.c(), mm.d(), mm.bias(), mm.scale_a(), mm.scale_b(), mm.scale_d()})
    if (other >= 0 && plan.tensors(other).buffer() == buffer) return false;
  return true;
}

void Session::fuseGemmPrologues() {
  prologue_lines_.clear();
  if (!GemmPrologueFromEnv()) return;
  for (size_t si = 1; si < steps_.size(); ++si) {
    Prepared& producer = *steps_[si - 1];
    Prepared& gemm = *steps_[si];
    if (!producer.prologue_source || !gemm.own_gemm) continue;
    const GemmPrologueSource& source = *producer.prologue_source;
    SmallMFp8GemmParams p = *gemm.own_gemm;
    if (p.x != source.output || p.x_row_stride != source.output_row_stride || p.M > kSmallMFp8PrologueMaxRows ||
        !onlyTheGemmReads(plan_, source.output_tensor, static_cast<int>(si), plan_.steps(static_cast<int>(si)).matmul()))
      continue;
    p.prologue = source.params;
    if (p.prologue.residual) {
      void* arrivals = nullptr;
      cudaError_t e = cudaMalloc(&arrivals, sizeof(unsigned int));
      if (e == cudaSuccess) gemm.cleanup.push_back([arrivals] { cudaFree(arrivals); });
      if (e == cudaSuccess) e = cudaMemset(arrivals, 0, sizeof(unsigned int));
      if (e != cudaSuccess) fail("CUDA error in {}: {} (the prologue's arrival counter)", gemm.where, cudaGetErrorString(e));
      p.prologue.arrivals = static_cast<unsigned int*>(arrivals);
    }
    if (SmallMFp8GemmUnsupported(p)) continue;
    producer.run = [](cudaStream_t) {};
    launches_--;
    gemm.run = [p, where = gemm.where](cudaStream_t s) {
      if (const cudaError_t e = LaunchSmallMFp8Gemm(p, s); e != cudaSuccess)
        fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
    };
    prologue_lines_.push_back(fmt::format("{} into {}: {}", producer.where, gemm.where,
                                          p.prologue.kind == SmallMFp8Prologue::kRmsNormQuant ? "RMSNorm + quant"
                                                                                              : "SiLU-and-mul + quant"));
  }
}

}  // namespace fxfuse::runtime
