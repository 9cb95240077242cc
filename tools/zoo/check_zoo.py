#!/usr/bin/env python3
"""Runs fxfuse over every graph of a zoo directory and checks the results against the
expectations committed next to it. docs/zoo.md.

    check_zoo.py --fxfuse bazel-bin/fxfuse --dir tests/data/zoo [--expect FILE] [--update-expectations]

Graphs: files under --dir ending in .pt2, .fxg.json, .fxg.json.gz or .fxg (and --suffix ...),
or in --dir's graphs.tar.xz (the committed zoo), unpacked to a temporary directory first.
Commands per graph (--commands; default the CI set): inspect (`inspect --json`), compile
(`compile -q`), plan (`compile --emit=plan -o TMP`), verify (`verify -q`), explain (`explain`),
cpu_vs_torch (`run --cpu-only --input input_ids=... --save-outputs`: the CPU interpreter on the
archive's weights and torch's input, against torch's logits; only .pt2 files that keep their
weights and have a `<arch>.reference.json`, else `n/a: ...`), and on a GPU machine
(tools/zoo/gpu_zoo.sh) run (`run --device=cuda --compare-cpu`) and vs_torch (the plan on the GPU
against torch's logits).
Each result is `pass`, `n/a: why`, or a one-line reason: `refused: ...` (exit 2), `fail: ...`
(exit 1: verify's or compare-cpu's mismatch, or the torch comparison), `BUG: ...` (exit 3),
`CRASH: signal N`, `timeout`.

Exit status (what CI checks):
  0  every result matches the expectations file;
  1  a crash (signal, exit 3, timeout) anywhere, a graph the expectations say passes that no
     longer passes, a result that now passes but is not recorded as passing (record it with
     --update-expectations), or a graph missing from / extra to the expectations;
  2  bad arguments (no graphs found, unreadable expectations).
"""
import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_reference  # noqa: E402

DEFAULT_SUFFIXES = (".pt2", ".fxg.json", ".fxg.json.gz", ".fxg")
CI_COMMANDS = ("inspect", "compile", "plan", "verify", "explain", "cpu_vs_torch")
GPU_COMMANDS = ("run", "vs_torch")
ALL_COMMANDS = CI_COMMANDS + GPU_COMMANDS
CRASH_PREFIXES = ("CRASH", "BUG", "timeout")


def find_graphs(root, suffixes):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(tuple(suffixes)) and not f.endswith((".reference.json", "manifest.json")):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def split_name(rel):
    """(architecture, form) from '<dir>/<arch>.<form>': the architecture is the name up to its
    first dot, the form the rest (hf_llama.core_aten.pt2 -> hf_llama, core_aten.pt2)."""
    base = os.path.basename(rel)
    arch, _, form = base.partition(".")
    return arch, form


def argv_for(fxfuse, command, path, tmpdir):
    if command == "inspect":
        return [fxfuse, "inspect", "--json", path]
    if command == "compile":
        return [fxfuse, "compile", "-q", path]
    if command == "plan":
        out = os.path.join(tmpdir, "%s.plan.pb" % uuid.uuid4().hex)
        return [fxfuse, "compile", "-q", "--emit=plan", "-o", out, path]
    if command == "verify":
        return [fxfuse, "verify", "-q", path]
    if command == "explain":
        return [fxfuse, "explain", path]
    if command == "run":
        return [fxfuse, "run", path, "--device=cuda", "--compare-cpu"]
    raise ValueError(command)


def reference_for(path):
    """(reference.json, input file, None) for a .pt2 that keeps its weights next to torch's
    reference, else (None, None, 'n/a: why')."""
    arch, _ = split_name(path)
    ref = os.path.join(os.path.dirname(path), arch + ".reference.json")
    if not os.path.isfile(ref):
        return None, None, "n/a: no torch reference"
    if not path.endswith(".pt2"):
        return None, None, "n/a: weights are not in this graph file"
    try:
        with zipfile.ZipFile(path) as z:
            has = any("/data/weights/" in n and not n.endswith(".json") for n in z.namelist())
        with open(ref) as f:
            inp = json.load(f)["input"]
    except Exception as e:  # noqa: BLE001
        return None, None, "fail: unreadable reference or archive (%s)" % e
    if not has:
        return None, None, "n/a: weights stripped"
    return ref, (inp.get("name", "input_ids"), os.path.join(os.path.dirname(path), inp["file"])), None


