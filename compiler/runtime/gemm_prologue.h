// Fusing the step that writes a GEMM's FP8 activations into the GEMM (the small-M FP8 kernel's
// prologue, kernels/runtime/small_m_fp8_prologue.cuh). The runtime does it when it prepares a
// plan, after each matmul step has chosen its kernel: a plan step is fused only when the GEMM
// after it runs fxfuse's own kernel with at most 8 rows, so the choice depends on the bound
// batch and on measurement and is not the lowering's to make.
//
//   step i:   lib.rms_norm_quant_fp8 (static scale)  ─┐ x (FP8), read by step i+1 only
//             or lib.silu_and_mul (FP8 output)        │
//   step i+1: matmul on the own small-M kernel      ◄─┘
//   becomes   step i: nothing;  step i+1: the GEMM computing x itself (same bits)
//
// docs/runtime.md "GEMM prologues" says when it applies and what it measured.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/rms_norm_quant_fp8.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "kernels/silu_and_mul.h"

namespace fxfuse::runtime {

// What a producer step lets a following small-M GEMM compute itself.
struct GemmPrologueSource {
  SmallMFp8PrologueParams params;  // without the arrival counter (the fusing session owns it)
  const void* output = nullptr;    // the FP8 activations the step writes
  int64_t output_row_stride = 0;   // bytes
  int output_tensor = -1;          // plan tensor of `output`
};

// The prologue of a lib.rms_norm_quant_fp8 / lib.silu_and_mul step with these (checked)
// params, or nullopt when the GEMM could not recompute it bit for bit: a dynamic scale, a
// non-FP8 output, rows the library kernel runs on its scalar path. Needs the device (the row
// partition depends on its multiprocessor count).
std::optional<GemmPrologueSource> NormPrologueSource(const kernels::RmsNormQuantFp8Params& q, int output_tensor);
std::optional<GemmPrologueSource> SiluPrologueSource(const kernels::SiluAndMulParams& q, int output_tensor);

// Whether sessions fuse prologues (unless $FXFUSE_GEMM_PROLOGUE=0).
bool GemmPrologueFromEnv();

}  // namespace fxfuse::runtime
