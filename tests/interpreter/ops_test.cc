// Each op against hand-computed or independently derived values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "tools/interpreter/ops_common.h"
#include "ir/status.h"
#include "tests/interpreter/test_util.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;
using fxfuse::FxError;
using fxfuse::ir::DType;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> vals(const RValue& r) {
  REQUIRE(r.isTensor());
  return r.t.values();
}

std::string g1(const std::string& inputs, const std::string& body, const std::string& outputs) {
  return "graph @g {\n" + inputs + body + outputs + "}\n";
}

}  // namespace

// ------------------------------------------------------------------ elementwise

TEST_CASE("add/sub/mul/div with promotion and scalars", "[ops]") {
  auto out = run(g1("input %1 \"x\": bf16[3]\ninput %2 \"y\": f32[3]\n",
                    "%3: bf16[3] = aten.add.Tensor(self=%1, other=1e-06)\n"
                    "%4: f32[3] = aten.add.Tensor(self=%1, other=%2, alpha=2)\n"
                    "%5: bf16[3] = aten.mul.Tensor(self=%1, other=%1)\n"
                    "%6: bf16[3] = aten.rsub.Scalar(self=%1, other=1)\n",
                    "output %3\noutput %4\noutput %5\noutput %6\n"),
                 {T({3}, DType::BF16, {1, 1 + std::ldexp(1, -7), -2}), T({3}, DType::F32, {0.5, 0.25, 3})});
  CHECK(vals(out[0]) == std::vector<double>{1, 1 + std::ldexp(1, -7), -2});  // 1e-6 vanishes in bf16
  CHECK(vals(out[1]) == std::vector<double>{2, 1.5 + std::ldexp(1, -7), 4});   // f32 result
  // (1+2^-7)^2 = 1 + 2^-6 + 2^-14 -> bf16 1 + 2^-6
  CHECK(vals(out[2]) == std::vector<double>{1, 1 + std::ldexp(1, -6), 4});
  CHECK(vals(out[3]) == std::vector<double>{0, -std::ldexp(1, -7), 3});
}

TEST_CASE("integer division modes", "[ops]") {
  auto out = run(g1("input %1 \"x\": i64[4]\n",
                    "%2: f32[4] = aten.div.Tensor(self=%1, other=2)\n"
                    "%3: i64[4] = aten.div.Tensor_mode(self=%1, other=2, rounding_mode=\"floor\")\n"
                    "%4: i64[4] = aten.div.Tensor_mode(self=%1, other=2, rounding_mode=\"trunc\")\n"
                    "%5: i64[4] = aten.remainder.Scalar(self=%1, other=2)\n",
                    "output %2\noutput %3\noutput %4\noutput %5\n"),
                 {T({4}, DType::I64, {7, -7, 4, -1})});
  CHECK(vals(out[0]) == std::vector<double>{3.5, -3.5, 2, -0.5});
  CHECK(vals(out[1]) == std::vector<double>{3, -4, 2, -1});
  CHECK(vals(out[2]) == std::vector<double>{3, -3, 2, 0});
  CHECK(vals(out[3]) == std::vector<double>{1, 1, 0, 1});
}

TEST_CASE("comparisons, where, masked_fill, logical ops", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[4]\n",
                    "%2: b8[4] = aten.gt.Scalar(self=%1, other=0)\n"
                    "%3: f32[4] = aten.where.self(condition=%2, self=%1, other=-1.0)\n"
                    "%4: f32[4] = aten.masked_fill.Scalar(self=%1, mask=%2, value=-inf)\n"
                    "%5: b8[4] = aten.logical_not.default(self=%2)\n"
                    "%6: b8[4] = aten.ne.Scalar(self=%1, other=2)\n",
                    "output %3\noutput %4\noutput %5\noutput %6\n"),
                 {T({4}, DType::F32, {1, -2, 0, 2})});
  CHECK(vals(out[0]) == std::vector<double>{1, -1, -1, 2});
  CHECK(vals(out[1]) == std::vector<double>{-INFINITY, -2, 0, -INFINITY});
  CHECK(vals(out[2]) == std::vector<double>{0, 1, 1, 0});
  CHECK(vals(out[3]) == std::vector<double>{1, 1, 1, 0});
}

