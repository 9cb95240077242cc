// CPU reference interpreter for fxfuse graphs (docs/interpreter.md).
//
// Runs the entry graph of a Module on concrete inputs: every ATen/prims op that appears
// in LLM graphs (post-grad and torch.export spellings), vLLM's custom ops (direct and
// through auto_functionalized v1/v2), fxfuse's canonical and fused ops, SymInt
// arithmetic and simulated collectives. Numerics are exact to the rounding step: each op
// computes in double, rounds to torch's opmath type (f32 for 16-bit and 8-bit floats) and
// then to the output dtype; matrix products go through OpenBLAS (dgemm) with one rounding
// of the result.
//
// Errors (unknown op, shape contradiction, index out of range) are FxErrors whose message
// names the graph, the node and its target.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tools/interpreter/kv_batch.h"
#include "tools/interpreter/value.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "ir/world_size.h"

namespace fxfuse::interp {

// Where vLLM's CUDA kernels and the canonical composition (docs/canonical-ops.md) differ
// in a rounding step, the fused op follows the composition by default; these switch to
// the kernel's numerics. (Differences that are attributes of an op, such as `divide` or
// `variance_of_rounded_sum`, are always taken from the node.)
struct NumericsOptions {
  // fxfuse.all_reduce_rms_norm(_quant): FlashInfer/TRT-LLM multiplies by gamma in f32 and
  // rounds once (semantics doc §5.5) instead of rounding the normalized value first.
  bool allreduce_norm_single_rounding = false;
  // fxfuse.attention_quant: vLLM's Triton epilogue quantizes the f32 accumulator without
  // the model-dtype rounding of the unfused chain (§5.6).
  bool attention_quant_skips_rounding = false;
};

class RankGroup;  // lockstep.h

struct Options {
  std::map<std::string, int64_t> bind;  // --bind s0=37
  int64_t default_symbol_size = 16;     // free symbols with no bind, hint or forced size
  int world_size = kDefaultWorldSize;   // ranks of a simulated all_reduce
  // Lockstep tensor parallelism (lockstep.h): this interpreter is rank `rank` of `collective`;
  // all-reduces sum the ranks' own values. Activation inputs of makeInputs() depend on the
  // rank (rank 0 gets the single-rank values), weights, scales and indices do not.
  std::shared_ptr<RankGroup> collective;
  int rank = 0;
  uint64_t seed = 0;
  std::string graph;                    // the graph to run (default: the module's first)
  NumericsOptions numerics;
  // The serving batch of graphs with fxfuse.paged_attention (kv_batch.h).
  KvBatchOptions kv;
  // Called with each node output the interpreter computed, before later nodes read it; may
  // replace the value (`fxfuse run --compare-cpu` substitutes the GPU's value to check every
  // node on the GPU's own inputs).
  std::function<void(const ir::Node& node, size_t output, RValue& value)> after_output;
};

class Interpreter;

// One op invocation: resolved arguments and the results to fill.
class Call {
 public:
  Interpreter* interp = nullptr;
  const ir::Node* node = nullptr;     // for error messages and recorded output types
  std::string target;                 // "aten.add.Tensor"
  const ir::OpSchema* schema = nullptr;
  std::vector<std::pair<std::string, RValue>> args;  // name ("" = positional) and value
  std::vector<RValue> outs;
  std::vector<const ir::Value*> out_values;          // recorded outputs (may be null)

  // Argument lookup by schema name, falling back to position (schema index, or `pos`).
  const RValue* find(const std::string& name, int pos = -1) const;
  bool has(const std::string& name, int pos = -1) const;  // present and not None
  const RValue* positional(size_t i) const;  // the i-th argument if it was passed unnamed
  const RValue& get(const std::string& name, int pos = -1) const;  // throws when absent
  Tensor tensor(const std::string& name, int pos = -1) const;
  std::optional<Tensor> optTensor(const std::string& name, int pos = -1) const;
  double number(const std::string& name, double def, int pos = -1) const;
  double number(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t def, int pos = -1) const;
  int64_t integer(const std::string& name) const;
  bool flag(const std::string& name, bool def, int pos = -1) const;
  std::string str(const std::string& name, const std::string& def, int pos = -1) const;
  Shape ints(const std::string& name, int pos = -1) const;
  std::optional<Shape> optInts(const std::string& name, int pos = -1) const;
  std::optional<DType> dtype(const std::string& name, int pos = -1) const;
  std::vector<RValue> list(const std::string& name, int pos = -1) const;

  size_t numOutputs() const { return outs.size(); }
  // Recorded dtype of output i, or `fallback` when the graph does not record one.
  DType outDType(size_t i, DType fallback) const;
  // A fresh output tensor: honours the recorded strides when they describe a dense layout
  // of `shape`, else contiguous. Filled with NaN.
  Tensor alloc(size_t i, const Shape& shape, DType dtype) const;
  void out(size_t i, Tensor t);
  void out(size_t i, RValue v);
};

using OpFn = std::function<void(Call&)>;

// Op table: target ("aten.add.Tensor") or overload-free name ("aten.add") -> implementation.
class OpTable {
 public:
  static OpTable& get();
  void add(const std::string& name, OpFn fn);
  void alias(const std::string& name, const std::string& existing);
  const OpFn* find(const std::string& target) const;
  std::vector<std::string> names() const;

