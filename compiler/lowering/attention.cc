// Attention (SDPA spellings, vLLM unified attention, fxfuse attention[_quant]) lowered to
// our attention kernels.
#include "compiler/lowering/lowerer.h"

namespace fxfuse::lowering::detail {

// ---------------------------------------------------------------------------------- attention

void Lowerer::lowerAttention(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  if (!out) return;
  for (size_t q = 1; q < n.numOutputs(); ++q)
    if (n.output(q) && n.output(q)->numUses() > 0)
      unsupported(n, "only the attention output may be used (logsumexp and friends are not computed)");
  Value* q = valArg(n, "query");
  Value* k = valArg(n, "key");
  Value* v = valArg(n, "value");
  Value* mask = valArg(n, "attn_mask");
  if (!mask) mask = valArg(n, "attn_bias");
  Value* oscale = valArg(n, "output_scale");
  bool causal = flag(n, "is_causal", false);
  std::string layout = str(n, "layout", "bhsd");
  if (t.rfind("vllm.", 0) == 0) layout = "vllm", causal = true;
  if (layout == "vllm") causal = true;
  if (num(n, "dropout_p", 0.0) != 0.0) unsupported(n, "attention dropout");
  int tq = mat(q, n), tk = mat(k, n), tv = mat(v, n);
  int tm = mask ? mat(mask, n) : -1;
  int ts = oscale ? mat(oscale, n) : -1;
  closeGroup();
  auto as4 = [&](int tr, const SymExpr& heads) -> int {
    TRef x = trefs_[static_cast<size_t>(tr)];
    if (layout != "vllm") {
      if (x.shape.size() == 3) {  // [H, S, E]
        x.shape.insert(x.shape.begin(), I(1));
        x.stride.insert(x.stride.begin(), I(0));
      }
      if (x.shape.size() != 4) unsupported(n, "attention operands must be 4-D [B, H, S, E]");
      return newTRef(x);
    }
    // vLLM: [T, H*E] or [T, H, E] -> [1, H, T, E]
    if (x.shape.size() == 2) {
      SymExpr e = floorDiv(x.shape[1], heads);
      x.shape = {I(1), heads, x.shape[0], e};
      x.stride = {I(0), e * x.stride[1], x.stride[0], x.stride[1]};
    } else if (x.shape.size() == 3) {
      x.shape = {I(1), x.shape[1], x.shape[0], x.shape[2]};
      x.stride = {I(0), x.stride[1], x.stride[0], x.stride[2]};
    } else {
      unsupported(n, "vLLM attention operands must be [T, H, E] or [T, H*E]");
    }
    return newTRef(x);
  };
  SymExpr hq = I(1), hk = I(1);
  if (layout == "vllm") {
    const auto& ks = trefs_[static_cast<size_t>(tk)].shape;
    const auto& qs = trefs_[static_cast<size_t>(tq)].shape;
    if (ks.size() != 3) unsupported(n, "vLLM key must be [T, Hk, E]");
    if (qs.size() != 2 && qs.size() != 3) unsupported(n, "vLLM query must be [T, H, E] or [T, H*E]");
    hk = ks[1];
    SymExpr e = ks[2];
    hq = qs.size() == 3 ? qs[1] : floorDiv(qs[1], e);
  }
  int q4 = as4(tq, hq), k4 = as4(tk, hk), v4 = as4(tv, hk);
  int to = freshFor(out);
  int o4;
  {
    TRef ot = trefs_[static_cast<size_t>(to)];
    const TRef& qq = trefs_[static_cast<size_t>(q4)];
    const TRef& vv = trefs_[static_cast<size_t>(v4)];
    if (layout == "vllm") {  // output [T, Hq*Ev] (or [T, Hq, Ev]) contiguous -> [1, Hq, T, Ev]
      SymExpr ev = vv.shape[3];
      ot.shape = {I(1), qq.shape[1], qq.shape[2], ev};
      ot.stride = {I(0), ev, qq.shape[1] * ev, I(1)};
    } else if (ot.shape.size() == 3) {
      ot.shape.insert(ot.shape.begin(), I(1));
      ot.stride.insert(ot.stride.begin(), I(0));
    }
    if (ot.shape.size() != 4 || ot.stride.size() != 4)
      unsupported(n, "attention output must be 4-D [B, H, S, E] (or [H, S, E])");
    o4 = newTRef(ot);
  }
  pb::Step* st = addStep({n.name}, std::string("attention") + (causal ? " causal" : "") + (ts >= 0 ? " fp8-out" : ""));
  auto* kl = st->mutable_kernel();
  kl->set_kernel("rt.attention");
  argT(kl, "q", q4);
  argT(kl, "k", k4);
  argT(kl, "v", v4);
  argT(kl, "out", o4);
  if (tm >= 0) {
    TRef mt = trefs_[static_cast<size_t>(tm)];
    while (mt.shape.size() < 4) {  // broadcast to [B, H, Sq, Sk]
      mt.shape.insert(mt.shape.begin(), I(1));
      mt.stride.insert(mt.stride.begin(), I(0));
    }
    argT(kl, "mask", newTRef(mt));
  }
  if (ts >= 0) argT(kl, "out_scale", ts);
  argB(kl, "causal", causal);
  const Attr* sc = arg(n, "scale");
  if (sc && sc->asDouble()) argF(kl, "scale", *sc->asDouble());
  argD(kl, "round_dtype", trefs_[static_cast<size_t>(q4)].dtype);
  // Kernel choice: the sm90 kernels (kernels/attention) when the static facts fit; the runtime
  // re-checks pointers and strides and falls back to the reference kernel otherwise.
  {
    std::string why;
    const bool fast = attention::FitsSm90(attentionFacts(q4, k4, v4, o4, tm >= 0, ts >= 0), &why);
    argS(kl, "impl", fast ? "sm90" : "reference");
    if (!fast) argS(kl, "impl_reason", why);
  }
  setMat(out, to);
  stats_.attention++;
}

// What the sm90 attention kernels need to know at plan time (kernels/attention/attention.h).
attention::AttentionShapeFacts Lowerer::attentionFacts(int q4, int k4, int v4, int o4, bool has_mask, bool fp8_out) const {
  const TRef& q = trefs_[static_cast<size_t>(q4)];
  const TRef& k = trefs_[static_cast<size_t>(k4)];
  const TRef& v = trefs_[static_cast<size_t>(v4)];
  const TRef& o = trefs_[static_cast<size_t>(o4)];
  attention::AttentionShapeFacts f;
  auto dim = [](const SymExpr& e) { return e.isInt() ? static_cast<int>(e.intValue()) : 0; };
  f.head_size = dim(q.shape[3]);
  f.head_size_v = dim(v.shape[3]);
  f.d16_inputs = (q.dtype == DType::BF16 || q.dtype == DType::F16) && k.dtype == q.dtype && v.dtype == q.dtype;
  f.has_mask = has_mask;
  f.last_dim_contiguous = true;
  int64_t gcd = -1;
  for (const TRef* t : {&q, &k, &v, &o}) {
    if (!(t->stride[3].isInt() && t->stride[3].intValue() == 1)) f.last_dim_contiguous = false;
    for (int d = 0; d < 3; ++d) {
      const SymExpr& st = t->stride[static_cast<size_t>(d)];
      if (!st.isInt() || st.intValue() == 0) continue;
      int64_t x = st.intValue() < 0 ? -st.intValue() : st.intValue();
      if (t == &o && fp8_out) x = x % 16 == 0 ? 8 : 1;  // FP8 rows need 16-byte strides: 16 elements
      gcd = gcd < 0 ? x : std::gcd(gcd, x);
    }
  }
  f.stride_gcd_elems = gcd;
  f.out_ok = o.dtype == q.dtype || (o.dtype == DType::F8E4M3FN && fp8_out);
  return f;
}

}  // namespace fxfuse::lowering::detail
