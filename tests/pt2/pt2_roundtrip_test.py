#!/usr/bin/env python3
"""Every .pt2 that `fxfuse compile -o X.pt2` writes reads back through fxfuse's own
importer as the graph it compiled, and passes the torch.export schema checker.

Usage: pt2_roundtrip_test.py FXFUSE CHECKER INPUT...   (.pt2 archives or FX text dumps)

For each input:
  * A = `compile IN -o A.fxg`, B = `compile IN -o B.pt2`, C = `compile IN --op-names=vllm -o C.pt2`;
  * B and C pass tools/fxfuse_torch/check_pt2_schema.py;
  * `inspect --json` op counts: B equals A, plus one `aten._to_copy.default` per fxfuse
    output written at its fp32 natural dtype (counted from B's JSON: a `_to_copy` reading
    a value named `*_f32`);
  * C: every fused fxfuse op of A is either still an fxfuse op in C or became one
    `auto_functionalized` call of a vLLM op (fused-op count conserved), other ops as in B
    plus the `empty` buffers and `sym_size` reads the vLLM calls need;
  * B compiles again to the same op counts as A (fused ops are stable);
  * for archive inputs, every data/ member (weights, constants) is carried over byte for byte;
  * every graph of B and C (subgraphs included) defines each name once, as torch's
    deserializer does: a node defines its name, and a node whose results are a tuple (a
    higher-order op, several results, a Tensor[] result) defines a getitem per result too;
  * B and C have `data/sample_inputs/model.pt` (torch.export.load requires it): a torch.save
    archive whose pickle, read with only the globals torch's weights-only loader allows,
    is `((one entry per user input...), {})`, each tensor with its input's rank and a storage
    record that exists.
"""
import collections
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

FUSED = {"fxfuse.rms_norm_quant.default", "fxfuse.fused_add_rms_norm_quant.default",
         "fxfuse.silu_and_mul_quant.default", "fxfuse.attention_quant.default"}
VLLM_HELPERS = {"aten.empty.memory_format", "aten.sym_size.int"}


def sh(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def ops(fxfuse, path):
    return collections.Counter(json.loads(sh(fxfuse, "inspect", "--json", path))["ops"])


def program(path):
    with zipfile.ZipFile(path) as z:
        member = next(n for n in z.namelist() if "/models/" in n and n.endswith(".json"))
        return json.loads(z.read(member))


def data_members(path):
    with zipfile.ZipFile(path) as z:
        return {n.split("/", 1)[1]: z.read(n) for n in z.namelist() if n.split("/", 1)[1].startswith("data/")}


def casts_added(path):
    nodes = program(path)["graph_module"]["graph"]["nodes"]
    return sum(1 for n in nodes if n["target"] == "torch.ops.aten._to_copy.default"
               and n["inputs"][0]["arg"].get("as_tensor", {}).get("name", "").endswith("_f32"))


def views_as_reshape(path):
    """aten.view nodes the writer wrote as aten.reshape (their input's strides do not allow a
    view in torch: a copy fxfuse's passes removed); it marks them in the node metadata."""
    nodes = program(path)["graph_module"]["graph"]["nodes"]
    return sum(1 for n in nodes if n["target"] == "torch.ops.aten.reshape.default"
               and n["metadata"].get("fxfuse_view_as_reshape") == "true")


SAFE_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
                ("collections", "OrderedDict"), ("torch.storage", "UntypedStorage")}


