// Collective nodes of the node-by-node proof at world size > 1 (node_check_collective.h).
#include "tools/cli/node_check_collective.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "tools/interpreter/numerics.h"
#include "ir/status.h"

namespace fxfuse::cli {

const ir::Value* allReduceOperand(const ir::Node& n) {
  std::string t = n.target;  // "fxfuse.all_reduce_rms_norm.default": the op without its overload
  const std::string overload = ".default";
  if (t.size() > overload.size() && t.compare(t.size() - overload.size(), overload.size(), overload) == 0)
    t.resize(t.size() - overload.size());
  if (t == "fxfuse.all_reduce" || t == "fxfuse.all_reduce_rms_norm" || t == "fxfuse.all_reduce_rms_norm_quant" ||
      t == "_c10d_functional.all_reduce_")
    return n.input("input", 0);
  if (t == "_c10d_functional.all_reduce") {
    const ir::Attr* op = n.arg("reduce_op", 1);
    if (op && op->kind == ir::Attr::Kind::String && op->s != "sum") return nullptr;  // avg/max/min: no sum
    return n.input("input", 0);
  }
  if (t == "vllm.all_reduce") return n.input("tensor", 0);
  if (t == "vllm.flashinfer_trtllm_fused_allreduce_norm") return n.input("allreduce_in");
  return nullptr;
}

// Layout: u8 dtype, u32 rank, i64 shape[rank], then each value as its dtype's bits (u64).
std::string encodeTensor(const interp::Tensor& t) {
  std::string out;
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  uint8_t dt = static_cast<uint8_t>(t.dtype);
  uint32_t rank = static_cast<uint32_t>(t.shape.size());
  put(&dt, 1);
  put(&rank, 4);
  for (int64_t s : t.shape) put(&s, 8);
  for (double v : t.values()) {
    uint64_t bits = interp::toBits(v, t.dtype);
    put(&bits, 8);
  }
  return out;
}

interp::Tensor decodeTensor(const std::string& bytes, const std::string& where) {
  size_t pos = 0;
  auto get = [&](void* p, size_t n) {
    if (pos + n > bytes.size()) fail("{}: truncated tensor ({} bytes)", where, bytes.size());
    std::memcpy(p, bytes.data() + pos, n);
    pos += n;
  };
  uint8_t dt = 0;
  uint32_t rank = 0;
  get(&dt, 1);
  get(&rank, 4);
  if (rank > 16) fail("{}: tensor of rank {}", where, rank);
  interp::Shape shape(rank);
  int64_t numel = 1;
  for (auto& s : shape) {
    get(&s, 8);
    if (s < 0) fail("{}: negative size {}", where, s);
    numel *= s;
  }
  if (bytes.size() - pos != static_cast<size_t>(numel) * 8)
    fail("{}: {} value bytes for {} elements", where, bytes.size() - pos, numel);
  const auto dtype = static_cast<ir::DType>(dt);
  std::vector<double> vals(static_cast<size_t>(numel));
  for (double& v : vals) {
    uint64_t bits = 0;
    get(&bits, 8);
    v = interp::fromBits(bits, dtype);
  }
  return interp::Tensor::fromValues(shape, dtype, vals);
}

std::vector<double> allReduceAllowance(const std::vector<interp::Tensor>& rank_inputs) {
  const size_t n = rank_inputs.size();
  if (n <= 2) return {};
  const ir::DType dt = rank_inputs[0].dtype;
  std::vector<double> partial = rank_inputs[0].values(), largest(partial.size(), 0.0);
  for (size_t r = 1; r < n; ++r) {
    std::vector<double> v = rank_inputs[r].values();
    for (size_t i = 0; i < partial.size() && i < v.size(); ++i) {
      partial[i] += v[i];
      largest[i] = std::max(largest[i], std::fabs(partial[i]));
    }
  }
  // The rounding step at twice the largest partial sum covers a step's growth past a binade.
  for (double& x : largest) x = static_cast<double>(n - 2) * roundingStep(2 * x, dt);
  return largest;
}

StepDiff checkAllReduce(const std::vector<interp::Tensor>& rank_inputs, const interp::Tensor& got) {
  if (rank_inputs.empty()) fail("all-reduce check of no ranks");
  for (size_t r = 1; r < rank_inputs.size(); ++r)
    if (rank_inputs[r].shape != rank_inputs[0].shape || rank_inputs[r].dtype != rank_inputs[0].dtype) {
      StepDiff d;
      d.beyond = 1;
      d.note = fmt::format("rank {} gives {}, rank 0 gives {}", r, rank_inputs[r].describe(), rank_inputs[0].describe());
      return d;
    }
  std::vector<double> allowance = allReduceAllowance(rank_inputs);
  return compareWithinOneStep(interp::sumRanksF32(rank_inputs), got, allowance.empty() ? nullptr : &allowance);
}

CollectiveFeed::CollectiveFeed(const ir::Graph& g, const RankLink& link,
                               const std::function<const interp::Tensor*(const ir::Value*)>& gpu_value, double timeout_s)
    : group_(std::make_shared<interp::RankGroup>(link.world_size, timeout_s)) {
  if (link.rank < 0 || link.rank >= link.world_size) fail("node check: rank {} outside world size {}", link.rank, link.world_size);
  for (const auto& n : g.nodes()) {
    const ir::Value* x = allReduceOperand(*n);
    if (!x) continue;
    const interp::Tensor* mine = gpu_value(x);
    std::vector<std::string> all =
        link.all_gather(fmt::format("nodecheck{}", nodes_.size()), mine ? encodeTensor(*mine) : std::string());
    if (all.size() != static_cast<size_t>(link.world_size))
      fail("node check: {} ranks answered the gather of {}'s input, not {}", all.size(), n->name, link.world_size);
    std::vector<interp::Tensor> parts;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty()) fail("node check: rank {} has no GPU value of the input of collective {}", r, n->name);
      parts.push_back(decodeTensor(all[r], fmt::format("node check: rank {}'s input of {}", r, n->name)));
    }
    nodes_.push_back(n.get());
    inputs_.push_back(std::move(parts));
  }
  // One thread per other rank gives that rank's part of each collective in graph order, the
  // order in which this rank's interpreter reaches them.
  for (int r = 0; r < link.world_size; ++r) {
    if (r == link.rank) continue;
    feeders_.emplace_back([this, r] {
      try {
        for (size_t k = 0; k < nodes_.size(); ++k)
          group_->allReduceSum(r, inputs_[k][static_cast<size_t>(r)], nodes_[k]->name);
      } catch (const std::exception&) {
        // The interpreter stopped early (its own error is the one reported).
      }
    });
  }
}

CollectiveFeed::~CollectiveFeed() {
  group_->abort("the node check ended");  // wakes feeders of collectives the interpreter never reached
  for (auto& t : feeders_) t.join();
}

const std::vector<interp::Tensor>* CollectiveFeed::inputsOf(const ir::Node& n) const {
  for (size_t k = 0; k < nodes_.size(); ++k)
    if (nodes_[k] == &n) return &inputs_[k];
  return nullptr;
}

}  // namespace fxfuse::cli
