// Ordering, scattering and row-statistic ops of the interpreter (ops_select.cc, ops_reduce.cc,
// ops_linalg.cc) against hand-computed values and f64 references.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ir/status.h"
#include "tests/interpreter/test_util.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;
using fxfuse::FxError;
using fxfuse::ir::DType;

namespace {

std::vector<double> vals(const RValue& r) {
  REQUIRE(r.isTensor());
  return r.t.values();
}

std::string g1(const std::string& inputs, const std::string& body, const std::string& outputs) {
  return "graph @g {\n" + inputs + body + outputs + "}\n";
}

}  // namespace

TEST_CASE("topk: largest and smallest, NaN is the largest, ties keep index order", "[ops][select]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto out = run(g1("input %1 \"x\": f32[2, 5]\n",
                    "%2: f32[2, 3], %3: i64[2, 3] = aten.topk.default(self=%1, k=3)\n"
                    "%4: f32[2, 2], %5: i64[2, 2] = aten.topk.default(self=%1, k=2, dim=-1, largest=false)\n",
                    "output %2\noutput %3\noutput %4\noutput %5\n"),
                 {T({2, 5}, DType::F32, {0.5, 2, -1, 2, 1, 3, nan, -4, 0, 3})});
  auto v = vals(out[0]);
  CHECK(v[0] == 2);
  CHECK(v[1] == 2);
  CHECK(v[2] == 1);
  CHECK(std::isnan(v[3]));
  CHECK(v[4] == 3);
  CHECK(v[5] == 3);
  CHECK(vals(out[1]) == std::vector<double>{1, 3, 4, 1, 0, 4});
  CHECK(vals(out[2]) == std::vector<double>{-1, 0.5, -4, 0});
  CHECK(vals(out[3]) == std::vector<double>{2, 0, 2, 3});
}

TEST_CASE("topk along dim 0 and of bf16 values", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": bf16[3, 2]\n",
                    "%2: bf16[1, 2], %3: i64[1, 2] = aten.topk.default(self=%1, k=1, dim=0)\n",
                    "output %2\noutput %3\n"),
                 {T({3, 2}, DType::BF16, {1, 6, 5, 2, 3, 4})});
  CHECK(vals(out[0]) == std::vector<double>{5, 6});
  CHECK(vals(out[1]) == std::vector<double>{1, 0});
}

TEST_CASE("topk with k out of range is an error", "[ops][select]") {
  CHECK_THROWS_AS(run(g1("input %1 \"x\": f32[3]\n", "%2: f32[4], %3: i64[4] = aten.topk.default(self=%1, k=4)\n",
                         "output %2\n"),
                      {T({3}, DType::F32, {1, 2, 3})}),
                  FxError);
}

TEST_CASE("clamp of a number instead of a tensor is an error, not a crash", "[ops][select]") {
  // Found by the pipeline fuzzer: `self` a literal made the op read a tensor without storage.
  for (const char* op : {"aten.clamp_min.default(self=-9, min=-448.0)", "aten.clamp_max.default(self=2, max=1.0)",
                         "aten.clamp.default(self=0.5, min=0.0, max=1.0)"})
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[3]\n", fmt::format("%2: f32[3] = {}\n", op), "output %2\n"),
                          {T({3}, DType::F32, {1, 2, 3})}),
                      Catch::Contains("argument 'self' must be a tensor"));
}

TEST_CASE("stack of numbers instead of tensors is an error, not a crash", "[ops][select]") {
  // A list of numbers became tensors without storage (unsqueeze of a non-tensor): a segfault.
  CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[3]\n", "%2: f32[2] = aten.stack.default(tensors=[1.0, 2.0], dim=0)\n",
                           "output %2\n"),
                        {T({3}, DType::F32, {1, 2, 3})}),
                    Catch::Contains("stack: list items must be tensors"));
}

TEST_CASE("sort ascending and descending, stable overload", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f32[5]\n",
                    "%2: f32[5], %3: i64[5] = aten.sort.default(self=%1)\n"
                    "%4: f32[5], %5: i64[5] = aten.sort.stable(self=%1, stable=true, dim=0, descending=true)\n",
                    "output %2\noutput %3\noutput %4\noutput %5\n"),
                 {T({5}, DType::F32, {3, -1, 3, 0, 2})});
  CHECK(vals(out[0]) == std::vector<double>{-1, 0, 2, 3, 3});
  CHECK(vals(out[1]) == std::vector<double>{1, 3, 4, 0, 2});
  CHECK(vals(out[2]) == std::vector<double>{3, 3, 2, 0, -1});
  CHECK(vals(out[3]) == std::vector<double>{0, 2, 4, 3, 1});
}

