// Generated CUDA C++ for the ops no library kernel covers (rotary, masks, casts, small
// reductions, elementwise chains, gathers, concatenations).
//
// The lowering builds a DAG of GNodes (one per graph value it cannot give a library kernel
// or alias, plus synthetic nodes for composite ops such as softmax) and groups them into
// kernels (KernelGroup). Every GNode is a pure function of its own output index: views,
// concatenation, padding and gathers are index remaps, so a chain fuses into one kernel
// whatever the shapes in between. A group is either
//   * pointwise: one thread per element of the group's domain (grid-stride loop), or
//   * row: one CTA per row of the domain; reductions over the trailing `kred` dims are
//     computed cooperatively once per row (block reduce) and read by later nodes.
// Every node rounds its result to its dtype, as eager torch does between ops, so the
// kernel computes what the CPU interpreter computes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/symexpr.h"

namespace fxfuse::lowering {

// A tensor in memory as the generated code sees it (mirrors a plan TensorRef).
struct MemTensor {
  int tref = -1;
  ir::DType dtype = ir::DType::DTYPE_UNSPECIFIED;
  std::vector<ir::SymExpr> shape, stride;
  ir::SymExpr offset;
};

struct GNode {
  // Ops (operands in `in`):
  //   load                    : mem tensor `mem`
  //   const                   : f[0] (or iv[0] for integral dtypes)
  //   unary   s=<fn>          : neg abs exp log sqrt rsqrt reciprocal sin cos tanh erf sigmoid
  //                             silu relu gelu gelu_tanh not bnot floor ceil round sign square
  //                             log1p expm1 exp2 log2 log10 trunc tan atan sinh cosh isnan isinf
  //                             softplus (f = beta, threshold)
  //   binary  s=<fn>          : add sub mul div div_floor div_trunc pow max min eq ne lt le gt
  //                             ge and or band bor bxor rem fmod  (operands broadcast to the output)
  //   cast                    : convert in[0] to dtype
  //   where                   : in[0] ? in[1] : in[2]
  //   clamp                   : clamp in[0] to [f[0], f[1]] (iv[0]: has lo, iv[1]: has hi)
  //   remap   s=<kind>        : view ops on in[0]: reshape permute(iv) slice(iv[0]=dim, sv[0]=start,
  //                             sv[1]=step) select(iv[0]=dim, sv[0]=index) unsqueeze(iv[0])
  //                             squeeze(iv=dims) expand diag(none) repeat (out dim lead+k reads
  //                             src dim k modulo its size) repeat_interleave(iv[0]=dim, sv[0]=repeats)
  //   cat     iv[0]=dim       : concatenation of in
  //   pad     sv=pad pairs    : constant_pad_nd with value f[0]
  //   iota    iv[0]=dim       : sv[0] + sv[1] * index[dim] (arange, iota)
  //   gather  iv[0]=dim       : in[0][..., in[1][index] at dim, ...] (index_select when
  //                             iv[1]=1, embedding when iv[1]=2, gather when iv[1]=3)
  //   index   iv[0]=first dim : advanced indexing with adjacent index tensors in[1..]
  //   tri     iv[0]=upper     : triu/tril with diagonal sv[0]
  //   rotary  iv=head,rot,neox[,n]: vLLM's rotary embedding of in[0] ([T, ...] as heads of
  //                             iv[0] elements) at positions in[1] with cos/sin cache in[2];
  //                             with iv[3], only a row's first n elements (the rest copied)
  //   slice_scatter           : in[0] with in[1] written into iv[0]=dim, sv=start,end,step
  //   cumsum  iv[0]=dim
  //   scatter iv[0]=dim, iv[1]=mode: in[0] (self) with in[2] (src) written (0) or added (1) where
  //                             in[1] (index, same rank) names the position; 2: index_add (1-D
  //                             index, f[0] = alpha); 3: index_copy (1-D index, last write wins)
  //   topk    iv[0]=dim, iv[1]=largest, iv[2]=index output: the element of rank index[dim]
  //                             (sort is topk of the whole dim; NaN largest, ties by index;
  //                             iv[3]=1: NaN first also when smallest first, as min/argmin)
  //   reduce  s=sum|max|min   : over the trailing iv[0] dims of in[0] (row groups only)
  std::string op;
  std::string s;
  std::vector<int> in;
  ir::DType dtype = ir::DType::DTYPE_UNSPECIFIED;
  std::vector<ir::SymExpr> shape;
  std::vector<double> f;
  std::vector<int64_t> iv;
  std::vector<ir::SymExpr> sv;
  int mem = -1;  // load: index into the codegen's MemTensor table
  std::string origin;  // graph node name, for diagnostics and the plan's node list
};

struct StoredOutput {
  int gnode = -1;
  MemTensor dest;  // where it is written (contiguous, its own buffer)
  // A row statistic of a row kernel over a permuted domain (a reduction over dims that are
  // not trailing): stored once per row at the row's linear index, never by aligning its
  // shape with the domain (the domain's coordinates are not the graph's).
  bool per_row = false;
};

struct KernelSource {
  std::string name;
  std::string source;
  std::string kind;                          // "pointwise" | "row"
  std::vector<int> tensor_args;              // MemTensor.tref of each pointer parameter, in order
  std::vector<ir::SymExpr> int_args;         // each int64 parameter, in order
  std::vector<ir::SymExpr> grid, block;      // launch shape
  std::vector<std::string> nodes;            // graph nodes fused in
  // The index reads the kernel checks, by site number - 1: {graph node, op}.
  std::vector<std::pair<std::string, std::string>> index_sites;
};

class Codegen {
 public:
  int addMem(const MemTensor& t);
  const MemTensor& mem(int i) const { return mems_.at(static_cast<size_t>(i)); }
  int add(GNode n);
  const GNode& node(int i) const { return nodes_.at(static_cast<size_t>(i)); }
  GNode& node(int i) { return nodes_.at(static_cast<size_t>(i)); }
  size_t size() const { return nodes_.size(); }

  // Estimated inlined cost (number of GNode evaluations) of computing node i once.
  int64_t cost(int i) const;

  // Emits one kernel computing `outputs` over `domain` (row kind when `kred` > 0).
  // `members` are the group's nodes (for reductions and diagnostics).
  KernelSource emit(const std::string& name, const std::vector<int>& members, const std::vector<ir::SymExpr>& domain,
                    int kred, const std::vector<StoredOutput>& outputs) const;

 private:
  std::vector<MemTensor> mems_;
  std::vector<GNode> nodes_;
};

// The C type a value of `t` is computed in: "float", "double", "long long" or "bool".
std::string computeType(ir::DType t);
// Device helpers every generated kernel starts with (rounding, conversions, block reduce).
const std::string& generatedPrelude();
// FNV-1a 64 of `s` as 16 hex digits.
std::string sourceHash(const std::string& s);
// Whether `from` broadcasts to `to` (numpy rules, size-1 dims by constant 1).
bool broadcastsTo(const std::vector<ir::SymExpr>& from, const std::vector<ir::SymExpr>& to);
ir::SymExpr numelOf(const std::vector<ir::SymExpr>& shape);
// The row dims of a row kernel's domain (all but the trailing `kred`).
std::vector<ir::SymExpr> rowsOf(const std::vector<ir::SymExpr>& domain, int kred);
// Whether a value of `shape` in a row kernel is stored once per row (a row statistic that
// does not broadcast to the domain, e.g. a reduction without keepdim): its numel is the
// number of rows.
bool storedPerRow(const std::vector<ir::SymExpr>& shape, const std::vector<ir::SymExpr>& domain, int kred);

}  // namespace fxfuse::lowering
