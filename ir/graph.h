// The in-memory graph IR: Module > Graph > Node > Value, with def-use links.
//
// * A Value is produced by exactly one Node (or is a graph input) and records every use.
// * A Node has a target ("aten.mm.default", "_C.rms_norm.default",
//   "higher_order.auto_functionalized", "fxfuse.rms_norm"), named arguments (Attr) and
//   its outputs directly: FX `getitem` is folded in, a None/unused output slot is null.
// * Nodes live in a list in topological order. All edits go through Graph/Node methods
//   so use lists stay correct; the verifier (ir/verifier.h) checks the invariants.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/symexpr.h"

namespace fxfuse::ir {

class Graph;
class Module;
class Node;

struct Device {
  std::string type;  // "cuda", "cpu", "meta"; empty = unknown
  int index = -1;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return index >= 0 ? type + ":" + std::to_string(index) : type; }
};

enum class Layout : uint8_t { Unspecified = 0, Strided, SparseCoo, SparseCsr, Other };
enum class MemoryFormat : uint8_t { Unspecified = 0, Contiguous, ChannelsLast, ChannelsLast3d, Preserve };

struct TensorType {
  DType dtype = DType::DTYPE_UNSPECIFIED;
  std::vector<SymExpr> shape;
  std::vector<SymExpr> stride;  // same rank as shape
  SymExpr storage_offset;       // 0 by default
  Device device;
  bool requires_grad = false;

  size_t rank() const { return shape.size(); }
  SymExpr numel() const;
  bool isContiguous() const;  // strides equal the row-major strides of the shape
  static std::vector<SymExpr> contiguousStrides(const std::vector<SymExpr>& shape);
  bool operator==(const TensorType& o) const;
};

enum class ValueKind : uint8_t { Tensor, SymInt, SymFloat, SymBool, Opaque };

class Value {
 public:
  ValueKind kind = ValueKind::Tensor;
  uint32_t id = 0;  // dense, assigned by Graph::renumber()
  std::string name;
  TensorType type;                // for tensors
  std::optional<SymExpr> sym;     // for Sym* values, when known
  std::string opaque_type;        // for opaque values
  // A lifted scalar input's value (a 0-d CPU tensor input that Dynamo made of a Python
  // number): recorded by the exporter, or given with --const. Graph inputs only.
  std::optional<double> scalar_value;

  Node* producer() const { return producer_; }
  int resultIndex() const { return result_index_; }
  Graph* graph() const { return graph_; }
  // One entry per use (a node using a value twice appears twice).
  const std::vector<Node*>& users() const { return users_; }
  int graphOutputUses() const { return output_uses_; }
  size_t numUses() const { return users_.size() + static_cast<size_t>(output_uses_); }
  bool isGraphInput() const { return producer_ == nullptr; }
  bool isTensor() const { return kind == ValueKind::Tensor; }

  // Rewrites every use of this value (node arguments and graph outputs) to `other`.
  void replaceAllUsesWith(Value* other);

 private:
  friend class Graph;
  friend class Node;
  Graph* graph_ = nullptr;
  Node* producer_ = nullptr;
  int result_index_ = -1;
  std::vector<Node*> users_;
  int output_uses_ = 0;
};

// A non-value argument, or a reference to a value, or a list of either.
struct Attr {
  enum class Kind : uint8_t {
    None, Value, Int, Float, Bool, String, DType, Device, Layout, MemoryFormat, Sym, List,
    Op, Graph, Opaque, SpecialFloat,
  };
  Kind kind = Kind::None;
  ir::Value* value = nullptr;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;   // String, Op target, Opaque type, SpecialFloat ("inf", "-inf", "nan")
  std::string s2;  // Opaque repr
  ir::DType dtype = ir::DType::DTYPE_UNSPECIFIED;
  ir::Device device;
  ir::Layout layout = ir::Layout::Unspecified;
  ir::MemoryFormat memory_format = ir::MemoryFormat::Unspecified;
  std::optional<SymExpr> sym;
  std::vector<Attr> list;
  int graph = -1;

