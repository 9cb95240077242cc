#!/usr/bin/env python3
"""Checks a PT2 archive against torch.export's archive layout and ExportedProgram schema.

Usage: check_pt2_schema.py FILE.pt2...     (Python 3 standard library only; no torch)

Written from the schema facts of torch/_export/serde/schema.py and serialize.py (field
names, union encoding, argument kinds) as torch 2.11 reads them: the archive members
(`archive_format` = pt2, `archive_version`, `byteorder`, `.data/version`,
`.data/serialization_id`, `models/<name>.json`), every required field of the program,
graph, nodes, tensor metadata and signature; unions with exactly one known key; node
targets torch can resolve; arguments in schema order (no positional after a keyword);
every name referenced defined before use and described in its value table; signature
specs matching the graph inputs/outputs; weights named by parameters present in the
archive; fxfuse ops and their argument names as in fxfuse_torch/schemas.py.
Prints one line per problem and exits 1 if there is any.
"""
import json
import os
import re
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "fxfuse_schemas", os.path.join(os.path.dirname(os.path.abspath(__file__)), "fxfuse_torch", "schemas.py"))
_schemas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_schemas)

ARGUMENT_KINDS = {
    "as_none", "as_tensor", "as_tensors", "as_int", "as_ints", "as_float", "as_floats", "as_string", "as_strings",
    "as_sym_int", "as_sym_ints", "as_scalar_type", "as_memory_format", "as_layout", "as_device", "as_bool",
    "as_bools", "as_sym_bool", "as_sym_bools", "as_graph", "as_optional_tensors", "as_custom_obj", "as_operator",
    "as_sym_float", "as_sym_floats", "as_optional_tensor", "as_complex", "as_int_lists", "as_string_to_argument",
}
SCALAR_TYPES = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 28, 29, 30, 31, 32}
INPUT_SPECS = {"user_input", "parameter", "buffer", "tensor_constant", "custom_obj", "token", "constant_input"}
OUTPUT_SPECS = {"user_output", "loss_output", "buffer_mutation", "gradient_to_parameter", "gradient_to_user_input",
                "user_input_mutation", "token"}
TARGET = re.compile(r"^(torch\.ops\.[A-Za-z_]\w*\.\w+(\.\w+)?|_operator\.\w+|torch\.sym_\w+|math\.\w+|#\w+:\w+)$")
POSITIONAL, KEYWORD = 1, 2


def schema_arg_names():
    """fxfuse op name → set of argument names, from schemas.py."""
    out = {}
    for s in _schemas.FXFUSE_SCHEMAS:
        name = s.split("::", 1)[1].split("(", 1)[0]
        args = s[s.index("(") + 1:s.index(") ->")]
        names = set()
        for a in args.split(","):
            a = a.strip().split("=")[0].strip()
            if a and a != "*":
                names.add(a.split()[-1])
        out[name] = names
    return out


FXFUSE_ARGS = schema_arg_names()