def capture_drift(zoo_dir):
    """{(arch, form): max |exported program - eager logits|}: make_zoo.py's check of each archive
    in torch itself (manifest.json `max_abs_vs_eager`, form `core_aten` for <arch>.core_aten.pt2);
    {} without a manifest."""
    try:
        with open(os.path.join(zoo_dir, "manifest.json")) as f:
            archs = json.load(f).get("architectures", {})
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for arch, entry in archs.items():
        forms = entry.get("forms") if isinstance(entry, dict) else None
        for form, fe in (forms or {}).items():
            drift = fe.get("max_abs_vs_eager") if isinstance(fe, dict) else None
            if isinstance(drift, (int, float)):
                out[(arch, form)] = float(drift)
    return out


def unfaithful_capture(path, ref, drift):
    """The n/a line for a graph whose own run in torch already misses its eager logits by more
    than the comparison's tolerance (torch.export captured something else: fxfuse cannot match
    eager by running it faithfully), else None."""
    arch, form = split_name(path)
    d = drift.get((arch, form.rsplit(".", 1)[0]))
    try:
        with open(ref) as f:
            limit = compare_reference.DEFAULT_TOL * float(json.load(f)["logits"]["absmax"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if d is None or d <= limit:
        return None
    return ("n/a: torch's own run of this graph misses its eager logits by %.4g (manifest.json "
            "max_abs_vs_eager; tolerance %.4g): the capture differs from the model" % (d, limit))


def run_vs_torch(fxfuse, command, path, tmpdir, timeout, drift):
    ref, inp, why = reference_for(path)
    if why:
        return why
    out = tempfile.mkdtemp(dir=tmpdir)
    argv = [fxfuse, "run", path, "--input", "%s=%s" % inp, "--save-outputs", out]
    argv += ["--cpu-only"] if command == "cpu_vs_torch" else ["--device=cuda"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout"
    if p.returncode != 0:
        return classify(p.returncode, p.stdout, p.stderr, command)
    rc, line = compare_reference.compare(ref, out)
    capture = unfaithful_capture(path, ref, drift) if rc == 1 else None
    if capture:
        return capture + "; fxfuse: " + line
    return ("pass" if rc == 0 else "fail: " if rc == 1 else "fail: bad output files: ") + ("" if rc == 0 else line)


def first_line(text):
    for ln in (text or "").splitlines():
        ln = ln.strip()
        if ln:
            return ln[:300]
    return ""


def classify(rc, out, err, command):
    """'pass' or a one-line reason."""
    if rc == "timeout":
        return "timeout"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except Exception:  # noqa: BLE001
            name = str(-rc)
        return "CRASH: signal %s" % name
    if rc == 0:
        if command == "inspect":
            try:
                json.loads(out)
            except Exception:  # noqa: BLE001
                return "fail: inspect --json printed no JSON"
        return "pass"
    line = first_line(err) or first_line(out)
    if command in ("verify", "run") and rc == 1:  # the comparison table is on stdout
        fails = [ln.strip() for ln in out.splitlines() if "FAIL" in ln or "mismatch" in ln.lower()]
        line = fails[0][:300] if fails else line
    kind = {1: "fail", 2: "refused", 3: "BUG"}.get(rc, "exit %d" % rc)
    return "%s: %s" % (kind, line)


def run_one(fxfuse, command, path, tmpdir, timeout, rel, drift):
    """One fxfuse command on one graph; the reason names the graph by `rel`, so expectations do
    not depend on where the zoo lies. `drift`: capture_drift() of the zoo."""
    if command in ("vs_torch", "cpu_vs_torch"):
        return run_vs_torch(fxfuse, command, path, tmpdir, timeout, drift).replace(path, rel)
    argv = argv_for(fxfuse, command, path, tmpdir)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
        res = classify(p.returncode, p.stdout, p.stderr, command).replace(path, rel)
    except subprocess.TimeoutExpired:
        res = classify("timeout", "", "", command)
    if command == "plan":
        try:
            os.remove(argv[argv.index("-o") + 1])
        except OSError:
            pass
    return res


INTERP_MAX_BYTES = 2 << 30


def limit_interpreter_memory():
    """Every fxfuse process gets the same interpreter budget (FXFUSE_INTERP_MAX_BYTES, 2 GiB
    unless the caller set one), whatever the machine and --jobs: a graph too large to
    interpret is refused with a message, the same on every machine, instead of several
    processes being killed together."""
    os.environ.setdefault("FXFUSE_INTERP_MAX_BYTES", str(INTERP_MAX_BYTES))


def run_all(args, graphs):
    limit_interpreter_memory()
    results = {g: {} for g in graphs}
    jobs = [(g, c) for g in graphs for c in args.commands]
    with tempfile.TemporaryDirectory() as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            futs = {ex.submit(run_one, args.fxfuse, c, os.path.join(args.dir, g), tmp, args.timeout, g,
                              args.drift): (g, c)
                    for g, c in jobs}
            for f in concurrent.futures.as_completed(futs):
                g, c = futs[f]
                results[g][c] = f.result()
    return results


def is_crash(res):
    return res.startswith(CRASH_PREFIXES)


def compare(results, expected, commands):
    """Problems (one line each) of the results against the expectations."""
    problems = []
    for g, per in sorted(results.items()):
        for c in commands:
            res = per[c]
            if is_crash(res):
                problems.append("%s %s: %s" % (g, c, res))
                continue
            if g not in expected:
                continue
            want = expected[g].get(c)
            if want is None:
                problems.append("%s %s: no expectation recorded (now %s)" % (g, c, res))
            elif want == "pass" and res != "pass":
                problems.append("%s %s: REGRESSION: expected to pass, now %s" % (g, c, res))
            elif want != "pass" and res == "pass":
                problems.append("%s %s: now passes (expected '%s'): record it with --update-expectations"
                                % (g, c, want))
    for g in sorted(set(results) - set(expected)):
        problems.append("%s: not in the expectations file: record it with --update-expectations" % g)
    for g in sorted(set(expected) - set(results)):
        problems.append("%s: in the expectations file but not found" % g)
    return problems


def table(results, commands, markdown=False):
    rows = []
    if markdown:
        rows.append("| architecture | form | " + " | ".join(commands) + " |")
        rows.append("|---|---|" + "---|" * len(commands))
    else:
        wa = max([len(split_name(g)[0]) for g in results] + [12])
        wf = max([len(split_name(g)[1]) for g in results] + [4])
        rows.append("%-*s  %-*s  %s" % (wa, "architecture", wf, "form", "  ".join("%-8s" % c for c in commands)))
    for g in sorted(results):
        arch, form = split_name(g)
        cells = [results[g][c] for c in commands]
        if markdown:
            esc = [x.replace("|", "\\|") for x in cells]
            rows.append("| %s | %s | %s |" % (arch, form, " | ".join(esc)))
        else:
            short = [("pass" if x == "pass" else x.split(":")[0]) for x in cells]
            rows.append("%-*s  %-*s  %s" % (wa, arch, wf, form, "  ".join("%-8s" % s for s in short)))
    return "\n".join(rows)


def reasons(results, commands):
    lines = []
    for g in sorted(results):
        for c in commands:
            r = results[g][c]
            if r != "pass" and not r.startswith("n/a"):
                lines.append("  %s %s: %s" % (g, c, r))
    return lines


def summary(results, commands):
    n = len(results)
    parts = []
    for c in commands:
        ok = sum(1 for g in results if results[g][c] == "pass")
        crash = sum(1 for g in results if is_crash(results[g][c]))
        parts.append("%s %d/%d%s" % (c, ok, n, (" (%d crashed)" % crash) if crash else ""))
    return "%d graphs: %s" % (n, ", ".join(parts))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fxfuse", required=True)
    ap.add_argument("--dir", required=True, help="directory of graphs (searched recursively)")
    ap.add_argument("--expect", default=None, help="expectations JSON (default <dir>/expectations.json)")
    ap.add_argument("--update-expectations", action="store_true",
                    help="write the current results as the expectations (crashes still fail)")
    ap.add_argument("--commands", default=",".join(CI_COMMANDS),
                    help="comma-separated, of: %s (default: %s)" % (", ".join(ALL_COMMANDS), ",".join(CI_COMMANDS)))
    ap.add_argument("--report-only", action="store_true",
                    help="no expectations: print the table, fail only on crashes")
    ap.add_argument("--suffix", action="append", default=[], help="also check files ending in this")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=int, default=300, help="seconds per fxfuse command")
    ap.add_argument("--markdown", default=None, help="also write the table as markdown to this file")
    ap.add_argument("--json", default=None, help="also write the results as JSON to this file")
    args = ap.parse_args(argv)
    args.commands = [c for c in args.commands.split(",") if c]
    bad = [c for c in args.commands if c not in ALL_COMMANDS]
    if bad:
        ap.error("unknown command(s) %s (known: %s)" % (bad, ", ".join(ALL_COMMANDS)))
    args.expect = args.expect or os.path.join(args.dir, "expectations.json")
    return args


PACKED = "graphs.tar.xz"


def unpack_graphs(directory, into):
    """A committed zoo keeps its graphs in one xz tarball (<dir>/graphs.tar.xz, members
    <arch>/<arch>.<form>; it is a third of the unpacked size): unpacks it under `into` and
    returns that directory, or `directory` itself when there is no tarball."""
    packed = os.path.join(directory, PACKED)
    if not os.path.isfile(packed):
        return directory
    import tarfile
    with tarfile.open(packed, "r:xz") as tf:
        for m in tf.getmembers():
            if not (m.isfile() or m.isdir()) or m.name.startswith(("/", "..")) or "/../" in m.name:
                raise ValueError("%s: unexpected member %r" % (packed, m.name))
        tf.extractall(into)
    return into


def main(argv=None):
    args = parse_args(argv)
    args.drift = capture_drift(args.dir)
    with tempfile.TemporaryDirectory(prefix="zoo_graphs_") as unpacked:
        args.dir = unpack_graphs(args.dir, unpacked)
        return check(args)


def check(args):
    graphs = find_graphs(args.dir, DEFAULT_SUFFIXES + tuple(args.suffix))
    if not graphs:
        print("check_zoo: %s: no graphs found" % args.dir, file=sys.stderr)
        return 2
    expected = {}
    if not args.update_expectations and not args.report_only:
        try:
            with open(args.expect) as f:
                expected = json.load(f)["graphs"]
        except Exception as e:  # noqa: BLE001
            print("check_zoo: %s: cannot read the expectations (%s); make them with --update-expectations"
                  % (args.expect, e), file=sys.stderr)
            return 2
    t0 = time.time()
    results = run_all(args, graphs)
    print(table(results, args.commands))
    rs = reasons(results, args.commands)
    if rs:
        print("\nreasons:")
        print("\n".join(rs))
    print("\n" + summary(results, args.commands) + " in %.0fs" % (time.time() - t0))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table(results, args.commands, markdown=True) + "\n\n" + summary(results, args.commands) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"graphs": results}, f, indent=1, sort_keys=True)
    if args.report_only:
        crashes = [ln for ln in compare(results, results, args.commands)]
        for ln in crashes:
            print("PROBLEM " + ln)
        return 1 if crashes else 0
    if args.update_expectations:
        with open(args.expect, "w") as f:
            json.dump({"note": "fxfuse results per graph and command (tools/zoo/check_zoo.py "
                               "--update-expectations); 'pass' entries must keep passing",
                       "commands": args.commands, "graphs": results}, f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote %s" % args.expect)
        crashes = [ln for ln in compare(results, results, args.commands)]
        for ln in crashes:
            print("PROBLEM " + ln)
        return 1 if crashes else 0
    problems = compare(results, expected, args.commands)
    for ln in problems:
        print("PROBLEM " + ln)
    print("check_zoo: %s" % ("FAIL (%d problems)" % len(problems) if problems else "OK"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