TEST_CASE("clamp passes NaN through; the e4m3fn cast of out-of-range values is NaN", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[5]\n",
                    "%2: f32[5] = aten.clamp_min.default(self=%1, min=-448.0)\n"
                    "%3: f32[5] = aten.clamp_max.default(self=%2, max=448.0)\n"
                    "%4: f8e4m3fn[5] = prims.convert_element_type.default(a=%3, dtype=f8e4m3fn)\n"
                    "%5: f8e4m3fn[5] = prims.convert_element_type.default(a=%1, dtype=f8e4m3fn)\n"
                    "%6: bf16[5] = aten._to_copy.default(self=%1, dtype=bf16)\n",
                    "output %4\noutput %5\noutput %6\n"),
                 {T({5}, DType::F32, {kNaN, -500, 500, 464, 1e-3})});
  auto q = vals(out[0]), raw = vals(out[1]), b = vals(out[2]);
  CHECK(std::isnan(q[0]));
  CHECK(q[1] == -448);
  CHECK(q[2] == 448);
  CHECK(q[3] == 448);
  CHECK(q[4] == std::ldexp(1, -9));  // 1e-3 is above half the smallest subnormal 2^-9
  CHECK(std::isnan(raw[1]));
  CHECK(std::isnan(raw[2]));
  CHECK(raw[3] == 448);
  CHECK(b[4] == bf16(1e-3));
}

TEST_CASE("unary math: rsqrt, silu, sigmoid, gelu, exp, reciprocal", "[ops]") {
  auto out = run(g1("input %1 \"x\": bf16[3]\ninput %2 \"y\": f32[3]\n",
                    "%3: bf16[3] = aten.silu.default(self=%1)\n"
                    "%4: f32[3] = aten.sigmoid.default(self=%2)\n"
                    "%5: f32[3] = aten.gelu.default(self=%2)\n"
                    "%6: f32[3] = aten.gelu.default(self=%2, approximate=\"tanh\")\n"
                    "%7: f32[3] = aten.rsqrt.default(self=%2)\n"
                    "%8: f32[3] = aten.reciprocal.default(self=%2)\n"
                    "%9: f32[3] = aten.pow.Tensor_Scalar(self=%2, exponent=2)\n",
                    "output %3\noutput %4\noutput %5\noutput %6\noutput %7\noutput %8\noutput %9\n"),
                 {T({3}, DType::BF16, {1, -1, 0}), T({3}, DType::F32, {1, 4, 0.25})});
  auto s = vals(out[0]);
  CHECK(s[0] == 0.73046875);  // silu(1) = 0.7310586 -> bf16 grid 2^-8
  CHECK(s[1] == bf16(-0.2689414213699951));
  CHECK(s[2] == 0);
  CHECK(vals(out[1])[0] == Approx(0.7310585786).epsilon(1e-7));
  CHECK(vals(out[2])[0] == Approx(0.8413447461).epsilon(1e-6));
  CHECK(vals(out[3])[0] == Approx(0.8411920).epsilon(1e-6));
  CHECK(vals(out[4]) == std::vector<double>{1, 0.5, 2});
  CHECK(vals(out[5]) == std::vector<double>{1, 0.25, 4});
  CHECK(vals(out[6]) == std::vector<double>{1, 16, 0.0625});
}

TEST_CASE("triu and tril", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[3, 3]\n",
                    "%2: f32[3, 3] = aten.triu.default(self=%1, diagonal=1)\n"
                    "%3: f32[3, 3] = aten.tril.default(self=%1)\n",
                    "output %2\noutput %3\n"),
                 {T({3, 3}, DType::F32, {1, 2, 3, 4, 5, 6, 7, 8, 9})});
  CHECK(vals(out[0]) == std::vector<double>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(vals(out[1]) == std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9});
}

// ------------------------------------------------------------------ reductions