  static Attr none() { return Attr{}; }
  static Attr ofValue(ir::Value* v) { Attr a; a.kind = Kind::Value; a.value = v; return a; }
  static Attr ofInt(int64_t v) { Attr a; a.kind = Kind::Int; a.i = v; return a; }
  static Attr ofFloat(double v) { Attr a; a.kind = Kind::Float; a.f = v; return a; }
  static Attr ofBool(bool v) { Attr a; a.kind = Kind::Bool; a.b = v; return a; }
  static Attr ofString(std::string v) { Attr a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Attr ofDType(ir::DType v) { Attr a; a.kind = Kind::DType; a.dtype = v; return a; }
  static Attr ofDevice(ir::Device v) { Attr a; a.kind = Kind::Device; a.device = std::move(v); return a; }
  static Attr ofSym(const SymExpr& e);  // an Int attr when e is constant
  static Attr ofList(std::vector<Attr> v) { Attr a; a.kind = Kind::List; a.list = std::move(v); return a; }
  static Attr ofOp(std::string target) { Attr a; a.kind = Kind::Op; a.s = std::move(target); return a; }
  static Attr ofGraph(int index) { Attr a; a.kind = Kind::Graph; a.graph = index; return a; }
  static Attr ofOpaque(std::string type, std::string repr) { Attr a; a.kind = Kind::Opaque; a.s = std::move(type); a.s2 = std::move(repr); return a; }
  static Attr ofSpecialFloat(std::string v) { Attr a; a.kind = Kind::SpecialFloat; a.s = std::move(v); return a; }

  bool isNone() const { return kind == Kind::None; }
  bool isValue() const { return kind == Kind::Value; }
  // Numeric view: Int, Float, Bool, SpecialFloat, or a constant Sym.
  std::optional<double> asDouble() const;
  std::optional<int64_t> asInt() const;
  // Size view: Int, Sym, or a SymInt value with a known expression.
  std::optional<SymExpr> asSize() const;
  // Int list view (List of Int / constant Sym).
  std::optional<std::vector<int64_t>> asIntList() const;
  void collectValues(std::vector<ir::Value*>& out) const;
};

struct Arg {
  std::string name;  // schema argument name; empty for positional HOP operands
  bool keyword = false;
  Attr value;
};

enum class NodeKind : uint8_t { Op, Hop, SymPy, Fxfuse };

struct SourceLoc {
  std::string file;
  int line = 0;
  std::string code;
  bool empty() const { return file.empty(); }
};

class Node {
 public:
  std::string name;
  std::string target;
  NodeKind kind = NodeKind::Op;
  std::map<std::string, std::string> meta;
  SourceLoc loc;

  Graph* graph() const { return graph_; }
  const std::vector<Arg>& args() const { return args_; }
  size_t numOutputs() const { return outputs_.size(); }
  Value* output(size_t i = 0) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  const std::vector<Value*>& outputs() const { return outputs_; }

  // Argument lookup: by schema name, falling back to position when the argument was
  // recorded without names (FX text of unknown ops).
  const Attr* arg(const std::string& name, int position = -1) const;
  Value* input(const std::string& name, int position = -1) const;  // value argument or null
  std::vector<Value*> operands() const;  // all values used, in argument order

  void setArg(size_t index, Attr value);
  void setArg(const std::string& name, Attr value);  // replaces or appends (keyword)
  void addArg(Arg arg);
  void replaceUsesOfWith(Value* from, Value* to);

  // Creates the i-th output value (replacing a None slot).
  Value* setOutput(size_t i, ValueKind kind);
  void resizeOutputs(size_t n);
  bool hasUsers() const;

 private:
  friend class Graph;
  friend class Value;
  void attachUses(const Attr& a);
  void detachUses(const Attr& a);
  // Rewrites `from` to `to` in the arguments without touching use lists (the caller moves them).
  void rewriteArgs(Value* from, Value* to);
  Graph* graph_ = nullptr;
  std::vector<Arg> args_;
  std::vector<Value*> outputs_;
  std::list<std::unique_ptr<Node>>::iterator self_;
};

enum class InputKind : uint8_t { UserInput, Parameter, Buffer, ConstantTensor, CustomObj, Token };
enum class OutputKind : uint8_t { UserOutput, BufferMutation, UserInputMutation, LossOutput, Other };

struct GraphInput {
  Value* value = nullptr;
  InputKind kind = InputKind::UserInput;
  std::string target;
};

struct GraphOutput {
  Value* value = nullptr;  // null: a constant output (see `constant`) or None
  OutputKind kind = OutputKind::UserOutput;
  std::string target;
  Attr constant;
};

class Graph {
 public:
  explicit Graph(Module* module, std::string name = "main") : name(std::move(name)), module_(module) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;
  Module* module() const { return module_; }

  // Nodes in order.
  std::list<std::unique_ptr<Node>>& nodes() { return nodes_; }
  const std::list<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t numNodes() const { return nodes_.size(); }
  std::vector<Node*> nodeList() const;  // snapshot, safe against edits

  const std::vector<GraphInput>& inputs() const { return inputs_; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }

