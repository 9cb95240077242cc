// Node-by-node proof of a plan's parity (node_check.h has the argument; docs/runtime.md).
#include "tools/cli/node_check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "kernels/reference/numerics.h"
#include "tools/cli/node_check_collective.h"
#include "tools/interpreter/ops_common.h"
#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::cli {

namespace {

// Mantissa bits and smallest normal exponent of a floating dtype (0 bits: not floating).
std::pair<int, int> floatFormat(ir::DType t) {
  switch (t) {
    case ir::DType::BF16: return {7, -126};
    case ir::DType::F16: return {10, -14};
    case ir::DType::F32: return {23, -126};
    case ir::DType::F64: return {52, -1022};
    case ir::DType::F8E4M3FN: return {3, -6};
    case ir::DType::F8E4M3FNUZ: return {3, -7};
    case ir::DType::F8E5M2: return {2, -14};
    case ir::DType::F8E5M2FNUZ: return {2, -15};
    default: return {0, 0};
  }
}

}  // namespace

void exposeEveryNode(ir::Module& m) {
  ir::Graph& g = m.entry();
  std::vector<ir::Value*> extra;
  for (const auto& n : g.nodes())
    for (ir::Value* v : n->outputs())
      if (v && v->kind == ir::ValueKind::Tensor && v->graphOutputUses() == 0) extra.push_back(v);
  for (ir::Value* v : extra) g.addOutput(v);
}

double roundingStep(double x, ir::DType dtype) {
  auto [bits, emin] = floatFormat(dtype);
  if (bits == 0) return 0;
  int e = x == 0 || !std::isfinite(x) ? emin : std::max(emin, static_cast<int>(std::floor(std::log2(std::fabs(x)))));
  return std::ldexp(1.0, e - bits);
}

std::vector<double> fp8GemmAllowance(const interp::Tensor& a, const interp::Tensor& b, const interp::Tensor& scale_a,
                                     const interp::Tensor& scale_b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape[1] != b.shape[0]) return {};
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  std::vector<double> av = a.values(), bv = b.values(), sa = scale_a.values(), sb = scale_b.values();
  if (sa.empty() || sb.empty()) return {};
  const double per_term = kernels::reference::Fp8GemmAccumulationFraction(k);
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) {
      double x = std::fabs(av[static_cast<size_t>(i * k + kk)]);
      if (x == 0) continue;
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(i * n + j)] += x * std::fabs(bv[static_cast<size_t>(kk * n + j)]);
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = std::fabs(sa[sa.size() == 1 ? 0 : static_cast<size_t>(i) % sa.size()] *
                           sb[sb.size() == 1 ? 0 : static_cast<size_t>(j) % sb.size()]);
      out[static_cast<size_t>(i * n + j)] *= s * per_term;
    }
  return out;
}

// Per element (row t, column j) of an RMSNorm output y = round16(n·w[j]) with n = round16(s·inv):
// |w[j]| · (one step of n at |y / w[j]|).
static std::vector<double> doubleRoundingAllowance(const interp::Tensor& out, const interp::Tensor& weight) {
  std::vector<double> y = out.values(), w = weight.values();
  if (w.empty() || out.shape.empty() || out.shape.back() != static_cast<int64_t>(w.size())) return {};
  std::vector<double> a(y.size(), 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    const double wj = std::fabs(w[i % w.size()]);
    if (wj == 0 || !std::isfinite(wj)) continue;
    a[i] = wj * roundingStep(std::fabs(y[i]) / wj, out.dtype);
  }
  return a;
}

std::vector<double> sm90AttentionAllowance(const ir::Node& n, const interp::Tensor& q, const interp::Tensor& k,
                                           const interp::Tensor& v, const interp::Tensor* output_scale) {
  if (n.target.rfind("fxfuse.attention", 0) != 0) return {};  // fxfuse.attention(_quant)[.default]
  if (!ir::isFloating(v.dtype) || ir::isFp8(v.dtype)) return {};
  std::vector<double> av = v.values();
  for (double& x : av) x = std::fabs(x);
  interp::Tensor abs_v = interp::Tensor::fromValues(v.shape, v.dtype, av);
  auto attr = [&](const char* name) { return n.arg(name); };
  std::optional<double> scale;
  if (const ir::Attr* s = attr("scale"); s && !s->isNone()) scale = s->asDouble();
  const ir::Attr* layout = attr("layout");
  interp::ops::AttentionResult r;
  if (layout && layout->s == "vllm") {
    const int64_t e = k.shape.empty() ? 0 : k.shape.back();
    r = interp::ops::attentionVllm(q, k, abs_v, scale, q.dim() == 2 && e > 0 ? q.shape[1] / e : 0);
  } else {
    interp::ops::AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = abs_v;
    const ir::Attr* causal = attr("is_causal");
    a.causal = causal && causal->asDouble().value_or(0) != 0;
    const ir::Attr* gqa = attr("enable_gqa");
    a.gqa = gqa && gqa->asDouble().value_or(0) != 0;
    a.scale = scale;
    r = interp::ops::attention(a);
  }
  const double u_in = std::ldexp(1.0, -(floatFormat(v.dtype).first + 1));
  const double u_mid = output_scale ? u_in : 0;
  double inv_s = 1;
  if (output_scale) {
    std::vector<double> s = output_scale->values();
    if (s.empty() || s[0] == 0) return {};
    inv_s = 1 / std::fabs(s[0]);
  }
  std::vector<double> allowance(r.out.size());
  for (size_t i = 0; i < r.out.size(); ++i) allowance[i] = (2 * u_in + u_mid) * r.out[i] * inv_s;
  return allowance;
}

