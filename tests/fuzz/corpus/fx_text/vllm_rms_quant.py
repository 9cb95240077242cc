# Golden test (tests/importers/fx_text_golden_test.sh): a vLLM-shaped post-grad graph.
# `fxfuse inspect --json` is checked with the CHECK lines, `fxfuse convert -o x.fxg` with FXG.
#
# CHECK:      "functional": true,
# CHECK:      "ops": {
# CHECK-NEXT:   "_operator.mul": 1,
# CHECK-NEXT:   "aten.empty.memory_format": 2,
# CHECK-NEXT:   "aten.mm.default": 1,
# CHECK-NEXT:   "higher_order.auto_functionalized": 2
# CHECK-NEXT: },
# CHECK:      "stage": "post_grad_pre"
# CHECK:      "symbols": {
# CHECK-NEXT:   "s0": {
#
# FXG:      producer tool="fx-readable-text" {{.*}} stage=post_grad_pre functional=true
# FXG:      input %1 "arg0_1": Sym(s0)
# FXG-NEXT: input %2 "arg1_1": bf16[s0, 4096] cuda:0
# FXG:      %5: bf16[s0, 4096] cuda:0 = aten.empty.memory_format(size=[%1, 4096], *, dtype=bf16, device=device(cuda:0), pin_memory=false)  // empty
# FXG-NEXT: _, %6: bf16[s0, 4096] cuda:0 = higher_order.auto_functionalized(_mutable_op=@_C.rms_norm.default, *, result=%5, input=%2, weight=%3, epsilon=1e-05)  // auto_functionalized
# FXG-NEXT: %7: bf16[s0, 4096] cuda:0 = aten.empty.memory_format
# FXG-NEXT: _, %8: f8e4m3fn[s0, 4096] cuda:0 = higher_order.auto_functionalized(_mutable_op=@_C.static_scaled_fp8_quant.default, *, result=%7, input=%6, scale=%4)
# FXG-NEXT: %9: Sym(2*s0) = _operator.mul(a=%1, b=2)  // mul_7
# FXG-NEXT: %10: bf16[s0, 4096][1, s0] cuda:0 = aten.mm.default(self=%6, mat2=%6)  // mm
# FXG-NEXT: output %10
# FXG-NEXT: output %8
# FXG-NEXT: output %9
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "Sym(s0)", arg1_1: "bf16[s0, 4096][4096, 1]cuda:0", arg2_1: "bf16[4096][1]cuda:0", arg3_1: "f32[1][1]cuda:0"):
        # File: vllm/model_executor/layers/layernorm.py:120 in forward_cuda, code: ops.rms_norm(out, x, self.weight.data, self.variance_epsilon)
        empty: "bf16[s0, 4096][4096, 1]cuda:0" = torch.ops.aten.empty.memory_format([arg0_1, 4096], dtype = torch.bfloat16, device = device(type='cuda', index=0), pin_memory = False)
        auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = empty, input = arg1_1, weight = arg2_1, epsilon = 1e-05);  empty = arg1_1 = arg2_1 = None
        getitem_1: "bf16[s0, 4096][4096, 1]cuda:0" = auto_functionalized[1];  auto_functionalized = None
        empty_1: "bf16[s0, 4096][4096, 1]cuda:0" = torch.ops.aten.empty.memory_format([arg0_1, 4096], dtype = torch.bfloat16, device = device(type='cuda', index=0), pin_memory = False)
        auto_functionalized_1 = torch.ops.higher_order.auto_functionalized(torch.ops._C.static_scaled_fp8_quant.default, result = empty_1, input = getitem_1, scale = arg3_1);  empty_1 = arg3_1 = None
        getitem_3: "f8e4m3fn[s0, 4096][4096, 1]cuda:0" = auto_functionalized_1[1];  auto_functionalized_1 = None
        mul_7: "Sym(2*s0)" = arg0_1 * 2;  arg0_1 = None
        mm: "bf16[s0, 4096][1, s0]cuda:0" = torch.ops.aten.mm.default(getitem_1, getitem_1);  getitem_1 = None
        return (mm, getitem_3, mul_7)