class Checker:
    def __init__(self, path):
        self.path = path
        self.errors = []

    def err(self, where, what):
        self.errors.append(f"{self.path}: {where}: {what}")

    def union(self, where, obj, allowed):
        if not isinstance(obj, dict) or len(obj) != 1:
            self.err(where, f"expected a union object with one key, got {json.dumps(obj)[:120]}")
            return None, None
        (k, v), = obj.items()
        if k not in allowed:
            self.err(where, f"unknown union key '{k}'")
        return k, v

    def sym_int(self, where, s):
        k, v = self.union(where, s, {"as_int", "as_expr"})
        if k == "as_int" and not isinstance(v, int):
            self.err(where, "as_int is not an integer")
        if k == "as_expr":
            if not isinstance(v, dict) or not isinstance(v.get("expr_str"), str):
                self.err(where, "as_expr without expr_str")
            elif "hint" in v and v["hint"] is not None:
                self.union(where + " hint", v["hint"], {"as_int", "as_float", "as_bool"})

    def tensor_meta(self, where, m):
        for f in ("dtype", "sizes", "requires_grad", "device", "strides", "storage_offset", "layout"):
            if f not in m:
                self.err(where, f"tensor meta lacks '{f}'")
                return
        if m["dtype"] not in SCALAR_TYPES:
            self.err(where, f"unknown dtype {m['dtype']}")
        if len(m["sizes"]) != len(m["strides"]):
            self.err(where, "sizes and strides differ in length")
        for s in m["sizes"] + m["strides"] + [m["storage_offset"]]:
            self.sym_int(where, s)
        if not isinstance(m["device"], dict) or not isinstance(m["device"].get("type"), str):
            self.err(where, "device without type")

    def check_graph(self, where, g):
        for f in ("inputs", "outputs", "nodes", "tensor_values", "sym_int_values", "sym_bool_values",
                  "sym_float_values", "is_single_tensor_return", "custom_obj_values"):
            if f not in g:
                self.err(where, f"graph lacks '{f}'")
                return
        for name, m in g["tensor_values"].items():
            self.tensor_meta(f"{where}: tensor_values[{name}]", m)
        for name, s in g["sym_int_values"].items():
            self.sym_int(f"{where}: sym_int_values[{name}]", s)
        defined = set()
        node_names = set()

        def define(w, arg):
            k, v = self.union(w, arg, ARGUMENT_KINDS)
            names = []
            if k == "as_tensor":
                names = [(v["name"], "tensor_values")]
            elif k == "as_tensors":
                names = [(t["name"], "tensor_values") for t in v]
            elif k in ("as_sym_int", "as_sym_bool", "as_sym_float"):
                sk, sv = self.union(w, v, {"as_name", "as_int", "as_bool", "as_float"})
                if sk == "as_name":
                    names = [(sv, k.replace("as_", "") + "_values")]
            for n, table in names:
                if n in defined:
                    self.err(w, f"'{n}' defined twice")
                if n not in g[table]:
                    self.err(w, f"'{n}' has no entry in {table}")
                defined.add(n)

        def use(w, arg):
            k, v = self.union(w, arg, ARGUMENT_KINDS)
            refs = []
            if k in ("as_tensor", "as_custom_obj"):
                refs = [v["name"]]
            elif k == "as_tensors":
                refs = [t["name"] for t in v]
            elif k == "as_optional_tensors":
                refs = [t["as_tensor"]["name"] for t in v if "as_tensor" in t]
            elif k in ("as_sym_int", "as_sym_bool", "as_sym_float"):
                refs = [v["as_name"]] if "as_name" in v else []
            elif k in ("as_sym_ints", "as_sym_bools", "as_sym_floats"):
                refs = [x["as_name"] for x in v if "as_name" in x]
            elif k == "as_scalar_type" and v not in SCALAR_TYPES:
                self.err(w, f"unknown scalar type {v}")
            elif k == "as_graph":
                self.check_graph(f"{w}: subgraph {v.get('name')}", v["graph"])
            elif k == "as_operator" and not TARGET.match(v):
                self.err(w, f"operator '{v}' is not a torch.ops name")
            for r in refs:
                if r not in defined:
                    self.err(w, f"reference to undefined '{r}'")

        for i, a in enumerate(g["inputs"]):
            define(f"{where}: input {i}", a)
        for n in g["nodes"]:
            for f in ("target", "inputs", "outputs", "metadata"):
                if f not in n:
                    self.err(where, f"node lacks '{f}'")
            w = f"{where}: node {n.get('name', n.get('target'))}"
            target = n.get("target", "")
            if not TARGET.match(target):
                self.err(w, f"target '{target}' cannot be resolved by torch")
            hop = target.startswith("torch.ops.higher_order.")
            seen_keyword = False
            for a in n.get("inputs", []):
                if set(a) != {"name", "arg", "kind"} or a["kind"] not in (POSITIONAL, KEYWORD):
                    self.err(w, f"malformed named argument {json.dumps(a)[:120]}")
                    continue
                if a["kind"] == KEYWORD:
                    seen_keyword = True
                elif seen_keyword and not hop:
                    self.err(w, f"positional argument '{a['name']}' after a keyword argument")
                use(f"{w}: argument {a['name']}", a["arg"])
            if target.startswith("torch.ops.fxfuse."):
                op = target.split(".")[3]
                if op not in FXFUSE_ARGS:
                    self.err(w, f"fxfuse op '{op}' is not in the op library")
                else:
                    for a in n.get("inputs", []):
                        if a["name"] not in FXFUSE_ARGS[op]:
                            self.err(w, f"argument '{a['name']}' is not in fxfuse::{op}'s schema")
            if not all(isinstance(v, str) for v in n.get("metadata", {}).values()):
                self.err(w, "metadata values must be strings")
            for o in n.get("outputs", []):
                if o != {"as_none": True}:
                    define(f"{w}: output", o)
            # torch names a node of several results (or of a list result) after the node's
            # "name" and each result's getitem after the result: the two must differ, and the
            # node name must not be any other value's.
            outs = n.get("outputs", [])
            single = len(outs) == 1 and any(k in outs[0] for k in ("as_tensor", "as_sym_int", "as_sym_bool",
                                                                   "as_sym_float"))
            if "name" in n and not single:
                if n["name"] in node_names or n["name"] in defined:
                    self.err(w, f"node name '{n['name']}' is also a value's or another node's name")
                node_names.add(n["name"])
        for i, o in enumerate(g["outputs"]):
            use(f"{where}: output {i}", o)

    def check_signature(self, gm):
        g, sig = gm["graph"], gm["signature"]
        ins, outs = sig.get("input_specs"), sig.get("output_specs")
        if ins is None or outs is None:
            self.err("signature", "lacks input_specs/output_specs")
            return []
        if len(ins) != len(g["inputs"]):
            self.err("signature", f"{len(ins)} input specs for {len(g['inputs'])} graph inputs")
        if len(outs) != len(g["outputs"]):
            self.err("signature", f"{len(outs)} output specs for {len(g['outputs'])} graph outputs")
        params = []
        for spec, gin in zip(ins, g["inputs"]):
            k, v = self.union("input spec", spec, INPUT_SPECS)
            if k in ("parameter", "buffer", "tensor_constant"):
                if v["arg"]["name"] != gin.get("as_tensor", {}).get("name"):
                    self.err("input spec", f"{k} '{v['arg']['name']}' is not the graph input at its position")
                if k == "parameter":
                    params.append(v["parameter_name"])
                if k == "buffer" and not isinstance(v.get("persistent"), bool):
                    self.err("input spec", "buffer without a boolean 'persistent'")
        for spec in outs:
            self.union("output spec", spec, OUTPUT_SPECS)
        return params

    def run(self):
        if not zipfile.is_zipfile(self.path):
            self.err("archive", "not a zip archive")
            return self.errors
        with zipfile.ZipFile(self.path) as z:
            names = z.namelist()
            roots = {n.split("/", 1)[0] for n in names}
            if len(roots) != 1:
                self.err("archive", f"members under {len(roots)} root folders (torch expects one)")
                return self.errors
            root = roots.pop()
            for m in ("archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"):
                if f"{root}/{m}" not in names:
                    self.err("archive", f"missing member {root}/{m}")
            if f"{root}/archive_format" in names and z.read(f"{root}/archive_format") != b"pt2":
                self.err("archive", "archive_format is not 'pt2'")
            models = [n for n in names if n.startswith(f"{root}/models/") and n.endswith(".json")]
            if not models:
                self.err("archive", "no models/<name>.json")
                return self.errors
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    self.err("archive", f"{info.filename} is compressed (torch stores members)")
            program = json.loads(z.read(models[0]))
            stem = models[0].rsplit("/", 1)[1][:-5]
            weights_cfg = f"{root}/data/weights/{stem}_weights_config.json"
            weights = json.loads(z.read(weights_cfg))["config"] if weights_cfg in names else None
            for f in ("graph_module", "opset_version", "range_constraints", "schema_version", "torch_version"):
                if f not in program:
                    self.err("program", f"lacks '{f}'")
            if "verifiers" not in program and "dialect" not in program:
                self.err("program", "lacks 'verifiers' (or 'dialect')")
            sv = program.get("schema_version", {})
            if not isinstance(sv.get("major"), int) or not isinstance(sv.get("minor"), int):
                self.err("program", "schema_version needs integer major and minor")
            for name, r in program.get("range_constraints", {}).items():
                if set(r) != {"min_val", "max_val"}:
                    self.err("range_constraints", f"{name}: expected min_val and max_val")
            gm = program.get("graph_module", {})
            for f in ("graph", "signature", "module_call_graph"):
                if f not in gm:
                    self.err("graph_module", f"lacks '{f}'")
                    return self.errors
            self.check_graph("graph", gm["graph"])
            params = self.check_signature(gm)
            mcg = gm["module_call_graph"]
            if not mcg or mcg[0].get("fqn") != "" or not mcg[0].get("signature"):
                self.err("module_call_graph", "first entry must be the root module with a signature")
            else:
                for spec in ("in_spec", "out_spec"):
                    try:
                        tree = json.loads(mcg[0]["signature"][spec])
                        if not (isinstance(tree, list) and tree[0] == 1):
                            self.err("module_call_graph", f"{spec} is not a version-1 treespec")
                    except (ValueError, KeyError, TypeError):
                        self.err("module_call_graph", f"{spec} is not JSON")
            if weights is not None:
                for p in params:
                    if p not in weights:
                        self.err("weights", f"parameter '{p}' has no entry in {weights_cfg}")
                    elif not weights[p].get("use_pickle") and \
                            f"{root}/data/weights/{weights[p]['path_name']}" not in names:
                        self.err("weights", f"parameter '{p}': member {weights[p]['path_name']} missing")
        return self.errors


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    failed = 0
    for path in sys.argv[1:]:
        errors = Checker(path).run()
        for e in errors[:50]:
            print(e)
        if errors:
            failed += 1
        else:
            print(f"ok   {path}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