TEST_CASE("prepare_softmax_online gives the row max and the sum of exp(x - max)", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f32[2, 3]\n",
                    "%2: f32[2, 1], %3: f32[2, 1] = prims.prepare_softmax_online.default(a=%1, dim=1)\n"
                    "%4: f32[2, 3] = aten.sub.Tensor(self=%1, other=%2)\n"
                    "%5: f32[2, 3] = aten.exp.default(self=%4)\n"
                    "%6: f32[2, 3] = aten.div.Tensor(self=%5, other=%3)\n",
                    "output %2\noutput %3\noutput %6\n"),
                 {T({2, 3}, DType::F32, {1, 2, 3, 0, 0, std::log(2.0)})});
  CHECK(vals(out[0]) == std::vector<double>{3, f32(std::log(2.0))});
  auto s = vals(out[1]);
  CHECK(s[0] == f32(std::exp(-2.0) + std::exp(-1.0) + 1.0));
  CHECK(s[1] == Approx(2.0).epsilon(1e-7));  // 0.5 + 0.5 + 1
  auto p = vals(out[2]);
  CHECK(p[3] == Approx(0.25).epsilon(1e-6));
  CHECK(p[5] == Approx(0.5).epsilon(1e-6));
}

TEST_CASE("scatter (src and value), scatter_add and index_add", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f32[2, 4]\ninput %2 \"idx\": i64[2, 2]\ninput %3 \"src\": f32[2, 2]\n"
                    "input %4 \"rows\": i64[3]\ninput %5 \"add\": f32[3, 4]\n",
                    "%6: f32[2, 4] = aten.scatter.src(self=%1, dim=1, index=%2, src=%3)\n"
                    "%7: f32[2, 4] = aten.scatter.value(self=%1, dim=1, index=%2, value=9.0)\n"
                    "%8: f32[2, 4] = aten.scatter_add.default(self=%1, dim=1, index=%2, src=%3)\n"
                    "%9: f32[2, 4] = aten.index_add.default(self=%1, dim=0, index=%4, source=%5, alpha=2)\n",
                    "output %6\noutput %7\noutput %8\noutput %9\n"),
                 {T({2, 4}, DType::F32, {0, 1, 2, 3, 4, 5, 6, 7}), T({2, 2}, DType::I64, {3, 0, -1, 1}),
                  T({2, 2}, DType::F32, {10, 20, 30, 40}), T({3}, DType::I64, {1, 0, 1}),
                  T({3, 4}, DType::F32, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3})});
  CHECK(vals(out[0]) == std::vector<double>{20, 1, 2, 10, 4, 40, 6, 30});
  CHECK(vals(out[1]) == std::vector<double>{9, 1, 2, 9, 4, 9, 6, 9});
  CHECK(vals(out[2]) == std::vector<double>{20, 1, 2, 13, 4, 45, 6, 37});
  // row 0 += 2*[2,2,2,2]; row 1 += 2*([1,1,1,1] + [3,3,3,3])
  CHECK(vals(out[3]) == std::vector<double>{4, 5, 6, 7, 12, 13, 14, 15});
}

TEST_CASE("scatter_add of repeated indices accumulates in f64 and rounds once", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": bf16[1]\ninput %2 \"idx\": i64[3]\ninput %3 \"src\": bf16[3]\n",
                    "%4: bf16[1] = aten.scatter_add.default(self=%1, dim=0, index=%2, src=%3)\n", "output %4\n"),
                 {T({1}, DType::BF16, {256}), T({3}, DType::I64, {0, 0, 0}), T({3}, DType::BF16, {0.5, 0.5, 1})});
  CHECK(vals(out[0]) == std::vector<double>{258});  // 256 + 2, not 256 + 0.5 (rounded) + ...
}

TEST_CASE("scatter with an index out of range is an error", "[ops][select]") {
  CHECK_THROWS_AS(run(g1("input %1 \"x\": f32[2]\ninput %2 \"idx\": i64[1]\ninput %3 \"src\": f32[1]\n",
                         "%4: f32[2] = aten.scatter.src(self=%1, dim=0, index=%2, src=%3)\n", "output %4\n"),
                      {T({2}, DType::F32, {0, 0}), T({1}, DType::I64, {2}), T({1}, DType::F32, {1})}),
                  FxError);
}

