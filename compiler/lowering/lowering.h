// Lowering: a compiled graph (fxfuse canonical/fused ops plus whatever ATen remains) to a
// launch plan (proto/fxfuse_plan.proto). docs/plans.md describes the result.
//
// Every node becomes a step or an alias:
//   * fxfuse canonical and fused ops -> the kernel families of kernels/ (lib.*) when their
//     contract covers the dtypes and layouts, else generated code computing the same math;
//   * mm / addmm / linear / bmm / matmul / _scaled_mm -> cuBLASLt matmul steps;
//   * views -> TensorRefs on the same buffer with new strides (no copy) where the layout
//     allows, else index remaps inside generated kernels;
//   * attention (fxfuse.attention[_quant], SDPA and its variants) -> rt.attention;
//   * all_reduce -> identity at world size 1, an NCCL collective step otherwise;
//   * everything else -> generated CUDA C++ (codegen.h), chains fused into one kernel each.
// Then the memory planner assigns arena offsets by liveness.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "proto/fxfuse_plan.pb.h"
#include "ir/world_size.h"

namespace fxfuse::lowering {

struct LowerOptions {
  int world_size = kDefaultWorldSize;
  int64_t alignment = 256;
  // Use kernels/ for fxfuse ops where their contract fits (false: generated code only).
  bool library_kernels = true;
  // Fuse generated ops into groups (false: one kernel per op; for debugging).
  bool fuse = true;
  std::string source;  // recorded in the plan, and the first word of every refusal
  // Why the passes left a node alone (compiler::firstReasonLeftByNode): a refusal of a node
  // lowering has no rule for carries it.
  std::map<std::string, std::string> reasons_left_by_passes;
};

struct LowerStats {
  int64_t steps = 0;
  int64_t launches = 0;     // kernel launches + matmuls + collectives (what a replay runs)
  int64_t library = 0;
  int64_t generated = 0;
  int64_t matmuls = 0;
  int64_t attention = 0;
  int64_t collectives = 0;
  int64_t copies = 0;
  int64_t aliases = 0;      // view nodes that became TensorRefs without a step
  int64_t fused_nodes = 0;  // graph nodes inside generated kernels
};

fxfuse::plan::v1::Plan lowerModule(ir::Module& m, const LowerOptions& opts, LowerStats* stats = nullptr);

// Reading and writing plans. savePlan: `.txt` / `.pbtxt` = protobuf text, anything else
// binary; loadPlan and isPlanFile tell text from binary (and plans from graphs) by content
// (ir/sniff.h). Errors are FxErrors naming the file.
void savePlan(const fxfuse::plan::v1::Plan& p, const std::string& path);
fxfuse::plan::v1::Plan loadPlan(const std::string& path);
bool isPlanFile(const std::string& path);
fxfuse::plan::v1::Plan parsePlan(const std::string& bytes, bool text, const std::string& source);
std::string planToText(const fxfuse::plan::v1::Plan& p);
std::string planToBinary(const fxfuse::plan::v1::Plan& p);

// Every TensorRef id step `s` names, as any operand (its required operands even when they are
// out of range; its optional ones unless -1, "none"): the one list of a step's tensors that the
// plan's structural checks and the runtime's step-order analyses read. Empty for an empty step.
std::vector<int> StepTensors(const fxfuse::plan::v1::Step& s);

// Every symbolic expression a plan holds that the runtime evaluates when it binds (the
// arena's sizes, tensor shapes, strides and offsets, buffer sizes and offsets, each step's
// sizes and launch shape), with where it sits ("tensor shape" and the tensor's index; -1 for
// the arena's). The ones the runtime always reads are visited even when absent (an absent
// expression does not read), the optional ones where present: parsePlan checks that each one
// reads.
void ForEachPlanSymExpr(const fxfuse::plan::v1::Plan& p,
                        const std::function<void(const fxfuse::ir::v1::SymExpr&, const char*, int)>& fn);

// Whether TensorRef `id` lives in memory that no step of the plan writes: an INPUT buffer that
// no MUTATION output names (a KV cache or another input updated in place is written; lowering
// writes inputs only through mutation outputs, and copies an input it would update otherwise).
// A kernel launched with programmatic dependent launch may read such memory before it waits
// for the kernels still running (docs/runtime.md); anything else only after. False for a
// malformed reference.
bool readOnlyInPlan(const fxfuse::plan::v1::Plan& p, int id);

// Whether TensorRef `id` lives in an arena buffer that step `writer` fills and step writer + 1
// alone reads, and that buffer is not where TensorRef `reader_out` (that step's output) lives:
// a runtime fusion of the two steps (docs/runtime.md "GEMM epilogues", "Attention prologues")
// need not write it at all. False for malformed references.
bool onlyNextStepReads(const fxfuse::plan::v1::Plan& p, int writer, int id, int reader_out);

// What one step does, in a few words ("matmul m=s0 n=4096 k=4096 fp8", a kernel's name).
std::string describeStep(const fxfuse::plan::v1::Step& s);
// One line per step, plus the arena report (used by `fxfuse run --describe` and tests).
std::string describePlan(const fxfuse::plan::v1::Plan& p);

// A dtype in a launch plan (fxfuse_ir.proto's DType): fails for dtypes plans do not hold
// (complex, the FNUZ and E8M0 FP8 forms, unsigned beyond U8); fromPlanDType maps those to
// DTYPE_UNSPECIFIED.
fxfuse::ir::v1::DType toPlanDType(ir::DType t);
ir::DType fromPlanDType(fxfuse::ir::v1::DType t);

// The op targets lowering has a rule for by name (matmuls, attention, empty, views, generated
// kernels), sorted: what the robustness sweeps give wrong arguments to. fxfuse and symbolic ops
// dispatch by namespace and are not listed.
std::vector<std::string> LoweredTargets();

}  // namespace fxfuse::lowering