TEST_CASE("sum, mean, amax, max.dim, argmax, softmax, cumsum", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[2, 3]\n",
                    "%2: f32[2] = aten.sum.dim_IntList(self=%1, dim=[1])\n"
                    "%3: f32[1, 3] = aten.mean.dim(self=%1, dim=[0], keepdim=true)\n"
                    "%4: f32[2] = aten.amax.default(self=%1, dim=[-1])\n"
                    "%5: f32[2], %6: i64[2] = aten.max.dim(self=%1, dim=1)\n"
                    "%7: i64[] = aten.argmax.default(self=%1)\n"
                    "%8: f32[] = aten.sum.default(self=%1)\n"
                    "%9: f32[2, 3] = aten.cumsum.default(self=%1, dim=1)\n",
                    "output %2\noutput %3\noutput %4\noutput %5\noutput %6\noutput %7\noutput %8\noutput %9\n"),
                 {T({2, 3}, DType::F32, {1, 5, 3, 7, 2, 7})});
  CHECK(vals(out[0]) == std::vector<double>{9, 16});
  CHECK(vals(out[1]) == std::vector<double>{4, 3.5, 5});
  CHECK(vals(out[2]) == std::vector<double>{5, 7});
  CHECK(vals(out[3]) == std::vector<double>{5, 7});
  CHECK(vals(out[4]) == std::vector<double>{1, 0});  // first occurrence
  CHECK(vals(out[5]) == std::vector<double>{3});
  CHECK(vals(out[6]) == std::vector<double>{25});
  CHECK(vals(out[7]) == std::vector<double>{1, 6, 9, 7, 9, 16});
  auto sm = run(g1("input %1 \"x\": f32[3]\n", "%2: f32[3] = aten._softmax.default(self=%1, dim=0, half_to_float=false)\n",
                   "output %2\n"),
                {T({3}, DType::F32, {0, std::log(2.0), std::log(4.0)})});
  auto s = vals(sm[0]);
  CHECK(s[0] == f32(1.0 / 7));
  CHECK(s[1] == f32(2.0 / 7));
  CHECK(s[2] == f32(4.0 / 7));
}

TEST_CASE("bf16 sum and mean round once to bf16", "[ops]") {
  auto out = run(g1("input %1 \"x\": bf16[4]\n",
                    "%2: bf16[] = aten.sum.default(self=%1)\n"
                    "%3: f32[] = aten.sum.default(self=%1, dtype=f32)\n"
                    "%4: bf16[1] = aten.mean.dim(self=%1, dim=[-1], keepdim=true)\n",
                    "output %2\noutput %3\noutput %4\n"),
                 {T({4}, DType::BF16, {256, 1, 1, 0.5})});
  CHECK(vals(out[0])[0] == 258);  // 258.5 -> bf16 (spacing 2 at 256) -> 258
  CHECK(vals(out[1])[0] == 258.5);
  CHECK(vals(out[2])[0] == bf16(258.5 / 4));
}

// ------------------------------------------------------------------ views and data movement

TEST_CASE("views keep strides: permute, view, slice, select, expand, squeeze", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[2, 3]\n",
                    "%2: f32[3, 2][1, 3] = aten.permute.default(self=%1, dims=[1, 0])\n"
                    "%3: f32[6] = aten.reshape.default(self=%2, shape=[-1])\n"  // not viewable: copies
                    "%4: f32[2, 2][3, 2] = aten.slice.Tensor(self=%1, dim=1, start=0, end=9223372036854775807, step=2)\n"
                    "%5: f32[3] = aten.select.int(self=%1, dim=0, index=-1)\n"
                    "%6: f32[2, 2, 3] = aten.expand.default(self=%1, size=[2, -1, -1])\n"
                    "%7: f32[1, 3] = aten.unsqueeze.default(self=%5, dim=0)\n"
                    "%8: f32[3] = aten.squeeze.dim(self=%7, dim=0)\n"
                    "%9: f32[3, 2] = aten.clone.default(self=%2, memory_format=memory_format.contiguous)\n",
                    "output %3\noutput %4\noutput %5\noutput %6\noutput %8\noutput %9\noutput %2\n"),
                 {T({2, 3}, DType::F32, {1, 2, 3, 4, 5, 6})});
  CHECK(vals(out[0]) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(vals(out[1]) == std::vector<double>{1, 3, 4, 6});
  CHECK(out[1].t.strides == Shape{3, 2});
  CHECK(vals(out[2]) == std::vector<double>{4, 5, 6});
  CHECK(vals(out[3]) == std::vector<double>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  CHECK(out[3].t.strides[0] == 0);
  CHECK(vals(out[4]) == std::vector<double>{4, 5, 6});
  CHECK(vals(out[5]) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(out[6].t.strides == Shape{1, 3});
  CHECK(out[6].t.storage.get() != out[5].t.storage.get());
}

TEST_CASE("cat, split, split_with_sizes, stack, constant_pad_nd, repeat", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[2, 2]\n",
                    "%2: f32[2, 4] = aten.cat.default(tensors=[%1, %1], dim=1)\n"
                    "%3: f32[2, 1], %4: f32[2, 3] = aten.split_with_sizes.default(self=%2, split_sizes=[1, 3], dim=1)\n"
                    "%5: f32[1, 2], %6: f32[1, 2] = aten.split.Tensor(self=%1, split_size=1)\n"
                    "%7: f32[2, 2, 2] = aten.stack.default(tensors=[%1, %1], dim=1)\n"
                    "%8: f32[2, 5] = aten.constant_pad_nd.default(self=%1, pad=[1, 2], value=9)\n"
                    "%9: f32[2, 4] = aten.repeat.default(self=%1, repeats=[1, 2])\n",
                    "output %4\noutput %6\noutput %7\noutput %8\noutput %9\n"),
                 {T({2, 2}, DType::F32, {1, 2, 3, 4})});
  CHECK(vals(out[0]) == std::vector<double>{2, 1, 2, 4, 3, 4});
  CHECK(vals(out[1]) == std::vector<double>{3, 4});
  CHECK(vals(out[2]) == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(vals(out[3]) == std::vector<double>{9, 1, 2, 9, 9, 9, 3, 4, 9, 9});
  CHECK(vals(out[4]) == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});
}