TEST_CASE("aten.pad constant mode; other modes are refused", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f32[2, 2]\n",
                    "%2: f32[2, 5] = aten.pad.default(self=%1, pad=[1, 2], mode=\"constant\", value=-1.0)\n",
                    "output %2\n"),
                 {T({2, 2}, DType::F32, {1, 2, 3, 4})});
  CHECK(vals(out[0]) == std::vector<double>{-1, 1, 2, -1, -1, -1, 3, 4, -1, -1});
  CHECK_THROWS_AS(run(g1("input %1 \"x\": f32[2, 2]\n",
                         "%2: f32[2, 4] = aten.pad.default(self=%1, pad=[1, 1], mode=\"reflect\")\n", "output %2\n"),
                      {T({2, 2}, DType::F32, {1, 2, 3, 4})}),
                  FxError);
}

TEST_CASE("layer norm with and without weight/bias, native outputs mean and rstd", "[ops][select]") {
  // Row [1, 2, 3, 6]: mean 3, var (4 + 1 + 0 + 9) / 4 = 3.5.
  auto out = run(g1("input %1 \"x\": f32[1, 4]\ninput %2 \"w\": f32[4]\ninput %3 \"b\": f32[4]\n",
                    "%4: f32[1, 4] = aten.layer_norm.default(input=%1, normalized_shape=[4], weight=%2, bias=%3, eps=0.5)\n"
                    "%5: f32[1, 4], %6: f32[1, 1], %7: f32[1, 1] = aten.native_layer_norm.default(input=%1, normalized_shape=[4], weight=None, bias=None, eps=0.5)\n",
                    "output %4\noutput %5\noutput %6\noutput %7\n"),
                 {T({1, 4}, DType::F32, {1, 2, 3, 6}), T({4}, DType::F32, {1, 2, 1, 1}), T({4}, DType::F32, {0, 0, 1, 0})});
  const double rstd = 0.5;  // 1 / sqrt(3.5 + 0.5)
  CHECK(vals(out[0]) == std::vector<double>{-2 * rstd, -1 * rstd * 2, 1, 3 * rstd});
  CHECK(vals(out[1]) == std::vector<double>{-1, -0.5, 0, 1.5});
  CHECK(vals(out[2]) == std::vector<double>{3});
  CHECK(vals(out[3]) == std::vector<double>{rstd});
}

TEST_CASE("group norm: blocks of channels and positions, weight and bias per channel", "[ops][select]") {
  // N=1, C=4, HxW=2, 2 groups: group 0 is channels 0-1 = [1, 3, 5, 7] (mean 4, var 5),
  // group 1 is channels 2-3 = [2, 2, 2, 2] (mean 2, var 0: every value (x - m) * rstd = 0).
  auto out = run(g1("input %1 \"x\": f32[1, 4, 2]\ninput %2 \"w\": f32[4]\ninput %3 \"b\": f32[4]\n",
                    "%4: f32[1, 4, 2], %5: f32[1, 2], %6: f32[1, 2] = aten.native_group_norm.default(input=%1, "
                    "weight=%2, bias=%3, N=1, C=4, HxW=2, group=2, eps=4.0)\n",
                    "output %4\noutput %5\noutput %6\n"),
                 {T({1, 4, 2}, DType::F32, {1, 3, 5, 7, 2, 2, 2, 2}), T({4}, DType::F32, {1, 2, 1, 1}),
                  T({4}, DType::F32, {0, 0, 10, 20})});
  const double rstd = 1.0 / 3;  // 1 / sqrt(5 + 4)
  // Channel 1 (values 5, 7) is scaled by its weight 2; channels 2 and 3 are their biases.
  CHECK(vals(out[0]) == std::vector<double>{f32(-3 * rstd), f32(-1 * rstd), f32(2 * rstd), f32(6 * rstd), 10, 10,
                                            20, 20});
  CHECK(vals(out[1]) == std::vector<double>{4, 2});
  CHECK(vals(out[2]) == std::vector<double>{f32(rstd), 0.5});
  CHECK_THROWS_AS(run(g1("input %1 \"x\": f32[1, 4, 2]\n",
                         "%2: f32[1, 4, 2], %3: f32[1, 3], %4: f32[1, 3] = aten.native_group_norm.default(input=%1, "
                         "weight=None, bias=None, N=1, C=4, HxW=2, group=3, eps=1e-05)\n",
                         "output %2\n"),
                      {T({1, 4, 2}, DType::F32, {1, 2, 3, 4, 5, 6, 7, 8})}),
                  FxError);
}