StepDiff compareWithinOneStep(const interp::Tensor& ref, const interp::Tensor& got, const std::vector<double>* allowance) {
  StepDiff d;
  if (ref.shape != got.shape) {
    d.note = fmt::format("shape {} vs {}", ref.describe(), got.describe());
    d.beyond = 1;
    return d;
  }
  std::vector<double> r = ref.values(), g = got.values();
  d.elements = static_cast<int64_t>(r.size());
  // Accumulation-order floor: 2^-12 of the reference's RMS, far below one bf16 step of a
  // typical element (2^-8 of it) and far above fp32 reordering error.
  double sq = 0;
  for (double x : r)
    if (std::isfinite(x)) sq += x * x;
  const double floor_abs = r.empty() ? 0 : std::ldexp(std::sqrt(sq / static_cast<double>(r.size())), -12);
  const bool floating = ir::isFloating(got.dtype);
  int shown = 0;
  for (size_t k = 0; k < r.size(); ++k) {
    if (r[k] == g[k] || (std::isnan(r[k]) && std::isnan(g[k]))) continue;
    ++d.differing;
    double diff = std::fabs(r[k] - g[k]);
    if (std::isfinite(diff)) d.max_abs = std::max(d.max_abs, diff);
    const double step = roundingStep(std::max(std::fabs(r[k]), std::fabs(g[k])), got.dtype);
    bool ok = floating && std::isfinite(diff) && (diff <= step || diff <= floor_abs);
    if (ok) continue;
    if (floating && std::isfinite(diff) && allowance && k < allowance->size() && diff <= step + (*allowance)[k]) {
      ++d.within_allowance;
      d.max_allowance_used = std::max(d.max_allowance_used, (diff - step) / (*allowance)[k]);
      continue;
    }
    ++d.beyond;
    if (shown++ < 4) d.samples += fmt::format(" [{}] cpu {:.6g} gpu {:.6g};", k, r[k], g[k]);
  }
  return d;
}