TEST_CASE("indexing: index.Tensor, index_select, gather, embedding, index_put", "[ops]") {
  auto out = run(g1("input %1 \"x\": f32[3, 4]\ninput %2 \"i\": i64[2]\n",
                    "%3: f32[2, 4] = aten.index.Tensor(self=%1, indices=[%2])\n"
                    "%4: f32[3, 2] = aten.index.Tensor(self=%1, indices=[None, %2])\n"
                    "%5: f32[2] = aten.index.Tensor(self=%1, indices=[%2, %2])\n"
                    "%6: f32[3, 2] = aten.index_select.default(self=%1, dim=1, index=%2)\n"
                    "%8: f32[3, 4] = aten.index_put.default(self=%1, indices=[%2], values=%3, accumulate=true)\n",
                    "output %3\noutput %4\noutput %5\noutput %6\noutput %8\n"),
                 {T({3, 4}, DType::F32, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}), T({2}, DType::I64, {2, -3})});
  CHECK(vals(out[0]) == std::vector<double>{20, 21, 22, 23, 0, 1, 2, 3});
  CHECK(vals(out[1]) == std::vector<double>{2, 1, 12, 11, 22, 21});
  CHECK(vals(out[2]) == std::vector<double>{22, 1});
  CHECK(vals(out[3]) == std::vector<double>{2, 1, 12, 11, 22, 21});
  CHECK(vals(out[4]) == std::vector<double>{0, 2, 4, 6, 10, 11, 12, 13, 40, 42, 44, 46});
  auto e = run(g1("input %1 \"w\": f32[3, 2]\ninput %2 \"i\": i64[3]\n",
                  "%3: f32[3, 2] = aten.embedding.default(weight=%1, indices=%2)\n", "output %3\n"),
               {T({3, 2}, DType::F32, {0, 1, 10, 11, 20, 21}), T({3}, DType::I64, {2, 0, 2})});
  CHECK(vals(e[0]) == std::vector<double>{20, 21, 0, 1, 20, 21});
  auto g = run(g1("input %1 \"x\": f32[2, 3]\ninput %2 \"i\": i64[2, 2]\n",
                  "%3: f32[2, 2] = aten.gather.default(self=%1, dim=1, index=%2)\n", "output %3\n"),
               {T({2, 3}, DType::F32, {1, 2, 3, 4, 5, 6}), T({2, 2}, DType::I64, {2, 0, 1, 1})});
  CHECK(vals(g[0]) == std::vector<double>{3, 1, 5, 5});
  // A token id outside the vocabulary is an error naming the node.
  REQUIRE_THROWS_WITH(run(g1("input %1 \"w\": f32[3, 2]\ninput %2 \"i\": i64[1]\n",
                             "%3: f32[1, 2] = aten.embedding.default(weight=%1, indices=%2)  // emb\n", "output %3\n"),
                          {T({3, 2}, DType::F32, {0, 0, 0, 0, 0, 0}), T({1}, DType::I64, {3})}),
                      Catch::Contains("node 'emb'") && Catch::Contains("outside the vocabulary"));
}