TEST_CASE("round.decimals scales around the rounding, half to even", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f64[3]\n",
                    "%2: f64[3] = aten.round.decimals(self=%1, decimals=2)\n"
                    "%3: f64[3] = aten.round.decimals(self=%1, decimals=-1)\n"
                    "%4: f64[3] = aten.round.default(self=%1)\n",
                    "output %2\noutput %3\noutput %4\n"),
                 {T({3}, DType::F64, {1.2345, 125, -2.5})});
  CHECK(vals(out[0]) == std::vector<double>{std::nearbyint(1.2345 * 100) / 100, 125, -2.5});
  CHECK(vals(out[1]) == std::vector<double>{0, 120, -0.0});  // 12.5 -> 12, -0.25 -> -0
  CHECK(vals(out[2]) == std::vector<double>{1, 125, -2});
}

TEST_CASE("var_mean.correction over a non-trailing dim", "[ops][select]") {
  auto out = run(g1("input %1 \"x\": f32[3, 2]\n",
                    "%2: f32[1, 2], %3: f32[1, 2] = aten.var_mean.correction(self=%1, dim=[0], correction=1, keepdim=true)\n"
                    "%4: f32[2], %5: f32[2] = aten.var_mean.correction(self=%1, dim=[0], correction=0)\n",
                    "output %2\noutput %3\noutput %4\noutput %5\n"),
                 {T({3, 2}, DType::F32, {1, 10, 2, 10, 6, 40})});
  // column 0: mean 3, squares 4 + 1 + 9 = 14; column 1: mean 20, squares 100 + 100 + 400 = 600
  CHECK(vals(out[0]) == std::vector<double>{7, 300});
  CHECK(vals(out[1]) == std::vector<double>{3, 20});
  CHECK(vals(out[2]) == std::vector<double>{f32(14.0 / 3), 200});
  CHECK(vals(out[3]) == std::vector<double>{3, 20});
}

TEST_CASE("histc counts per bin: the last bin is closed, values outside are not counted", "[ops][select]") {
  auto out = run(g1("input %1 \"ids\": i64[7]\ninput %2 \"x\": f32[4]\n",
                    "%3: i64[4] = aten.histc.default(self=%1, bins=4, min=0, max=3)\n"
                    "%4: f32[2] = aten.histc.default(self=%2, bins=2)\n",
                    "output %3\noutput %4\n"),
                 {T({7}, DType::I64, {0, 3, 3, 1, 5, -1, 1}), T({4}, DType::F32, {1, 2, 3, 4})});
  CHECK(vals(out[0]) == std::vector<double>{1, 2, 0, 2});
  CHECK(vals(out[1]) == std::vector<double>{2, 2});  // data range [1, 4]: bins [1, 2.5), [2.5, 4]
}

TEST_CASE("_grouped_mm: rows of group g use matrix g, rows past the last offset are 0", "[ops][linalg]") {
  auto out = run(g1("input %1 \"a\": f32[4, 2]\ninput %2 \"w\": f32[2, 2, 1]\ninput %3 \"offs\": i32[2]\n",
                    "%4: f32[4, 1] = aten._grouped_mm.default(self=%1, mat2=%2, offs=%3)\n", "output %4\n"),
                 {T({4, 2}, DType::F32, {1, 2, 3, 4, 5, 6, 7, 8}), T({2, 2, 1}, DType::F32, {1, 1, 10, -1}),
                  T({2}, DType::I32, {1, 3})});
  CHECK(vals(out[0]) == std::vector<double>{3, 26, 44, 0});
}

TEST_CASE("convolution: grouped, padded, strided 1-D and unbatched conv1d", "[ops][linalg]") {
  // Depthwise causal conv as Mamba writes it: groups = channels, padding = kernel - 1.
  auto out = run(g1("input %1 \"x\": f32[1, 2, 3]\ninput %2 \"w\": f32[2, 1, 2]\ninput %3 \"b\": f32[2]\n",
                    "%4: f32[1, 2, 4] = aten.convolution.default(input=%1, weight=%2, bias=%3, stride=[1], "
                    "padding=[1], dilation=[1], transposed=false, output_padding=[0], groups=2)\n"
                    "%5: f32[2, 3] = aten.view.default(self=%1, size=[2, 3])\n"
                    "%6: f32[2, 2] = aten.conv1d.default(input=%5, weight=%2, bias=%3, stride=[2], padding=[1], "
                    "groups=2)\n",
                    "output %4\noutput %6\n"),
                 {T({1, 2, 3}, DType::F32, {1, 2, 3, 4, 5, 6}), T({2, 1, 2}, DType::F32, {1, 10, 2, 20}),
                  T({2}, DType::F32, {0.5, -0.5})});
  // channel 0, w = [1, 10]: [0*1 + 1*10, 1 + 20, 2 + 30, 3 + 0] + 0.5
  CHECK(vals(out[0]) == std::vector<double>{10.5, 21.5, 32.5, 3.5, 79.5, 107.5, 129.5, 11.5});
  CHECK(vals(out[1]) == std::vector<double>{10.5, 32.5, 79.5, 129.5});
}