def sample_inputs_problems(path):
    """What is wrong with the archive's sample inputs (empty when they are well-formed)."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/data/sample_inputs/model.pt")]
        if not names:
            return ["no data/sample_inputs/model.pt"]
        inner = zipfile.ZipFile(io.BytesIO(z.read(names[0])))
    records = {n.split("/", 1)[1]: inner.read(n) for n in inner.namelist()}
    if "data.pkl" not in records or "version" not in records:
        return [f"sample inputs: no data.pkl or version record ({sorted(records)})"]

    class Tensor:
        def __init__(self, storage, offset, size, stride, *rest):
            self.storage, self.size, self.stride = storage, size, stride

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            # legacy typed storages (torch.BFloat16Storage); torch.UntypedStorage is not allowed
            # under that name (the class pickles as torch.storage.UntypedStorage)
            legacy = module == "torch" and name.endswith("Storage") and name != "UntypedStorage"
            ok = (module, name) in SAFE_GLOBALS or legacy or (module == "torch" and name.startswith("float8_"))
            if not ok:
                raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
            if name.startswith("_rebuild_tensor"):
                return Tensor
            return lambda *a: name if module == "collections" else name

        def persistent_load(self, pid):
            if pid[0] != "storage" or f"data/{pid[2]}" not in records:
                raise pickle.UnpicklingError(f"storage {pid} has no record")
            return pid

    try:
        args, kwargs = Reader(io.BytesIO(records["data.pkl"])).load()
    except Exception as e:  # noqa: BLE001 - any malformation is the finding
        return [f"sample inputs: {type(e).__name__}: {e}"]
    graph = program(path)["graph_module"]["graph"]
    specs = program(path)["graph_module"]["signature"]["input_specs"]
    users = [s["user_input"]["arg"] for s in specs if "user_input" in s]
    if kwargs != {} or len(args) != len(users):
        return [f"sample inputs: {len(args)} args and {kwargs} for {len(users)} user inputs"]
    problems = []
    for a, u in zip(args, users):
        if "as_tensor" in u:
            rank = len(graph["tensor_values"][u["as_tensor"]["name"]]["sizes"])
            if not isinstance(a, Tensor) or len(a.size) != rank:
                problems.append(f"sample input for {u['as_tensor']['name']}: not a rank-{rank} tensor")
    return problems


def names_defined_twice(graph, where="graph"):
    """Names torch's deserializer would define twice in `graph` or its subgraphs (graph.lint()
    refuses "Node redefined name")."""
    problems, seen = [], set()

    def define(name, what):
        if name in seen:
            problems.append(f"{where}: {what} redefines name {name}")
        seen.add(name)

    for node in graph["nodes"]:
        outs = node["outputs"]
        tuple_result = (node.get("is_hop_single_tensor_return") is False or len(outs) != 1
                        or "as_tensors" in outs[0])
        if tuple_result:
            define(node["name"], f"node {node['target']}")
            for o in outs:
                for ref in o.get("as_tensors", [o.get("as_tensor")]):
                    if ref and ref.get("name"):
                        define(ref["name"], f"a result of {node['target']}")
        else:
            define(node["name"], f"node {node['target']}")
        for arg in node["inputs"]:
            sub = arg["arg"].get("as_graph")
            if sub:
                problems += names_defined_twice(sub["graph"], f"{where}/{sub['name']}")
    return problems


def check(fxfuse, checker, src, tmp):
    base = os.path.join(tmp, os.path.basename(src).replace(".", "_"))
    a, b, c, d = base + ".fxg", base + ".pt2", base + ".vllm.pt2", base + ".again.fxg"
    sh(fxfuse, "compile", src, "-o", a, "-q")
    sh(fxfuse, "compile", src, "-o", b, "-q")
    sh(fxfuse, "compile", src, "--op-names=vllm", "-o", c, "-q")
    problems = []
    r = subprocess.run([sys.executable, checker, b, c], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("schema check:\n    " + r.stdout.strip().replace("\n", "\n    "))
    want, got_b, got_c = ops(fxfuse, a), ops(fxfuse, b), ops(fxfuse, c)
    want_b = want.copy()
    n_casts = casts_added(b)
    if n_casts:
        want_b["aten._to_copy.default"] += n_casts
    n_views = views_as_reshape(b)

    def views_written_as_reshape(counts):
        counts = counts.copy()
        counts["aten.view.default"] -= n_views
        counts["aten.reshape.default"] += n_views
        return counts

    want_b = views_written_as_reshape(want_b)
    if got_b != want_b:
        problems.append(f"op counts of the .pt2 differ from the .fxg: {dict(got_b - want_b)} extra, "
                        f"{dict(want_b - got_b)} missing")
    fused_a = sum(want[k] for k in FUSED)
    fused_c = sum(got_c[k] for k in FUSED)
    af = got_c["higher_order.auto_functionalized"] - want["higher_order.auto_functionalized"]
    if fused_a != fused_c + af:
        problems.append(f"vllm form: {fused_a} fused ops in the .fxg, {fused_c} left + {af} vLLM calls in the .pt2")
    rest_c = {k: v for k, v in got_c.items() if k not in FUSED | VLLM_HELPERS | {"higher_order.auto_functionalized"}}
    rest_b = {k: v for k, v in got_b.items() if k not in FUSED | VLLM_HELPERS | {"higher_order.auto_functionalized"}}
    if rest_c != rest_b:
        problems.append(f"vllm form changes other ops: {rest_c} vs {rest_b}")
    sh(fxfuse, "compile", b, "-o", d, "-q")
    again = ops(fxfuse, d)
    want_again = views_written_as_reshape(want)
    if again != want_again:
        problems.append(f"recompiling the .pt2 changes op counts: {dict(again - want_again)} extra, "
                        f"{dict(want_again - again)} missing")
    for path in (b, c):
        problems += [f"{os.path.basename(path)}: {p}" for p in sample_inputs_problems(path)]
        problems += [f"{os.path.basename(path)}: {p}" for p in names_defined_twice(program(path)["graph_module"]["graph"])]
    if zipfile.is_zipfile(src):
        orig = data_members(src)
        for path in (b, c):
            written = data_members(path)
            if any(written.get(k) != v for k, v in orig.items()):
                problems.append(f"{os.path.basename(path)}: data/ members not carried over unchanged")
    return problems, sum(want.values()), fused_a, af


def main():
    fxfuse, checker, inputs = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        for src in inputs:
            try:
                problems, nodes, fused, vllm_calls = check(fxfuse, checker, src, tmp)
            except RuntimeError as e:
                problems, nodes, fused, vllm_calls = [str(e)], 0, 0, 0
            if problems:
                failed += 1
                print(f"FAIL {src}:\n  " + "\n  ".join(problems))
            else:
                print(f"ok   {src}: {nodes} nodes, {fused} fused ops, {vllm_calls} as vLLM calls")
    print(f"{len(inputs) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