TEST_CASE("factories: arange, iota, full, empty is poisoned", "[ops]") {
  auto out = run(g1("",
                    "%1: i64[4] = aten.arange.start_step(start=1, end=9, step=2, dtype=i64)\n"
                    "%2: i64[3] = prims.iota.default(length=3, start=5, step=-1, dtype=i64, device=device(cpu), "
                    "requires_grad=false)\n"
                    "%3: bf16[2] = aten.full.default(size=[2], fill_value=0.1, dtype=bf16)\n"
                    "%4: f32[2] = aten.empty.memory_format(size=[2], dtype=f32)\n"
                    "%5: f32[2] = aten.arange.default(end=1.5, dtype=f32)\n",
                    "output %1\noutput %2\noutput %3\noutput %4\noutput %5\n"),
                 {});
  CHECK(vals(out[0]) == std::vector<double>{1, 3, 5, 7});
  CHECK(vals(out[1]) == std::vector<double>{5, 4, 3});
  CHECK(vals(out[2]) == std::vector<double>{bf16(0.1), bf16(0.1)});
  CHECK(std::isnan(vals(out[3])[0]));
  CHECK(vals(out[4]) == std::vector<double>{0, 1});
}

TEST_CASE("view.dtype bit casts", "[ops]") {
  auto out = run(g1("input %1 \"x\": bf16[2]\n", "%2: i16[2] = aten.view.dtype(self=%1, dtype=i16)\n", "output %2\n"),
                 {T({2}, DType::BF16, {1.0, -2.0})});
  CHECK(vals(out[0]) == std::vector<double>{0x3F80, static_cast<int16_t>(0xC000)});
}

// ------------------------------------------------------------------ matrix products

TEST_CASE("mm, addmm, bmm, matmul, linear (strided operands through BLAS)", "[ops]") {
  auto out = run(g1("input %1 \"a\": f32[2, 2]\ninput %2 \"b\": f32[2, 2]\n",
                    "%3: f32[2, 2] = aten.mm.default(self=%1, mat2=%2)\n"
                    "%4: f32[2, 2][1, 2] = aten.permute.default(self=%2, dims=[1, 0])\n"
                    "%5: f32[2, 2] = aten.mm.default(self=%1, mat2=%4)\n"
                    "%6: f32[2, 2] = aten.addmm.default(self=%1, mat1=%1, mat2=%2, beta=2, alpha=0.5)\n"
                    "%7: f32[2, 2] = aten.linear.default(input=%1, weight=%2, bias=%1)\n",
                    "output %3\noutput %5\noutput %6\noutput %7\n"),
                 {T({2, 2}, DType::F32, {1, 2, 3, 4}), T({2, 2}, DType::F32, {5, 6, 7, 8})});
  CHECK(vals(out[0]) == std::vector<double>{19, 22, 43, 50});
  CHECK(vals(out[1]) == std::vector<double>{17, 23, 39, 53});
  CHECK(vals(out[2]) == std::vector<double>{11.5, 15, 27.5, 33});
  // linear: a @ b^T + bias, bias [2, 2] broadcast as given
  CHECK(vals(out[3]) == std::vector<double>{18, 25, 42, 57});
  auto bm = run(g1("input %1 \"a\": bf16[2, 1, 3]\ninput %2 \"b\": bf16[3]\n",
                   "%3: bf16[2, 1] = aten.matmul.default(self=%1, other=%2)\n"
                   "%4: bf16[3, 1] = aten.unsqueeze.default(self=%2, dim=-1)\n"
                   "%5: bf16[2, 3, 1] = aten.expand.default(self=%4, size=[2, 3, 1])\n"
                   "%6: bf16[2, 1, 1] = aten.bmm.default(self=%1, mat2=%5)\n",
                   "output %3\noutput %6\n"),
                {T({2, 1, 3}, DType::BF16, {1, 2, 3, 4, 5, 6}), T({3}, DType::BF16, {1, 1, 1})});
  CHECK(vals(bm[0]) == std::vector<double>{6, 15});
  CHECK(vals(bm[1]) == std::vector<double>{6, 15});
}

TEST_CASE("bf16 matmul rounds the f32 accumulation once", "[ops]") {
  // 256 + 1 + 1 in f32 = 258 -> bf16 258 (while rounding after each add would give 256).
  auto out = run(g1("input %1 \"a\": bf16[1, 3]\ninput %2 \"b\": bf16[3, 1]\n",
                    "%3: bf16[1, 1] = aten.mm.default(self=%1, mat2=%2)\n", "output %3\n"),
                 {T({1, 3}, DType::BF16, {256, 1, 1}), T({3, 1}, DType::BF16, {1, 1, 1})});
  CHECK(vals(out[0])[0] == 258);
}

