# Golden test: `gm.code` has no shape annotations; the importer names the first value
# without one (exit code 2, one line on stderr).
#
# ERR: fxfuse: error: {{.*}}no_annotations.py: line [[@LINE+3]]: value 'arg0_1' has no shape annotation; dump with print_readable(include_stride=True, include_device=True)
# ERR-NOT: {{.}}
class GraphModule(torch.nn.Module):
    def forward(self, arg0_1, arg1_1):
        mm = torch.ops.aten.mm.default(arg0_1, arg1_1);  arg0_1 = arg1_1 = None
        return (mm,)