NodeProof proveByNodes(const std::string& graph_path, const compiler::CompileOptions& co, const interp::Options& io,
                       const std::vector<interp::RValue>& inputs, const std::vector<interp::RValue>& ref_original,
                       const std::vector<std::optional<interp::Tensor>>& checked_outputs, const PlanRunner& run_plan,
                       const interp::CompareOptions& tolerance, const RankLink* ranks) {
  NodeProof proof;
  std::string& rep = proof.report;
  try {
    auto m = ir::loadModule(graph_path);
    const compiler::CompileResult compiled = compiler::compileModule(*m, co);
    const size_t n_user = m->entry().outputs().size();
    exposeEveryNode(*m);
    lowering::LowerOptions lo;
    lo.world_size = co.world_size;
    lo.source = graph_path;
    lo.reasons_left_by_passes = compiler::firstReasonLeftByNode(compiled);
    fxfuse::plan::v1::Plan plan = lowering::lowerModule(*m, lo);
    const auto& outs = m->entry().outputs();
    if (static_cast<size_t>(plan.outputs_size()) != outs.size()) {
      rep += fmt::format("node check: the plan has {} outputs, the graph {}\n", plan.outputs_size(), outs.size());
      return proof;
    }
    std::vector<std::optional<interp::Tensor>> gpu = run_plan(plan);
    // Attention nodes the sm90 kernels run (plan steps with impl "sm90", unless the runtime is
    // told to use the reference kernel): their rounding bound applies (sm90AttentionAllowance).
    std::set<std::string> sm90_attention;
    const char* attn_env = std::getenv("FXFUSE_ATTENTION");
    if (!(attn_env && std::string(attn_env) == "reference"))
      for (const auto& st : plan.steps())
        if (st.has_kernel() && st.kernel().kernel() == "rt.attention")
          for (const auto& a : st.kernel().args())
            if (a.name() == "impl" && a.str() == "sm90") sm90_attention.insert(st.nodes().begin(), st.nodes().end());

    // 1. The checked plan's outputs equal this plan's, bit for bit.
    bool same = checked_outputs.size() <= n_user;
    for (size_t i = 0; same && i < checked_outputs.size(); ++i) {
      if (!checked_outputs[i] || !gpu[i]) continue;
      StepDiff d = compareWithinOneStep(*gpu[i], *checked_outputs[i]);
      same = d.differing == 0 && d.note.empty();
    }
    rep += fmt::format("node check: plan outputs {} the node-exposing plan's\n",
                       same ? "identical to" : "DIFFER from");

    // 3. The passes: interpreter on the compiled graph vs the original graph.
    // (World size > 1: the lockstep reference, all ranks simulated.)
    std::vector<interp::RValue> ref_compiled;
    if (ranks) ref_compiled = ranks->reference(*m);
    else ref_compiled = interp::Interpreter(*m, io).run(inputs);
    bool passes_ok = true;
    for (size_t i = 0; i < n_user && i < ref_original.size(); ++i) {
      auto r = interp::compareValues(fmt::format("output {}", i), ref_original[i], ref_compiled[i], tolerance);
      passes_ok = passes_ok && r.pass;
      if (!r.pass) rep += fmt::format("node check: compiled graph vs original graph FAIL at output {}: max_abs {:.4g}, {} mismatches\n",
                                      i, r.max_abs, r.mismatches);
    }

    // 2. Every node on the GPU's own inputs.
    std::unordered_map<const ir::Value*, size_t> index;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].value && !index.count(outs[i].value)) index[outs[i].value] = i;
    int64_t checked = 0, rounding_nodes = 0, bad_nodes = 0, gemm_nodes = 0, attention_nodes = 0, norm_nodes = 0;
    double gemm_max_used = 0, attention_max_used = 0, norm_max_used = 0;
    std::string rounding_list, bad_list;
    // The values the nodes read (graph inputs, then each node's value as continued).
    std::unordered_map<const ir::Value*, interp::Tensor> current;
    for (size_t i = 0; i < inputs.size() && i < m->entry().inputs().size(); ++i)
      if (inputs[i].isTensor()) current[m->entry().inputs()[i].value] = inputs[i].t;
    auto operand = [&](const ir::Node& n, const char* name, size_t pos) -> const interp::Tensor* {
      const auto& args = n.args();
      for (size_t q = 0; q < args.size(); ++q)
        if ((args[q].name == name || (args[q].name.empty() && q == pos)) && args[q].value.isValue()) {
          auto it = current.find(args[q].value.value);
          return it == current.end() ? nullptr : &it->second;
        }
      return nullptr;
    };
    interp::Options local = io;
    // World size > 1: collectives computed from every rank's GPU input (node_check_collective.h).
    std::unique_ptr<CollectiveFeed> feed;
    if (ranks && ranks->world_size > 1) {
      feed = std::make_unique<CollectiveFeed>(m->entry(), *ranks, [&](const ir::Value* v) -> const interp::Tensor* {
        auto it = index.find(v);
        if (it != index.end() && gpu[it->second]) return &*gpu[it->second];
        auto c = current.find(v);
        return c == current.end() ? nullptr : &c->second;
      });
      local.collective = feed->group();
      local.rank = ranks->rank;
    }
    local.after_output = [&](const ir::Node& n, size_t k, interp::RValue& v) {
      auto it = index.find(n.output(k));
      if (it == index.end() || !v.isTensor() || !gpu[it->second]) {
        if (v.isTensor()) current[n.output(k)] = v.t;
        return;
      }
      const interp::Tensor& g = *gpu[it->second];
      ++checked;
      // FP8 GEMMs (cuBLASLt on FP8 tensor cores): one rounding step plus the accumulation bound.
      std::vector<double> allowance;
      if (n.target == "aten._scaled_mm.default") {
        const interp::Tensor *a = operand(n, "self", 0), *b = operand(n, "mat2", 1), *sa = operand(n, "scale_a", 2),
                             *sb = operand(n, "scale_b", 3);
        if (a && b && sa && sb && ir::isFp8(a->dtype) && ir::isFp8(b->dtype)) allowance = fp8GemmAllowance(*a, *b, *sa, *sb);
      }
      // RMSNorm with a weight rounds twice, round16(round16(s·inv)·w) (vLLM's kernels, ours and
      // the interpreter): one step of the inner value may become |w| steps of the output.
      if (allowance.empty() && k == 0 && n.target.find("rms_norm") != std::string::npos &&
          n.target.find("quant") == std::string::npos && ir::isFloating(v.t.dtype)) {
        const bool with_residual = n.target.find("fused_add") != std::string::npos ||
                                   n.target.find("all_reduce") != std::string::npos;
        if (const interp::Tensor* w = operand(n, "weight", with_residual ? 2 : 1))
          allowance = doubleRoundingAllowance(v.t, *w);
      }
      // A plain all-reduce at world size > 2 (NCCL's ring rounds per hop).
      if (const auto* parts = feed && k == 0 && n.target.find("norm") == std::string::npos ? feed->inputsOf(n) : nullptr)
        allowance = allReduceAllowance(*parts);
      // Attention on the sm90 kernels: one rounding step plus their P rounding bound.
      const bool sm90_attn = sm90_attention.count(n.name) > 0;
      const bool norm_bound = !allowance.empty() && n.target.find("rms_norm") != std::string::npos;
      if (sm90_attn) {
        const interp::Tensor *q = operand(n, "query", 0), *kk = operand(n, "key", 1), *vv = operand(n, "value", 2);
        const bool quant = n.target.find("attention_quant") != std::string::npos;
        const interp::Tensor* os = quant ? operand(n, "output_scale", 3) : nullptr;
        if (q && kk && vv && (os || !quant))
          allowance = sm90AttentionAllowance(n, *q, *kk, *vv, os);
      }
      StepDiff d = compareWithinOneStep(v.t, g, allowance.empty() ? nullptr : &allowance);
      if (d.within_allowance && sm90_attn) {
        ++attention_nodes;
        attention_max_used = std::max(attention_max_used, d.max_allowance_used);
      } else if (d.within_allowance && norm_bound) {
        ++norm_nodes;
        norm_max_used = std::max(norm_max_used, d.max_allowance_used);
      } else if (d.within_allowance) {
        ++gemm_nodes;
        gemm_max_used = std::max(gemm_max_used, d.max_allowance_used);
      }
      if (d.beyond) {
        if (bad_nodes++ < 8)
          bad_list += fmt::format("  node {} ({}): {} of {} elements beyond one rounding step, max_abs {:.4g}{}{}\n",
                                  n.name, n.target, d.beyond, d.elements, d.max_abs, d.samples, d.note.empty() ? "" : " " + d.note);
      } else if (d.differing) {
        if (rounding_nodes++ < 8)
          rounding_list += fmt::format("  node {} ({}, {}): {} of {} elements differ: {} by one rounding step, {} within "
                                       "the {} bound (at most {:.2f} of it)\n",
                                       n.name, n.target, g.describe(), d.differing, d.elements,
                                       d.differing - d.within_allowance, d.within_allowance,
                                       sm90_attn    ? "sm90 attention rounding"
                                       : norm_bound ? "RMSNorm double rounding"
                                                    : "FP8 GEMM accumulation",
                                       d.max_allowance_used);
      }
      if (d.note.empty() && g.dtype == v.t.dtype) v = interp::RValue::ofTensor(g);  // continue from the GPU's value
      current[n.output(k)] = v.t;
    };
    interp::Interpreter stepwise(*m, local);
    stepwise.run(inputs);
    if (feed)
      rep += fmt::format("node check: rank {} of {}: {} collective nodes computed from all ranks' GPU inputs\n", ranks->rank,
                         ranks->world_size, feed->collectives());
    rep += fmt::format("node check: {} nodes compared on the GPU's own inputs: {} bit-identical, {} within one rounding step"
                       " (or the FP8 GEMM accumulation / sm90 attention rounding bound), {} beyond\n",
                       checked, checked - rounding_nodes - bad_nodes, rounding_nodes, bad_nodes);
    if (gemm_nodes)
      rep += fmt::format("node check: {} FP8 GEMM outputs needed the accumulation bound; largest use {:.2f} of it\n", gemm_nodes,
                         gemm_max_used);
    if (norm_nodes)
      rep += fmt::format("node check: {} RMSNorm outputs needed the double-rounding bound (|w| steps of the inner value); "
                         "largest use {:.2f} of it\n", norm_nodes, norm_max_used);
    if (attention_nodes)
      rep += fmt::format("node check: {} sm90 attention outputs needed the P-rounding bound; largest use {:.2f} of it\n",
                         attention_nodes, attention_max_used);
    rep += rounding_list + bad_list;
    proof.proven = same && passes_ok && bad_nodes == 0 && checked > 0;
  } catch (const FxError& e) {
    rep += fmt::format("node check: {}\n", e.what());
  }
  return proof;
}

}  // namespace fxfuse::cli