TEST_CASE("_scaled_mm per-tensor and row-wise", "[ops]") {
  std::string g = g1(
      "input %1 \"a\": f8e4m3fn[2, 2]\ninput %2 \"b\": f8e4m3fn[2, 2][1, 2]\ninput %3 \"sa\": f32[]\n"
      "input %4 \"sb\": f32[]\ninput %5 \"ra\": f32[2, 1]\ninput %6 \"rb\": f32[1, 2]\n",
      "%7: bf16[2, 2] = aten._scaled_mm.default(self=%1, mat2=%2, scale_a=%3, scale_b=%4, out_dtype=bf16)\n"
      "%8: f32[2, 2] = aten._scaled_mm.default(self=%1, mat2=%2, scale_a=%5, scale_b=%6, out_dtype=f32)\n",
      "output %7\noutput %8\n");
  Tensor b = Tensor::emptyStrided({2, 2}, {1, 2}, DType::F8E4M3FN, 0);
  b.set({0, 0}, 1);
  b.set({1, 0}, 2);
  b.set({0, 1}, 3);
  b.set({1, 1}, 4);
  auto m = parse(g);
  std::vector<RValue> in = {RValue::ofTensor(T({2, 2}, DType::F8E4M3FN, {1, 2, 3, 4})), RValue::ofTensor(b),
                            RValue::ofTensor(T({}, DType::F32, {0.5})), RValue::ofTensor(T({}, DType::F32, {0.25})),
                            RValue::ofTensor(T({2, 1}, DType::F32, {1, 2})), RValue::ofTensor(T({1, 2}, DType::F32, {1, 10}))};
  auto out = runModule(*m, in);
  // a @ b = [[5, 11], [11, 25]]
  CHECK(vals(out[0]) == std::vector<double>{0.625, 1.375, 1.375, 3.125});
  CHECK(vals(out[1]) == std::vector<double>{5, 110, 22, 500});
}

// ------------------------------------------------------------------ attention

