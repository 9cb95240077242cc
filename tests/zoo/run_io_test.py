#!/usr/bin/env python3
"""`fxfuse run --input NAME=FILE --save-outputs DIR` on a real torch 2.11 archive with weights
(CPU interpreter), and check_zoo's cpu_vs_torch column over a one-model zoo built from it: the
file input takes effect, outputs are saved with their shape, a reference equal to the outputs
passes and a perturbed one fails (`n/a` when torch's own run of the archive already missed its
eager logits, make_zoo.py's manifest), stripped weights give `n/a`, bad --input values exit 2; and
on a graph with seeded weights, given weights replace exactly those inputs (given_inputs).

Usage: run_io_test.py FXFUSE   (run from the repository root, as Bazel does)"""
import array
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.getcwd()
sys.path.insert(0, os.path.join(ROOT, "tools", "zoo"))
import check_zoo  # noqa: E402
import make_zoo  # noqa: E402

FAILED = []


def check(name, cond, detail=""):
    print("%s %s %s" % ("ok  " if cond else "FAIL", name, detail))
    if not cond:
        FAILED.append(name)


def run(fxfuse, *a):
    p = subprocess.run([fxfuse, "run"] + list(a), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    fxfuse = sys.argv[1]
    src = os.path.join(ROOT, "tests", "data", "hf", "hf_llama.core_aten.pt2")
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "zoo", "llamaz")
        os.makedirs(d)
        pt2 = os.path.join(d, "llamaz.core_aten.pt2")
        shutil.copy(src, pt2)
        ids = os.path.join(d, "llamaz.input_ids.i64")
        make_zoo.write_raw(ids, "q", list(range(3, 19)))
        ids2 = os.path.join(tmp, "other.i64")
        make_zoo.write_raw(ids2, "q", list(range(40, 56)))
        o1, o2, o3 = (os.path.join(tmp, n) for n in ("o1", "o2", "o3"))
        rc, out, err = run(fxfuse, pt2, "--cpu-only", "--input", "input_ids=" + ids, "--save-outputs", o1)
        check("run --cpu-only with --input/--save-outputs", rc == 0, err[-300:])
        outs = json.load(open(os.path.join(o1, "outputs.json")))
        check("outputs.json: one logits output", len(outs) == 1 and outs[0]["shape"] == [1, 16, 128] and
              outs[0]["dtype"] == "bf16", str(outs))
        f = os.path.join(o1, outs[0]["file"])
        check("output file: float32 values", os.path.getsize(f) == 16 * 128 * 4)
        run(fxfuse, pt2, "--cpu-only", "--input", "input_ids=" + ids, "--save-outputs", o2)
        run(fxfuse, pt2, "--cpu-only", "--input", "input_ids=" + ids2, "--save-outputs", o3)
        b1, b2, b3 = (open(os.path.join(o, "output_0.f32"), "rb").read() for o in (o1, o2, o3))
        check("same input: same outputs", b1 == b2)
        check("the file input takes effect", b1 != b3)
        rc, out, err = run(fxfuse, pt2, "--cpu-only", "--input", "input_ids=" + ids2)
        rc2, out2, _ = run(fxfuse, pt2, "--cpu-only")
        check("seeded input differs from the file's", out != out2)
        for bad, what in ((["--input", "input_ids=" + os.path.join(tmp, "o1", "outputs.json")], "size mismatch"),
                          (["--input", "nosuch=" + ids], "unknown input"),
                          (["--input", "input_ids"], "malformed")):
            rc, out, err = run(fxfuse, pt2, "--cpu-only", *bad)
            check("bad --input (%s): exit 2, one line" % what,
                  rc == 2 and len(err.strip().splitlines()) == 1 and "fxfuse: error:" in err, err.strip())
        # A one-model zoo: torch's reference = the interpreter's own output (pass), then perturbed (fail).
        logits = make_zoo.read_raw(f, "f")
        make_zoo.write_raw(os.path.join(d, "llamaz.logits.f32"), "f", logits)
        ref = {"input": {"name": "input_ids", "file": "llamaz.input_ids.i64", "dtype": "int64", "shape": [1, 16]},
               "logits": {"file": "llamaz.logits.f32", "dtype": "float32", "shape": [1, 16, 128], "finite": True}}
        json.dump(ref, open(os.path.join(d, "llamaz.reference.json"), "w"))
        zoo = os.path.join(tmp, "zoo")

        def column():
            r = check_zoo.main(["--fxfuse", fxfuse, "--dir", zoo, "--commands", "cpu_vs_torch", "--report-only",
                                "--json", os.path.join(tmp, "r.json")])
            return r, json.load(open(os.path.join(tmp, "r.json")))["graphs"]["llamaz/llamaz.core_aten.pt2"]["cpu_vs_torch"]

        rc, res = column()
        check("cpu_vs_torch: equal reference passes", rc == 0 and res == "pass", res)
        bad = array.array("f", logits)
        bad[5] += 10 * max(abs(x) for x in logits)
        make_zoo.write_raw(os.path.join(d, "llamaz.logits.f32"), "f", bad)
        rc, res = column()
        check("cpu_vs_torch: perturbed reference fails", res.startswith("fail: max_abs"), res)
        # torch's own run of the archive (make_zoo.py's manifest) missing the eager logits by less
        # than the tolerance changes nothing; by more, the mismatch is the capture's: n/a.
        absmax = max(abs(x) for x in bad)
        ref["logits"]["absmax"] = absmax
        json.dump(ref, open(os.path.join(d, "llamaz.reference.json"), "w"))
        manifest = os.path.join(zoo, "manifest.json")
        for drift, want in ((0.01 * absmax, "fail: max_abs"), (0.5 * absmax, "n/a: torch's own run of this graph")):
            json.dump({"architectures": {"llamaz": {"forms": {"core_aten": {"max_abs_vs_eager": drift}}}}},
                      open(manifest, "w"))
            rc, res = column()
            check("cpu_vs_torch: capture drift %.2f of absmax" % (drift / absmax),
                  res.startswith(want) and (want.startswith("fail") or "; fxfuse: max_abs" in res), res)
        os.remove(manifest)
        make_zoo.strip_pt2_weights(pt2)
        rc, res = column()
        check("cpu_vs_torch: stripped weights are n/a", res == "n/a: weights stripped", res)
    given_inputs(fxfuse)
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


