#!/usr/bin/env python3
"""GPU-box check: fxfuse-written .pt2 archives load in torch and match the originals.

For every original torch.export archive under tests/ (and a zoo directory if present), and
every vLLM post-grad dump of tests/data/vllm (its unfused graph written by `fxfuse convert`
as the reference, vLLM's unfused ops served by the stubs), runs
`fxfuse compile ORIG -o fused.pt2` and `--op-names=vllm -o fused_vllm.pt2`, loads all three
with torch.export.load(...).module(), runs them on the same random inputs (symbolic sizes
set from their hints or ranges, token ids below the embedding's vocabulary size) and
compares outputs:

  * no FP8 value in the fused graph: bitwise equal (bf16/fp32 exact), else FAIL;
  * FP8 in the fused graph: |a - b| <= 2^-3 * |b| + 2^-9 elementwise (one e4m3 ulp of the
    quantized value, propagated once), the bound of docs/pt2-output.md.

The vLLM-named form is loaded with stub registrations of vLLM's op schemas
(fxfuse_torch.register_vllm_stubs) unless vLLM itself is importable.
Prints a table and writes JSON (--json). Needs torch >= 2.8 (tested with 2.11) and a GPU.

    python3 tools/fxfuse_torch/check_pt2_roundtrip.py --fxfuse ./fxfuse [--zoo DIR] [--json out.json]
        [--shard K/N]   # one of N processes side by side
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import fxfuse_torch  # noqa: E402,F401  (registers torch.ops.fxfuse.*)

FP8_DTYPES = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz") if hasattr(torch, n)}


def originals(zoo):
    """tests/ archives, then tests/' FX text dumps, then the zoo: a time budget cuts the zoo."""
    files = sorted(f for f in glob.glob(os.path.join(REPO, "tests", "**", "*.pt2"), recursive=True)
                   if "/fuzz/" not in f and "legacy" not in os.path.basename(f))
    files += fx_text_fixtures()
    if zoo and os.path.isdir(zoo):
        files += sorted(glob.glob(os.path.join(zoo, "**", "*.pt2"), recursive=True))
    return files


def fx_text_fixtures():
    return sorted(glob.glob(os.path.join(REPO, "tests", "data", "vllm", "*.post_grad.txt")))


def convert_pt2(fxfuse, src, dst):
    r = subprocess.run([fxfuse, "convert", src, "-o", dst], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"fxfuse convert exited {r.returncode}: {r.stderr.strip()}")


def compile_pt2(fxfuse, src, dst, vllm):
    cmd = [fxfuse, "compile", src, "-o", dst, "-q"] + (["--op-names=vllm"] if vllm else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"fxfuse exited {r.returncode}: {r.stderr.strip()}")


def concrete(dim, ranges):
    if isinstance(dim, int):
        return dim
    node = getattr(dim, "node", None)
    hint = getattr(node, "hint", None) if node is not None else None
    if hint is not None:
        return int(hint)
    expr = node.expr if node is not None else None
    lo, hi = 2, 64
    for sym, vr in ranges.items():
        if expr is not None and str(sym) == str(expr):
            lo = max(lo, int(vr.lower)) if vr.lower.is_finite else lo
            hi = int(vr.upper) if vr.upper.is_finite else hi
    return max(lo, min(16, hi))


def vocab_sizes(ep):
    """placeholder name → number of rows of the embedding table it indexes."""
    out = {}
    for n in ep.graph.nodes:
        if n.op == "call_function" and "embedding" in str(n.target) and len(n.args) >= 2:
            w, idx = n.args[0], n.args[1]
            if hasattr(idx, "name") and hasattr(w, "meta") and "val" in w.meta:
                out[idx.name] = int(w.meta["val"].shape[0])
    return out