  Value* addInput(ValueKind kind, std::string name, InputKind ikind = InputKind::UserInput, std::string target = {});
  void addOutput(Value* v, OutputKind kind = OutputKind::UserOutput, std::string target = {});
  void addConstantOutput(Attr constant, OutputKind kind = OutputKind::UserOutput);
  void setOutputValue(size_t i, Value* v);
  void setInputRole(size_t i, InputKind kind, std::string target);
  void setOutputRole(size_t i, OutputKind kind, std::string target);

  // Creates a node before `before` (or at the end). Outputs are created empty; use
  // Node::setOutput.
  Node* createNode(std::string target, NodeKind kind, std::vector<Arg> args, size_t num_outputs,
                   Node* before = nullptr, std::string name = {});
  // Erases a node whose outputs have no remaining uses.
  void erase(Node* n);
  // Erases nodes whose outputs are used by no node outside them; linear in their uses (use
  // this, not erase(Node*) in a loop, to remove many users of one value).
  void erase(const std::vector<Node*>& nodes);
  void moveBefore(Node* n, Node* before);

  // Assigns dense value ids (inputs first, then node outputs in order), starting at 1.
  void renumber();
  // Stable topological sort (keeps the existing order where it is valid). Throws on cycles.
  void topoSort();
  // Removes nodes with no used outputs and no side effects; returns how many.
  size_t eliminateDeadCode();
  std::string uniqueNodeName(const std::string& base);
  // Gives `n` the name `name` unless another node of the graph holds it; a name only erased
  // nodes held may be taken (a respelled node keeps its source's name). uniqueNodeName never
  // hands out an erased node's name. Returns whether `n` is now called `name`.
  bool renameNode(Node* n, const std::string& name);

 private:
  friend class Node;
  friend class Value;
  Value* newValue(ValueKind kind);
  Module* module_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<GraphInput> inputs_;
  std::vector<GraphOutput> outputs_;
  std::map<std::string, int> name_counts_;
};

enum class Stage : uint8_t {
  Unspecified = 0, Dynamo, AotForward, PostGradPre, PostGradPost, ExportTrainIr, ExportCoreAten, MakeFx, FxfuseCompiled,
};

struct Producer {
  std::string tool;
  std::string torch_version;
  std::string source_schema;
  Stage stage = Stage::Unspecified;
  bool functional = false;
  std::string source_path;
};

struct WeightInfo {
  std::string fqn;
  TensorType type;
  bool is_param = false;
  std::string archive_path, member;
  uint64_t offset = 0, length = 0;
};

// An assumption a rewrite relied on that the graph's own ranges could not prove (a symbolic
// fact such as "s0 is even"), written into reports and plans and checked when symbols are
// bound (the interpreter, the runtime): a binding that violates it is refused.
struct Guard {
  SymExpr condition;   // true (nonzero) under every valid binding: "Eq(Mod(s0, 2), 0)"
  std::string reason;  // what relied on it: "silu_and_mul at mul_3: gate s0//2 = up s0 - s0//2"
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Producer producer;
  SymbolTable symbols;
  std::map<std::string, std::string> op_schemas;  // target -> schema string
  std::vector<WeightInfo> weights;
  std::map<std::string, std::string> metadata;
  std::vector<Guard> guards;

  // Adds a guard unless one with the same condition is there.
  void addGuard(const SymExpr& condition, std::string reason);

  Graph* addGraph(std::string name);
  Graph& entry() { return *graphs_.at(0); }
  const Graph& entry() const { return *graphs_.at(0); }
  std::vector<std::unique_ptr<Graph>>& graphs() { return graphs_; }
  const std::vector<std::unique_ptr<Graph>>& graphs() const { return graphs_; }

 private:
  std::vector<std::unique_ptr<Graph>> graphs_;
};

// Every guard holds under `env` (guards naming a symbol `env` lacks are skipped); throws
// FxError naming the first violated one, what relied on it, and the binding.
void checkGuards(const std::vector<Guard>& guards, const std::map<std::string, int64_t>& env,
                 const std::string& context);

// Node targets whose nodes must never be removed as dead code.
bool hasSideEffects(const Node& n);

// Op targets are dotted names: "aten.mm.default", "_operator.add", "#ns:op" (extension
// registry ops). Importers reject anything else so every target prints and parses back.
bool isValidTarget(std::string_view target);
// Symbol names are identifiers ("s0", "s77", "u3").
bool isValidSymbolName(std::string_view name);
// torch's device types (c10::DeviceType) by their Python names: "cpu", "cuda", "meta", ...
bool isKnownDeviceType(std::string_view type);

std::string_view stageName(Stage s);

}  // namespace fxfuse::ir