def given_inputs(fxfuse):
    """--input of weights on a graph whose weights are seeded (no archive): the given bytes are
    what the run uses and saves, the other inputs keep their seeded values, and feeding a run
    every input it saved reproduces its outputs bit for bit (float and integer inputs)."""
    graph = os.path.join(ROOT, "tests", "plans", "decoder_fp8.fxg")
    base = ["--cpu-only", "--bind", "s0=4", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        a_in, a_out, b_in, b_out, c_out = (os.path.join(tmp, n) for n in ("a_in", "a_out", "b_in", "b_out", "c_out"))
        rc, _, err = run(fxfuse, graph, *base, "--save-inputs", a_in, "--save-outputs", a_out)
        check("seeded run saves its inputs", rc == 0, err[-300:])
        entries = json.load(open(os.path.join(a_in, "inputs.json")))
        files = {e["name"]: os.path.join(a_in, e["file"]) for e in entries}
        raw = {n: open(f, "rb").read() for n, f in files.items()}
        qkv = raw["qkv.weight"][1:] + raw["qkv.weight"][:1]  # e4m3 bytes rotated: other valid values
        ln1 = bytes.fromhex("803f") * (len(raw["ln1.weight"]) // 2)  # bf16 1.0 everywhere
        for name, data in (("qkv.weight", qkv), ("ln1.weight", ln1)):
            open(os.path.join(tmp, name), "wb").write(data)
        rc, _, err = run(fxfuse, graph, *base, "--input", "qkv.weight=" + os.path.join(tmp, "qkv.weight"),
                         "--input", "ln1.weight=" + os.path.join(tmp, "ln1.weight"), "--save-inputs", b_in,
                         "--save-outputs", b_out)
        check("run with two weights given", rc == 0, err[-300:])
        saved = {e["name"]: open(os.path.join(b_in, e["file"]), "rb").read()
                 for e in json.load(open(os.path.join(b_in, "inputs.json")))}
        check("given weights are used as given", saved["qkv.weight"] == qkv and saved["ln1.weight"] == ln1)
        others = [n for n in raw if n not in ("qkv.weight", "ln1.weight")]
        check("the other inputs keep their seeded values", all(saved[n] == raw[n] for n in others),
              str([n for n in others if saved[n] != raw[n]]))
        outs = lambda d: [open(os.path.join(d, o["file"]), "rb").read() for o in json.load(open(os.path.join(d, "outputs.json")))]  # noqa: E731
        check("given weights change the outputs", outs(a_out) != outs(b_out))
        every = [x for n, f in files.items() for x in ("--input", "%s=%s" % (n, f))]
        rc, _, err = run(fxfuse, graph, *base, *every, "--save-outputs", c_out)
        check("every input given back: the same outputs", rc == 0 and outs(a_out) == outs(c_out), err[-300:])


if __name__ == "__main__":
    sys.exit(main())
