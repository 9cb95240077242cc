#!/usr/bin/env python3
"""tools/zoo/check_zoo.py against a fake fxfuse whose behaviour the test controls: results are
classified (pass, refused, fail, BUG, CRASH), expectations are recorded, and the check fails on
a crash, a regression, an unrecorded improvement and an unknown graph.

Usage: check_zoo_test.py  (run from the repository root, as Bazel does)"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.getcwd()
CHECK = os.path.join(ROOT, "tools", "zoo", "check_zoo.py")
sys.path.insert(0, os.path.join(ROOT, "tools", "zoo"))
import check_zoo  # noqa: E402

FAKE = r'''#!/bin/sh
# Fake fxfuse: behaviour chosen by FAKE_MODE and the graph's name.
cmd=$1; shift
for a in "$@"; do case $a in --emit=plan) cmd=plan;; -*) ;; *) path=$a;; esac; done
base=$(basename "$path")
mode=${FAKE_MODE:-normal}
[ "$cmd" = inspect ] && echo '{"ops": {"aten.mm.default": 1}}'
case "$base:$cmd:$mode" in
  b.*:plan:improve) ;;
  b.*:plan:*) echo "fxfuse: error: $path: node 'ln' (aten.layer_norm.default): no lowering for this op" >&2; exit 2;;
  a.*:compile:regress) echo "fxfuse: error: $path: something new" >&2; exit 2;;
  c.*:verify:crash) kill -SEGV $$;;
  c.*:explain:bug) echo "fxfuse: internal error: boom" >&2; exit 3;;
  b.*:verify:*) echo "  out  bf16[4]  1  1  100%  FAIL [atol=0.01]"; echo FAIL; exit 1;;
esac
exit 0
'''

FAILED = []


def check(name, cond, detail=""):
    print("%s %s %s" % ("ok  " if cond else "FAIL", name, detail))
    if not cond:
        FAILED.append(name)


def run(tmp, mode, *extra):
    env = dict(os.environ, FAKE_MODE=mode)
    p = subprocess.run([sys.executable, CHECK, "--fxfuse", os.path.join(tmp, "fxfuse"), "--dir",
                        os.path.join(tmp, "zoo"), "--jobs", "2"] + list(extra),
                       capture_output=True, text=True, env=env)
    return p.returncode, p.stdout + p.stderr


def main():
    check("split_name", check_zoo.split_name("x/hf_llama.core_aten.pt2") == ("hf_llama", "core_aten.pt2"))
    check("classify crash", check_zoo.classify(-11, "", "", "verify") == "CRASH: signal SIGSEGV")
    check("classify refused", check_zoo.classify(2, "", "fxfuse: error: x\n", "plan") == "refused: fxfuse: error: x")
    check("classify bug", check_zoo.classify(3, "", "boom", "compile").startswith("BUG"))
    check("classify bad inspect", check_zoo.classify(0, "not json", "", "inspect").startswith("fail"))
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "zoo", "a"))
        os.makedirs(os.path.join(tmp, "zoo", "b"))
        for rel in ("a/a.train_ir.pt2", "b/b.core_aten.fxg.json", "c.post_grad.fxg.json.gz",
                    "a/a.reference.json", "manifest.json", "a/a.logits.f32"):
            open(os.path.join(tmp, "zoo", rel), "w").close()
        fake = os.path.join(tmp, "fxfuse")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        check("graphs found", check_zoo.find_graphs(os.path.join(tmp, "zoo"), check_zoo.DEFAULT_SUFFIXES) ==
              ["a/a.train_ir.pt2", "b/b.core_aten.fxg.json", "c.post_grad.fxg.json.gz"])
        rc, out = run(tmp, "normal")
        check("no expectations file: exit 2", rc == 2, out[-200:])
        rc, out = run(tmp, "normal", "--update-expectations")
        check("record expectations", rc == 0, out[-300:])
        exp = json.load(open(os.path.join(tmp, "zoo", "expectations.json")))["graphs"]
        check("recorded refusal, path relative to the zoo", exp["b/b.core_aten.fxg.json"]["plan"] ==
              "refused: fxfuse: error: b/b.core_aten.fxg.json: node 'ln' (aten.layer_norm.default): "
              "no lowering for this op", exp["b/b.core_aten.fxg.json"]["plan"])
        check("recorded verify failure", exp["b/b.core_aten.fxg.json"]["verify"].startswith("fail: "),
              exp["b/b.core_aten.fxg.json"]["verify"])
        rc, out = run(tmp, "normal")
        check("unchanged: exit 0", rc == 0 and "check_zoo: OK" in out, out[-300:])
        check("table has a row per graph", "a  " in out and "train_ir.pt2" in out)
        rc, out = run(tmp, "regress")
        check("regression: exit 1", rc == 1 and "REGRESSION" in out and "a/a.train_ir.pt2 compile" in out, out[-300:])
        rc, out = run(tmp, "improve")
        check("unrecorded improvement: exit 1", rc == 1 and "now passes" in out, out[-300:])
        rc, out = run(tmp, "crash")
        check("crash: exit 1", rc == 1 and "CRASH: signal SIGSEGV" in out, out[-300:])
        rc, out = run(tmp, "crash", "--update-expectations")
        check("a crash cannot be recorded", rc == 1, out[-300:])
        run(tmp, "normal", "--update-expectations")
        rc, out = run(tmp, "bug")
        check("exit 3: exit 1", rc == 1 and "BUG: fxfuse: internal error: boom" in out, out[-300:])
        open(os.path.join(tmp, "zoo", "d.train_ir.pt2"), "w").close()
        rc, out = run(tmp, "normal")
        check("unknown graph: exit 1", rc == 1 and "not in the expectations file" in out, out[-300:])
        os.remove(os.path.join(tmp, "zoo", "d.train_ir.pt2"))
        os.remove(os.path.join(tmp, "zoo", "c.post_grad.fxg.json.gz"))
        rc, out = run(tmp, "normal")
        check("missing graph: exit 1", rc == 1 and "but not found" in out, out[-300:])
        rc, out = run(tmp, "normal", "--markdown", os.path.join(tmp, "t.md"), "--commands", "inspect,plan")
        md = open(os.path.join(tmp, "t.md")).read()
        check("markdown table", "| architecture | form | inspect | plan |" in md and "\\|" not in md, md[:200])
        os.makedirs(os.path.join(tmp, "empty"))
        p = subprocess.run([sys.executable, CHECK, "--fxfuse", fake, "--dir", os.path.join(tmp, "empty")],
                           capture_output=True, text=True)
        check("no graphs: exit 2", p.returncode == 2 and "no graphs found" in p.stderr)
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