 private:
  std::unordered_map<std::string, OpFn> ops_;
};

struct RunStats {
  size_t nodes = 0;
  double seconds = 0;
  std::map<std::string, std::pair<int64_t, double>> by_target;  // count, seconds
};

class Interpreter {
 public:
  Interpreter(ir::Module& module, Options options);

  ir::Module& module() { return module_; }
  const ir::Graph& entry() const { return *entry_; }
  const Options& options() const { return options_; }

  // Symbol binding: --bind, else a size the graph's shape equations determine (a fixed
  // dimension in broadcasting or a matrix contraction, `s // 2 == 128`), else the recorded
  // hint, else the default (clamped to the symbol's range). Module guards are checked. Called by the constructor; `bindings()` shows the
  // result and `bindingSource(sym)` says where each came from.
  const std::map<std::string, int64_t>& bindings() const { return env_; }
  std::string bindingSource(const std::string& sym) const;
  // Binds symbols of `g`'s inputs from concrete input values (for running a second graph
  // on the first graph's inputs); throws on a contradiction.
  void bindFromInputs(const ir::Graph& g, const std::vector<RValue>& inputs);

  int64_t evalSize(const ir::SymExpr& e, const std::string& context) const;
  Shape evalShape(const std::vector<ir::SymExpr>& dims, const std::string& context) const;

  // Seeded random inputs for the entry graph, by dtype and role (see docs/interpreter.md).
  // Inputs whose index is in `given` and that would be random get their shape, dtype and
  // contiguous strides but no values (`defined()` false): the caller fills them (`fxfuse run
  // --input`), and no time goes into making values that are replaced. Every input has its
  // own seed, so the others' values do not depend on `given`.
  std::vector<RValue> makeInputs(uint64_t seed, const std::set<size_t>& given = {});
  // One line per input of the last makeInputs(): its role or where it came from.
  const std::vector<std::string>& inputNotes() const { return input_notes_; }
  // The serving batch makeInputs() writes (graphs with fxfuse.paged_attention), else null.
  const KvBatchPlan* kvPlan() const { return kv_plan_ ? &*kv_plan_ : nullptr; }
  // Runs a graph (default: entry) on inputs; inputs the graph mutates are deep-copied
  // first, so runs never see each other's writes.
  std::vector<RValue> run(const std::vector<RValue>& inputs, const ir::Graph* graph = nullptr);
  const RunStats& stats() const { return stats_; }
  // Notes about semantics the interpreter approximated (e.g. dropout ignored), deduplicated.
  void warn(const std::string& msg);
  const std::vector<std::string>& warnings() const { return warnings_; }

  RValue evalAttr(const ir::Attr& a, const std::vector<RValue>& env) const;
  const ir::OpSchema* schemaFor(const std::string& target);
  // Executes one op call (used for nodes and for the op inside auto_functionalized).
  void dispatch(Call& c);

 private:
  void bindSymbols();
  // Binds the batch symbols of a paged-attention graph to a consistent batch (kv_batch.cc).
  void planKvBatch();
  // makeInputs' refusal of inputs over the storage budget before any is made (inputs.cc).
  void requireRoomForInputs(const std::set<size_t>& given);
  // A dimension equality the graph implies (broadcasting, matrix contraction).
  struct ShapeEquation {
    ir::SymExpr a, b;
    const ir::Node* node;  // the node that makes them equal; null for a module guard
  };
  // Binds symbols the equations determine (one unbound symbol on a side, the other side
  // known); narrows `ranges` for symbols they only bound to an interval (x // 2 == 128).
  void solveShapeEquations(const std::vector<ShapeEquation>& eqs,
                           std::map<std::string, std::pair<int64_t, int64_t>>* ranges);
  std::vector<bool> mutatedInputs(const ir::Graph& g);
  std::vector<RValue> runGraph(const ir::Graph& g, std::vector<RValue> inputs);
  void checkOutput(const ir::Node& n, size_t i, const RValue& v);

  ir::Module& module_;
  Options options_;
  const ir::Graph* entry_ = nullptr;
  std::map<std::string, int64_t> env_;
  std::map<std::string, std::string> env_source_;
  std::map<std::string, ir::OpSchema, std::less<>> schema_cache_;
  RunStats stats_;
  std::vector<std::string> input_notes_;
  std::optional<KvBatchPlan> kv_plan_;
  std::vector<std::string> warnings_;
};

RValue deepCopy(const RValue& v);

// Registration functions of the op groups (ops_*.cc).
void registerElementwiseOps(OpTable& t);
void registerComplexOps(OpTable& t);  // last: wraps aten.mul and the copy ops
// Whether `target` takes complex tensors (ops_complex.cc); dispatch refuses them elsewhere.
bool acceptsComplex(const std::string& target);
void registerReductionOps(OpTable& t);
void registerShapeOps(OpTable& t);
void registerSelectOps(OpTable& t);
void registerFactoryOps(OpTable& t);
void registerLinalgOps(OpTable& t);
void registerVllmOps(OpTable& t);
void registerFxfuseOps(OpTable& t);
void registerPagedAttentionOps(OpTable& t);  // ops_paged_attention.cc

}  // namespace fxfuse::interp