def make_inputs(ep, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    vocab = vocab_sizes(ep)
    user = set(ep.graph_signature.user_inputs)
    flat = []
    for n in ep.graph.nodes:
        if n.op != "placeholder" or n.name not in user:
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            flat.append(concrete(val, ep.range_constraints) if val is not None else None)
            continue
        shape = [concrete(d, ep.range_constraints) for d in val.shape]
        if val.dtype in (torch.int64, torch.int32):
            t = torch.randint(0, vocab.get(n.name, 2), shape, generator=g, dtype=val.dtype)
        elif val.dtype == torch.bool:
            t = torch.ones(shape, dtype=torch.bool)
        elif val.dtype == torch.float32 and all(isinstance(d, int) and d == 1 for d in val.shape):  # a scale
            t = torch.rand(shape, generator=g) * 0.05 + 0.01
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float32).to(val.dtype)
        # Keep the declared strides (FP8 GEMM operands are column-major).
        strides = [concrete(st, ep.range_constraints) for st in val.stride()]
        out = torch.empty_strided(shape, strides, dtype=val.dtype, device=val.device)
        out.copy_(t.to(val.device))
        flat.append(out)
    spec = ep.call_spec.in_spec if ep.call_spec is not None else None
    if spec is None:
        return tuple(flat), {}
    args, kwargs = torch.utils._pytree.tree_unflatten(flat, spec)
    return args, kwargs


def run(ep, args, kwargs):
    with torch.no_grad():
        out = ep.module()(*args, **kwargs)
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def compare(ref, got, fp8):
    if len(ref) != len(got):
        return False, f"{len(got)} outputs vs {len(ref)}"
    worst = 0.0
    for a, b in zip(got, ref):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, f"output {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        af, bf = a.float(), b.float()
        if not fp8:
            if not torch.equal(af.nan_to_num(), bf.nan_to_num()):
                return False, f"not bitwise equal: max |diff| {(af - bf).abs().max().item():.3g}"
            continue
        diff = (af - bf).abs()
        bound = bf.abs() * 2.0 ** -3 + 2.0 ** -9
        worst = max(worst, (diff / bound).max().item())
        if bool((diff > bound).any()):
            return False, f"beyond the FP8 bound: max |diff| {diff.max().item():.3g}"
    return True, "bitwise equal" if not fp8 else f"within FP8 bound (worst {worst:.2f} of bound)"


def graph_summary(ep):
    ops, fp8 = {}, False
    for n in ep.graph.nodes:
        if n.op == "call_function":
            t = str(n.target)
            if t.startswith(("fxfuse.", "_C.", "vllm.")) or "auto_functionalized" in t:
                key = t if "auto_functionalized" not in t else f"auto_functionalized({n.args[0]})"
                ops[key] = ops.get(key, 0) + 1
        val = n.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        fp8 |= any(isinstance(v, torch.Tensor) and v.dtype in FP8_DTYPES for v in vals)
    return ops, fp8