TEST_CASE("log_sigmoid is stable for large |x|; eye", "[ops]") {
  auto out = run(g1("input %1 \"x\": f64[3]\n",
                    "%2: f64[3] = aten.log_sigmoid.default(self=%1)\n"
                    "%3: f32[2, 3] = aten.eye.m(n=2, m=3, dtype=f32)\n",
                    "output %2\noutput %3\n"),
                 {T({3}, DType::F64, {0, -800, 800})});
  auto v = vals(out[0]);
  CHECK(v[0] == Approx(-std::log(2.0)));
  CHECK(v[1] == Approx(-800.0));
  CHECK(v[2] == Approx(0.0).margin(1e-300));
  CHECK(vals(out[1]) == std::vector<double>{1, 0, 0, 0, 1, 0});
}

TEST_CASE("torch.sym_sum adds a list of SymInts (Mamba-style chunked scans size buffers with it)", "[ops][symbols]") {
  auto out = run(g1("input %1 \"x\": f32[4]\n",
                    "%2: Sym(4) = aten.sym_size.int(self=%1, dim=0)\n"
                    "%3: Sym(11) = torch.sym_sum(args=[%2, %2, 3])\n"
                    "%4: f32[11] = aten.zeros.default(size=[%3], dtype=f32)\n",
                    "output %4\n"),
                 {T({4}, DType::F32, {1, 2, 3, 4})});
  CHECK(out[0].t.shape == Shape{11});
}

TEST_CASE("an index tensor element past int64 is refused naming its value", "[ops][select]") {
  // An i64 tensor holds what a graph's arithmetic made: a cast of 1e30 or inf to int64 keeps
  // it. Each op compares the element with its bounds before converting it (a conversion of a
  // value outside int64 is undefined; on x86 it read as INT64_MIN, the message's value).
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {1e30, -1e30, inf}) {
    INFO(bad);
    const Tensor idx = T({1}, DType::I64, {bad});
    const std::string shown = fmt::format("{}", bad);
    const Tensor x = T({2, 2}, DType::F32, {1, 2, 3, 4});
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[2, 2]\ninput %2 \"idx\": i64[1]\n",
                             "%3: f32[1, 2] = aten.index_select.default(self=%1, dim=0, index=%2)\n", "output %3\n"),
                          {x, idx}),
                      Catch::Contains("index_select: index " + shown + " is out of bounds for size 2"));
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[2, 2]\ninput %2 \"idx\": i64[1]\n",
                             "%3: f32[1, 2] = aten.embedding.default(weight=%1, indices=%2)\n", "output %3\n"),
                          {x, idx}),
                      Catch::Contains("token id " + shown + " is outside the vocabulary of 2 rows"));
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[2, 2]\ninput %2 \"idx\": i64[1, 1]\n",
                             "%3: f32[1, 1] = aten.gather.default(self=%1, dim=1, index=%2)\n", "output %3\n"),
                          {x, T({1, 1}, DType::I64, {bad})}),
                      Catch::Contains("gather: index " + shown + " is out of bounds for size 2"));
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[2]\ninput %2 \"idx\": i64[1]\ninput %3 \"src\": f32[1]\n",
                             "%4: f32[2] = aten.scatter.src(self=%1, dim=0, index=%2, src=%3)\n", "output %4\n"),
                          {T({2}, DType::F32, {0, 0}), idx, T({1}, DType::F32, {1})}),
                      Catch::Contains("scatter: index " + shown + " is out of bounds for size 2"));
    CHECK_THROWS_WITH(run(g1("input %1 \"x\": i64[1]\n", "%2: Sym(u0) = aten._local_scalar_dense.default(self=%1)\n",
                             "output %2\n"),
                          {idx}),
                      Catch::Contains("integer value " + shown + " is outside int64"));
  }
}

TEST_CASE("iota of a negative length is refused", "[ops][select]") {
  CHECK_THROWS_WITH(run(g1("input %1 \"x\": f32[1]\n",
                           "%2: i64[1] = prims.iota.default(length=-1, start=0, step=1, dtype=i64)\n",
                           "output %2\n"),
                        {T({1}, DType::F32, {0})}),
                    Catch::Contains("iota: length -1 is negative"));
}
