#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel, for fxfuse's plan and torch.compile side
by side, both steps replayed in CUDA graphs. fxfuse's replays run under ncu (each kernel timed
alone at the running clocks, L2 not flushed: no overlap, no gaps), only inside `fxfuse bench`'s
cudaProfilerStart/Stop range around its timed replays. torch's replays run under
torch.profiler (CUPTI records the kernels of a graph replay with their start and end; ncu over
a torch.compile process does not finish in minutes). The H200 image has no Nsight Systems.

    python3 examples/decode_step/kernel_breakdown.py --fxfuse PATH/fxfuse --layers 4 \\
        --points 32x1024,64x1024 --out DIR
    python3 examples/decode_step/kernel_breakdown.py --fxfuse PATH/fxfuse --layer-tokens 64,4096 --out DIR

Per point and side: µs per replay (first kernel start to last kernel end), the sum of kernel
durations, the idle time between kernels (gaps where no kernel of the replay runs), and per
kernel name its launches and µs per replay. `breakdown.txt` in DIR has the tables,
`breakdown.json` the numbers. The model is tools/fixtures/decode_model.py with --layers layers
(fewer than the config's: the per-layer kernels repeat), torch's side torch_decode.py's.
With --layer-tokens the points are token counts of the decoder-layer benchmark instead
(examples/decoder_layer: its graph's plan at s0 = T against DecoderLayerFP8 under torch.compile,
the table of docs/benchmarks/decoder_layer.md).
"""
import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tools", "fixtures")
sys.path.insert(0, HERE)
LAYER_DIR = os.path.join(HERE, "..", "decoder_layer")
sys.path.insert(0, FIXTURES)
import decode_model  # noqa: E402


def find_ncu():
    for cand in [shutil.which("ncu"), "/usr/local/cuda/bin/ncu"]:
        if cand and os.path.exists(cand):
            return cand
    return None


def column(header, prefix):
    for i, h in enumerate(header):
        if h.startswith(prefix):
            return i
    raise KeyError("no column %r in %s" % (prefix, header))


def ncu_kernels(ncu, cmd):
    """[(0, duration_ns, name)] of every kernel ncu timed (each alone) inside the profiler range."""
    out = subprocess.run([ncu, "--profile-from-start", "off", "--clock-control", "none", "--cache-control", "none",
                          "--metrics", "gpu__time_duration.sum", "--csv"] + cmd,
                         check=True, capture_output=True, text=True, timeout=600).stdout
    rows = list(csv.reader(io.StringIO(out[out.index('"ID"'):])))
    n, v, u = column(rows[0], "Kernel Name"), column(rows[0], "Metric Value"), column(rows[0], "Metric Unit")
    scale = {"nsecond": 1, "usecond": 1000, "msecond": 1e6}
    return [(0, int(float(r[v].replace(",", "")) * scale.get(r[u], 1)), r[n]) for r in rows[1:] if len(r) > v]


def summarize(kernels, replays, timeline):
    """Per replay: span, busy sum, idle gaps, and µs / launches per kernel name."""
    per = len(kernels) // replays
    by_name, spans, gaps = {}, [], []
    for k in range(replays):
        chunk = kernels[k * per:(k + 1) * per]
        if timeline and chunk:
            spans.append(max(e for _, e, _ in chunk) - chunk[0][0])
            idle, reach = 0, chunk[0][1]
            for start, end, _ in chunk[1:]:
                idle += max(0, start - reach)
                reach = max(reach, end)
            gaps.append(idle)
        for start, end, name in chunk:
            t = by_name.setdefault(name, [0, 0])
            t[0] += 1
            t[1] += end - start
    med = lambda xs: sorted(xs)[len(xs) // 2] / 1000.0 if xs else None  # noqa: E731
    names = sorted(({"name": k, "launches": c / replays, "us": ns / replays / 1000.0}
                    for k, (c, ns) in by_name.items()), key=lambda r: -r["us"])
    return {"kernels_per_replay": per, "span_us": med(spans), "idle_us": med(gaps),
            "busy_us": sum(r["us"] for r in names), "by_name": names}


def print_replayed_kernels(graph, replays):
    """`replays` replays of a captured CUDA graph under torch.profiler (CUPTI records each kernel
    of a graph replay); its kernels as JSON lines [start ns, end ns, name] on stdout."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            print(json.dumps([int(e.time_range.start * 1000), int(e.time_range.end * 1000), e.name]))


def torch_side(a):
    """Runs in its own process: torch.compile's step captured, then its kernels replayed
    (print_replayed_kernels)."""
    import torch_decode as td
    config = list(decode_model.CONFIGS[a.config])
    model = td.DecodeModel(config, device="cuda", weights="fp8", layers=a.layers)
    batch, ctx = [int(x) for x in a.torch_point.split("x")]
    graph = td.capture_graph(td.make_step(model.set_batch(batch, ctx), td.layer_for(a.torch_mode)))
    print_replayed_kernels(graph, a.replays)


def torch_layer_side(a):
    """torch_side for the decoder-layer benchmark's module at T = --torch-layer-tokens."""
    import torch
    sys.path.insert(0, LAYER_DIR)
    import bench_decoder_layer as bdl
    import torch_decode as td
    model = bdl.DecoderLayerFP8()
    compiled = torch.compile(model, mode=None if a.torch_mode == "default" else a.torch_mode, dynamic=False)
    args = bdl.inputs(a.torch_layer_tokens)
    print_replayed_kernels(td.capture_graph(lambda: compiled(*args)), a.replays)


def torch_kernels(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
    return sorted(tuple(json.loads(line)) for line in out.splitlines() if line.startswith("["))


def table(title, s, top):
    lines = ["%s: %d kernels per replay; span %s µs, kernels busy %.1f µs, idle between kernels %s µs" % (
        title, s["kernels_per_replay"], "%.1f" % s["span_us"] if s["span_us"] else "—", s["busy_us"],
        "%.1f" % s["idle_us"] if s["idle_us"] is not None else "—")]
    for r in s["by_name"][:top]:
        lines.append("  %9.1f µs  %6.1f x  %s" % (r["us"], r["launches"], r["name"][:110]))
    return "\n".join(lines)


def compile_plan(a):
    """The plan fxfuse's side times: the decode model's (a.layers layers, a.kv_cache cache) or,
    with --layer-tokens, the decoder-layer benchmark's graph."""
    plan = os.path.join(a.out, "model.plan.pb")
    if a.layer_tokens:
        graph, flags = os.path.join(LAYER_DIR, "llama8b_decoder_fp8.fxg"), []
    else:
        graph, flags = os.path.join(a.out, "model.fxg"), ["--kv-cache=" + a.kv_cache]
        with open(graph, "w") as f:
            subprocess.run([sys.executable, os.path.join(FIXTURES, "decode_model.py"), "--config", a.config,
                            "--form", "custom", "--layers", str(a.layers)], stdout=f, check=True)
    subprocess.run([a.fxfuse, "compile", graph] + flags + ["--emit=plan", "-o", plan, "-q"], check=True)
    return plan


def sides_of(a, plan, point):
    """side name -> the command that runs it at `point` (batch x context, or T with --layer-tokens)."""
    if a.layer_tokens:
        sides = {"fxfuse": [a.fxfuse, "bench", plan, "--bind", "s0=" + point, "--iters", str(a.replays)]}
        own = ["--torch-layer-tokens", point]
    else:
        batch, ctx = point.split("x")
        sides = {"fxfuse": [a.fxfuse, "bench", plan, "--kv-batch", batch, "--kv-query-len", "1", "--kv-context", ctx,
                            "--iters", str(a.replays)]}
        own = ["--config", a.config, "--layers", str(a.layers), "--torch-point", point]
    if a.torch_mode != "none":
        sides["torch.compile " + a.torch_mode] = [sys.executable, os.path.abspath(__file__), "--replays",
                                                  str(a.replays), "--torch-mode", a.torch_mode] + own
    return sides


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fxfuse")
    ap.add_argument("--config", choices=sorted(decode_model.CONFIGS), default="llama8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--points", default="32x1024,64x1024", help="batch x context, comma-separated")
    ap.add_argument("--kv-cache", default="bf16")
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--torch-mode", default="default", help="torch.compile mode, or none: fxfuse only")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--out")
    ap.add_argument("--layer-tokens", help="token counts of the decoder-layer benchmark instead of --points")
    ap.add_argument("--torch-point", help=argparse.SUPPRESS)  # the torch side's own process
    ap.add_argument("--torch-layer-tokens", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_point:
        return torch_side(a)
    if a.torch_layer_tokens:
        return torch_layer_side(a)
    os.makedirs(a.out, exist_ok=True)
    ncu = find_ncu()
    if not ncu:
        sys.exit("kernel_breakdown: ncu not found")
    plan = compile_plan(a)
    report, results = [], []
    for point in (a.layer_tokens or a.points).split(","):
        sides = sides_of(a, plan, point)
        for side, cmd in sides.items():
            try:
                if side == "fxfuse":
                    kernels, tool = ncu_kernels(ncu, cmd), "ncu"
                else:
                    kernels, tool = torch_kernels(cmd), "torch.profiler"
                s = summarize(kernels, a.replays, timeline=tool != "ncu")
            except (subprocess.SubprocessError, ValueError, KeyError, ZeroDivisionError) as e:
                report.append("%s %s: failed: %s" % (side, point, str(e)[:300]))
                continue
            layers = 1 if a.layer_tokens else a.layers
            s.update({"side": side, "point": ("T=" if a.layer_tokens else "") + point, "tool": tool, "layers": layers})
            results.append(s)
            report.append(table("%s %s (%s, %d layers)" % (side, s["point"], s["tool"], layers), s, a.top))
            print(report[-1], flush=True)
    open(os.path.join(a.out, "breakdown.txt"), "w").write("\n\n".join(report) + "\n")
    json.dump(results, open(os.path.join(a.out, "breakdown.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