namespace {

// Naive attention in double, written independently of the interpreter.
std::vector<double> naiveAttention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                                   int H, int Hk, int S, int E, bool causal, double scale,
                                   const std::vector<double>* bool_mask) {
  std::vector<double> out(static_cast<size_t>(H * S * E));
  for (int h = 0; h < H; ++h) {
    int kh = h / (H / Hk);
    for (int i = 0; i < S; ++i) {
      std::vector<double> s(S);
      double mx = -INFINITY;
      for (int j = 0; j < S; ++j) {
        double d = 0;
        for (int e = 0; e < E; ++e) d += q[(h * S + i) * E + e] * k[(kh * S + j) * E + e];
        d *= scale;
        if ((causal && j > i) || (bool_mask && (*bool_mask)[i * S + j] == 0)) d = -INFINITY;
        s[j] = d;
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (int j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int e = 0; e < E; ++e) {
        double o = 0;
        for (int j = 0; j < S; ++j) o += s[j] / sum * v[(kh * S + j) * E + e];
        out[(h * S + i) * E + e] = o;
      }
    }
  }
  return out;
}

std::vector<double> randomValues(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (auto& x : v) x = f32(d(g));
  return v;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: GQA, causal, scale, masks, flash variant", "[ops]") {
  const int H = 4, Hk = 2, S = 5, E = 8;
  auto q = randomValues(H * S * E, 1), k = randomValues(Hk * S * E, 2), v = randomValues(Hk * S * E, 3);
  std::vector<double> mask(S * S);
  for (int i = 0; i < S * S; ++i) mask[i] = (i * 7) % 3 != 0 || i % (S + 1) == 0;
  std::string g;
  g = g1("input %1 \"q\": f32[1, 4, 5, 8]\ninput %2 \"k\": f32[1, 2, 5, 8]\ninput %3 \"v\": f32[1, 2, 5, 8]\n"
         "input %4 \"m\": b8[5, 5]\n",
         "%5: f32[1, 4, 5, 8] = aten.scaled_dot_product_attention.default(query=%1, key=%2, value=%3, is_causal=true, "
         "*, scale=0.5, enable_gqa=true)\n"
         "%6: f32[1, 4, 5, 8] = aten.scaled_dot_product_attention.default(query=%1, key=%2, value=%3, attn_mask=%4, *, "
         "enable_gqa=true)\n"
         "%7: f32[1, 4, 5, 8] = aten.repeat_interleave.self_int(self=%2, repeats=2, dim=1)\n"
         "%8: f32[1, 4, 5, 8] = aten.repeat_interleave.self_int(self=%3, repeats=2, dim=1)\n"
         "%9: f32[1, 4, 5, 8], %10: f32[1, 4, 5] = aten._scaled_dot_product_flash_attention_for_cpu.default(query=%1, "
         "key=%7, value=%8, is_causal=true, *, scale=0.5)\n",
         "output %5\noutput %6\noutput %9\noutput %10\n");
  auto out = run(g, {T({1, 4, 5, 8}, DType::F32, q), T({1, 2, 5, 8}, DType::F32, k), T({1, 2, 5, 8}, DType::F32, v),
                     T({5, 5}, DType::BOOL, mask)});
  auto ref1 = naiveAttention(q, k, v, H, Hk, S, E, true, 0.5, nullptr);
  auto ref2 = naiveAttention(q, k, v, H, Hk, S, E, false, 1 / std::sqrt(8.0), &mask);
  auto o1 = vals(out[0]), o2 = vals(out[1]), o3 = vals(out[2]);
  for (size_t i = 0; i < ref1.size(); ++i) {
    CHECK(o1[i] == f32(ref1[i]));
    CHECK(o2[i] == Approx(ref2[i]).margin(1e-6));
    CHECK(o3[i] == o1[i]);
  }
  CHECK(std::isfinite(vals(out[3])[0]));
}

// ------------------------------------------------------------------ symbols

TEST_CASE("symbols: hint, --bind, forced by a fixed dim, default; contradictions name the node", "[ops][symbols]") {
  std::string body = g1("input %1 \"n\": Sym(s0)\ninput %2 \"x\": f32[s0]\ninput %3 \"w\": f32[8]\n",
                        "%4: f32[8] = aten.mul.Tensor(self=%2, other=%3)  // mul\n"
                        "%5: Sym(s0) = aten.sym_size.int(self=%2, dim=0)\n"
                        "%6: Sym(2*s0) = _operator.mul(a=%5, b=2)\n"
                        "%7: f32[2, s0] = aten.expand.default(self=%2, size=[2, %5])\n"
                        "%8: f32[2*s0] = aten.view.default(self=%7, size=[%6])\n",
                        "output %4\noutput %8\n");
  {
    auto m = parse(body, "symbol s0 range=[2, ?]\n");
    Interpreter in(*m, {});
    CHECK(in.bindings().at("s0") == 8);
    CHECK_THAT(in.bindingSource("s0"), Catch::Contains("forced by node 'mul'"));
    auto out = in.run(in.makeInputs(1));
    CHECK(out[1].t.shape == Shape{16});
  }
  {
    // The equations come before the hint: a wrong hint does not win.
    auto m = parse(body, "symbol s0 range=[2, ?] hint=5\n");
    Interpreter in(*m, {});
    CHECK(in.bindings().at("s0") == 8);
    CHECK_THAT(in.bindingSource("s0"), Catch::Contains("forced by node 'mul'"));
  }
  {
    // Nothing forces s1: its hint.
    auto m = parse(g1("input %1 \"x\": f32[s1]\n", "%2: f32[s1] = aten.neg.default(self=%1)\n", "output %2\n"),
                   "symbol s1 range=[2, ?] hint=8\n");
    Interpreter in(*m, {});
    CHECK(in.bindingSource("s1") == "hint");
  }
  {
    // s27 // 2 == 128 and s27 - s27 // 2 == 128 (two contractions with a [128, 128] weight)
    // fix s27 = 256; the hint (100) contradicts them.
    auto m = parse(g1("input %1 \"y\": f32[4, s27]\ninput %2 \"w\": f32[128, 128]\n",
                      "%3: f32[4, s27//2] = aten.slice.Tensor(self=%1, dim=1, start=0, end=sym(s27//2))  // lo\n"
                      "%4: f32[4, s27 - s27//2] = aten.slice.Tensor(self=%1, dim=1, start=sym(s27//2))  // hi\n"
                      "%5: f32[4, 128] = aten.mm.default(self=%3, mat2=%2)  // mm\n"
                      "%6: f32[4, 128] = aten.mm.default(self=%4, mat2=%2)  // mm_1\n",
                      "output %5\noutput %6\n"),
                   "symbol s27 range=[2, ?] hint=100\n");
    Interpreter in(*m, {});
    CHECK(in.bindings().at("s27") == 256);
    CHECK_THAT(in.bindingSource("s27"), Catch::Contains("forced by node 'mm"));
  }
  {
    // Only s // 2 == 128 is known: s in [256, 257]; the hint 257 is allowed and kept.
    auto m = parse(g1("input %1 \"y\": f32[4, s3]\ninput %2 \"w\": f32[128, 128]\n",
                      "%3: f32[4, s3//2] = aten.slice.Tensor(self=%1, dim=1, start=0, end=sym(s3//2))  // lo\n"
                      "%4: f32[4, 128] = aten.mm.default(self=%3, mat2=%2)  // mm\n",
                      "output %4\n"),
                   "symbol s3 range=[2, ?] hint=257\n");
    Interpreter in(*m, {});
    CHECK(in.bindings().at("s3") == 257);
    CHECK(in.bindingSource("s3") == "hint");
  }
  {
    auto m = parse(body, "symbol s0 range=[2, ?]\n");
    Options o;
    o.bind["s0"] = 7;
    Interpreter in(*m, o);
    CHECK(in.bindingSource("s0") == "--bind");
    REQUIRE_THROWS_WITH(in.run(in.makeInputs(1)), Catch::Contains("node 'mul'") && Catch::Contains("[7]") &&
                                                       Catch::Contains("[8]"));
  }
  {
    Options o;
    o.bind["s9"] = 7;
    auto m = parse(body, "symbol s0 range=[2, ?]\n");
    REQUIRE_THROWS_WITH(Interpreter(*m, o), Catch::Contains("no symbol 's9'"));
  }
  {
    // Free symbol, nothing forces it: the default, clamped to the range.
    auto m = parse(g1("input %1 \"x\": f32[s1]\n", "%2: f32[s1] = aten.neg.default(self=%1)\n", "output %2\n"),
                   "symbol s1 range=[20, ?]\n");
    Interpreter in(*m, {});
    CHECK(in.bindings().at("s1") == 20);
    CHECK(in.bindingSource("s1") == "default");
  }
}

TEST_CASE("a recorded shape that contradicts the computed one is an error naming the node", "[ops]") {
  REQUIRE_THROWS_WITH(run(g1("input %1 \"x\": f32[2, 3]\n", "%2: f32[3, 3] = aten.neg.default(self=%1)  // bad\n",
                             "output %2\n"),
                          {T({2, 3}, DType::F32, {1, 2, 3, 4, 5, 6})}),
                      Catch::Contains("node 'bad'") && Catch::Contains("shape contradiction"));
  REQUIRE_THROWS_WITH(run(g1("input %1 \"x\": f32[2]\n", "%2: f32[2] = aten.frobnicate.default(self=%1)  // f\n",
                             "output %2\n"),
                          {T({2}, DType::F32, {1, 2})}),
                      Catch::Contains("not supported") && Catch::Contains("aten.frobnicate"));
  REQUIRE_THROWS_WITH(run(g1("input %1 \"a\": f32[2, 3]\ninput %2 \"b\": f32[2, 3]\n",
                             "%3: f32[2, 3] = aten.mm.default(self=%1, mat2=%2)  // mm\n", "output %3\n"),
                          {T({2, 3}, DType::F32, {1, 2, 3, 4, 5, 6}), T({2, 3}, DType::F32, {1, 2, 3, 4, 5, 6})}),
                      Catch::Contains("node 'mm'") && Catch::Contains("cannot be multiplied"));
}

TEST_CASE("random inputs suit their roles", "[ops][inputs]") {
  auto m2 = parse(g1("input %1 \"ids\": i64[64]\ninput %2 \"emb\": bf16[50, 8] parameter \"embed.weight\"\n"
                     "input %3 \"positions\": i64[64]\ninput %4 \"cache\": bf16[40, 4]\ninput %5 \"q\": bf16[64, 8]\n"
                     "input %6 \"s\": f32[1]\n",
                     "%7: bf16[64, 8] = aten.embedding.default(weight=%2, indices=%1)\n"
                     "_C.rotary_embedding.default(positions=%3, query=%5, key=None, head_size=4, cos_sin_cache=%4, "
                     "is_neox=true)\n"
                     "%8: f32[1] = aten.reciprocal.default(self=%6)\n",
                     "output %7\noutput %8\n"));
  Interpreter in(*m2, {});
  auto inputs = in.makeInputs(3);
  for (double v : inputs[0].t.values()) CHECK((v >= 0 && v < 50));
  for (double v : inputs[2].t.values()) CHECK((v >= 0 && v < 40));
  for (double v : inputs[5].t.values()) CHECK(v > 0);
  for (double v : inputs[1].t.values()) CHECK(v == bf16(v));
  // Seeded: the same seed gives the same inputs, another seed others.
  auto again = in.makeInputs(3), other = in.makeInputs(4);
  CHECK(again[4].t.values() == inputs[4].t.values());
  CHECK(other[4].t.values() != inputs[4].t.values());
}
