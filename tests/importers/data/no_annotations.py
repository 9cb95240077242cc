


def forward(self, p_lin_weight, p_lin_bias, x):
    permute = torch.ops.aten.permute.default(p_lin_weight, [1, 0]);  p_lin_weight = None
    addmm = torch.ops.aten.addmm.default(p_lin_bias, x, permute);  p_lin_bias = x = permute = None
    relu = torch.ops.aten.relu.default(addmm);  addmm = None
    sum_1 = torch.ops.aten.sum.dim_IntList(relu, [-1]);  relu = None
    return (sum_1,)
    