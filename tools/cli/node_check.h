// Node-by-node proof for `fxfuse run --compare-cpu` (docs/runtime.md "Parity"): when a plan's
// outputs differ from the CPU reference, show whether every kernel is right on its own
// inputs and the difference is only rounding carried forward.
//
//   1. The compiled graph is lowered again with every node's tensor as an extra output
//      (no arena reuse), run on the GPU with the same inputs; its user outputs must equal
//      the checked plan's bit for bit (so what is proven about it holds for that plan).
//   2. The interpreter runs the compiled graph and, after each node, compares its value
//      with the GPU's value of that node computed from the same operands, then continues
//      with the GPU's value: every node is checked on the GPU's own inputs. A node passes
//      when each element is within one rounding step of its dtype (one bf16 ulp, one FP8
//      step, ...) or within 2^-12 of the reference's RMS (fp32 accumulation order).
//   3. The interpreter's compiled graph must match the original graph (the passes' own
//      equivalence) within the run's tolerances.
// Proven: 1, 2 and 3 hold. The GPU side is a callback, so the proof itself runs (and is
// tested) without a GPU.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/interpreter/compare.h"
#include "tools/interpreter/interpreter.h"
#include "passes/toolkit/options.h"
#include "proto/fxfuse_plan.pb.h"

namespace fxfuse::cli {

// Values of a plan's outputs (in plan order; nullopt for non-tensor outputs) on the inputs.
using PlanRunner = std::function<std::vector<std::optional<interp::Tensor>>(const fxfuse::plan::v1::Plan&)>;

// Elementwise comparison allowing one rounding step of the dtype.
struct StepDiff {
  int64_t elements = 0;
  int64_t differing = 0;  // not bit-identical
  int64_t beyond = 0;     // more than one rounding step apart (and above the RMS floor and `allowance`)
  int64_t within_allowance = 0;  // more than one step apart but within `allowance`
  double max_allowance_used = 0; // largest (difference - one step) / allowance among those
  double max_abs = 0;
  std::string samples;    // a few elements beyond: "[i] cpu X gpu Y"
  std::string note;       // shape or dtype mismatch
};
// `allowance` (optional, one per element, row-major): a further absolute difference allowed
// on top of one rounding step (the FP8 GEMM accumulation bound below).
StepDiff compareWithinOneStep(const interp::Tensor& ref, const interp::Tensor& got,
                              const std::vector<double>* allowance = nullptr);

// The accumulation bound of an FP8 GEMM on Hopper tensor cores, per output element:
//   s_a[i] * s_b[j] * (K - 1) * 2^-21 * sum_k |a[i,k] * b[k,j]|
// the classical bound of a K-term recursive sum whose accumulator keeps 21 bits and
// truncates. Hopper's FP8 MMA accumulates with fewer bits than fp32 (DeepSeek-V3 report,
// section 3.3.2); on the H200 the differences from the exact sum reached 1.25x the bound of a
// truncating fp32 (23-bit) accumulator, so 21 bits leaves a margin of 3x or more. A wrong
// element read, by contrast, is off by about sum_k |a*b| / K, 2^13/K times more (K = 256).
// a: [M, K] FP8 values, b: [K, N]; scales per tensor (one value) or per row/column.
std::vector<double> fp8GemmAllowance(const interp::Tensor& a, const interp::Tensor& b, const interp::Tensor& scale_a,
                                     const interp::Tensor& scale_b);

// The rounding of the sm90 attention kernels (kernels/attention, docs/attention.md "FP8
// output"), per output element in output units:
//   (2 * u_in + u_mid) * sum_j P[i,j] |v[j,d]| / s
// P is rounded to the input dtype before P·V (relative error at most u_in = 2^-(mantissa
// bits + 1) per term, so at most u_in * sum_j P|v| on the sum; at most u_in * |o| <= u_in *
// sum_j P|v| more when the row sum l is taken from the rounded P); FP8 output (`output_scale`
// s given) quantizes the fp32 value where the reference first rounds it to the input dtype
// (u_mid = u_in; without FP8 output u_mid = 0 and s = 1). The FP8 roundings themselves are the
// "one step" of compareWithinOneStep. A wrong key, head or row read changes an element by
// about sum_j P|v| itself, 2^8 / 3 times more. Computed with the interpreter's attention on
// |v|. Empty when the node is not fxfuse.attention / fxfuse.attention_quant.
std::vector<double> sm90AttentionAllowance(const ir::Node& n, const interp::Tensor& q, const interp::Tensor& k,
                                           const interp::Tensor& v, const interp::Tensor* output_scale);

// Every tensor a node of the entry graph produces becomes an extra graph output (after the
// user outputs), so a plan keeps it and its GPU value can be read back.
void exposeEveryNode(ir::Module& m);

// One rounding step of `dtype` at magnitude |x| (the spacing of representable values there).
double roundingStep(double x, ir::DType dtype);

struct RankLink;  // node_check_collective.h

struct NodeProof {
  bool proven = false;
  std::string report;  // lines for the user, each ending in '\n'
};

// `graph_path` compiled with `co`; `io`: the interpreter options of the end-to-end run (binds,
// seed, world size); `inputs`: the run's inputs; `ref_original`: the interpreter's outputs of
// the original graph; `checked_outputs`: the checked plan's outputs (user outputs, plan order).
// `ranks` (world size > 1, every rank calls this together): collective nodes are checked on
// all ranks' GPU inputs, the compiled graph's reference is the lockstep one
// (node_check_collective.h).
NodeProof proveByNodes(const std::string& graph_path, const compiler::CompileOptions& co, const interp::Options& io,
                       const std::vector<interp::RValue>& inputs, const std::vector<interp::RValue>& ref_original,
                       const std::vector<std::optional<interp::Tensor>>& checked_outputs, const PlanRunner& run_plan,
                       const interp::CompareOptions& tolerance, const RankLink* ranks = nullptr);

}  // namespace fxfuse::cli