def stripped(path):
    """True for an archive whose weights were stripped (the zoo's train IR and most of its core
    ATen archives, docs/zoo.md): torch cannot load it, there is nothing to compare."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        has_payload = any("/data/weights/" in n and not n.endswith(".json") for n in names)
        cfgs = [n for n in names if n.endswith("_weights_config.json")]
        declares = any(json.loads(z.read(c)).get("config") for c in cfgs)
    return declares and not has_payload


def check_one(fxfuse, src, work):
    row = {"original": os.path.relpath(src, REPO)}
    t0 = time.time()
    if src.endswith(".pt2") and stripped(src):
        row["status"] = "N/A"
        row["detail"] = "weights stripped (torch cannot load it)"
        return row
    if src.endswith(".txt"):  # an FX text dump: the unfused graph written as .pt2 is the reference
        orig = os.path.join(work, os.path.basename(src)[:-4] + ".orig.pt2")
        convert_pt2(fxfuse, src, orig)
        src = orig
    ep0 = torch.export.load(src)
    args, kwargs = make_inputs(ep0)
    ref = run(ep0, args, kwargs)
    for form, vllm in (("fxfuse", False), ("vllm", True)):
        dst = os.path.join(work, os.path.basename(src)[:-4] + (".fused_vllm.pt2" if vllm else ".fused.pt2"))
        try:
            compile_pt2(fxfuse, src, dst, vllm)
            ep = torch.export.load(dst)
            ops, fp8 = graph_summary(ep)
            ok, detail = compare(ref, run(ep, args, kwargs), fp8 or any(t.dtype in FP8_DTYPES for t in ref))
            row[form] = {"status": "PASS" if ok else "FAIL", "detail": detail, "fused_ops": ops, "archive": dst}
        except Exception as e:  # noqa: BLE001  (reported per row)
            row[form] = {"status": "ERROR", "detail": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                         "trace": traceback.format_exc()[-2000:]}
    row["seconds"] = round(time.time() - t0, 2)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--fxfuse", default=os.path.join(REPO, "bazel-bin", "fxfuse"), help="the fxfuse binary")
    p.add_argument("--zoo", default=os.environ.get("FXFUSE_ZOO", os.path.join(REPO, "zoo")),
                   help="extra directory of original .pt2 archives (default $FXFUSE_ZOO or ./zoo)")
    p.add_argument("--json", default="pt2_roundtrip.json", help="where to write the results")
    p.add_argument("--work", default=None, help="directory for the written archives (default: a temp dir)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="seconds after which no original is started (reported as SKIP); 0: none")
    p.add_argument("--shard", default="0/1", metavar="K/N",
                   help="check only the originals whose index modulo N is K (run N processes side by side)")
    a = p.parse_args()
    shard, shards = (int(x) for x in a.shard.split("/"))
    if not 0 <= shard < shards:
        p.error(f"--shard {a.shard}: K must be in 0..N-1")
    if not torch.cuda.is_available():
        print("check_pt2_roundtrip: no CUDA device (the fixtures are CUDA programs)", file=sys.stderr)
        sys.exit(2)
    stubs = []
    try:
        import vllm._custom_ops  # noqa: F401
    except Exception:  # noqa: BLE001
        stubs = fxfuse_torch.register_vllm_stubs()
    work = a.work or tempfile.mkdtemp(prefix="fxfuse_pt2_")
    os.makedirs(work, exist_ok=True)
    rows = []
    start = time.time()
    print(f"{'original':52} {'fxfuse form':12} {'vllm form':12} detail", flush=True)
    failed = not_applicable = 0
    for index, src in enumerate(originals(a.zoo)):
        if index % shards != shard:
            continue
        if a.deadline_s and time.time() - start > a.deadline_s:
            r = {"original": os.path.relpath(src, REPO), "status": "SKIP", "detail": "time budget"}
        else:
            try:
                r = check_one(a.fxfuse, src, work)
            except Exception as e:  # noqa: BLE001  (the original itself does not load or run)
                r = {"original": os.path.relpath(src, REPO), "status": "ORIGINAL-FAILS",
                     "detail": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        rows.append(r)
        f, v = r.get("fxfuse", {}), r.get("vllm", {})
        st_f, st_v = f.get("status", r.get("status")), v.get("status", r.get("status"))
        if r.get("status") == "N/A":
            not_applicable += 1
        else:
            failed += st_f != "PASS" or st_v != "PASS"
        detail = f.get("detail", r.get("detail", "")) + (" | vllm: " + v["detail"] if v.get("detail") else "")
        print(f"{r['original']:52} {st_f:12} {st_v:12} {detail}", flush=True)
    summary = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "vllm_stubs": stubs,
               "work_dir": work, "rows": rows, "failed": failed, "not_applicable": not_applicable,
               "total": len(rows)}
    with open(a.json, "w") as fh:
        json.dump(summary, fh, indent=2)
    checked = len(rows) - not_applicable
    print(f"\n{checked - failed}/{checked} originals pass in both forms ({not_applicable} not applicable: "
          f"weights stripped); results in {a.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
