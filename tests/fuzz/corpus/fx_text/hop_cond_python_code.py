


def forward(self, x: "f32[s17, 8]", y: "f32[s17, 8]"):
    # File: demo/fx_text_gen_fixtures.py:58 in forward, code: return torch.cond(x.sum() > 0, t, f, (x, y))
    sum_1: "f32[]" = torch.ops.aten.sum.default(x)
    gt: "b8[]" = torch.ops.aten.gt.Scalar(sum_1, 0);  sum_1 = None
    
    # File: <eval_with_key>.5:10 in forward, code: cond = torch.ops.higher_order.cond(l_args_0_, cond_true_0, cond_false_0, (l_args_3_0_, l_args_3_1_));  l_args_0_ = cond_true_0 = cond_false_0 = l_args_3_0_ = l_args_3_1_ = None
    true_graph_0 = self.true_graph_0
    false_graph_0 = self.false_graph_0
    cond = torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, (x, y));  gt = true_graph_0 = false_graph_0 = x = y = None
    getitem: "f32[s17, 8]" = cond[0];  cond = None
    return (getitem,)
    