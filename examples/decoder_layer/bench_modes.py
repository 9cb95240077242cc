"""Which tool measures which benchmark mode, without torch (bench_decoder_layer.py imports it;
bench_modes_test.py checks it in CI, where torch 2.x is absent).

fxfuse modes are timed by `fxfuse bench` (a subprocess), torch modes in-process by torch. A
fxfuse mode must never reach the torch path: the final H200 run of 2026-11-29 sent
"fxfuse-heuristic" through torch.compile (the torch list only excluded "fxfuse"), which failed
in Inductor and left the column empty although fxfuse had measured it.
"""

# fxfuse mode -> extra `fxfuse bench` flags. "fxfuse": cuBLASLt algorithms tuned by measurement
# (the default); "fxfuse-heuristic": cuBLASLt's first heuristic algorithm, the tuning's baseline.
FXFUSE_MODES = {"fxfuse": [], "fxfuse-heuristic": ["--no-gemm-tune"]}
# torch modes, each timed per call and captured in a CUDA graph ("<mode> (graph)" column).
TORCH_MODES = ("eager", "default", "max-autotune")


def parse_modes(text):
    """The --modes list, in order; an unknown or repeated name is an error (ValueError)."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in FXFUSE_MODES and m not in TORCH_MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}; known: "
                         f"{', '.join(list(FXFUSE_MODES) + list(TORCH_MODES))}")
    if len(set(modes)) != len(modes):
        raise ValueError(f"mode listed twice in {text!r}")
    return modes


def fxfuse_modes(modes):
    """The modes `fxfuse bench` measures, in the given order."""
    return [m for m in modes if m in FXFUSE_MODES]


def torch_plan(modes, tokens, max_autotune_tokens=None):
    """(mode, tokens) for torch to measure: eager and default first, max-autotune (minutes of
    autotuning per T) last on its own token list. Never a fxfuse mode."""
    plan = [(m, list(tokens)) for m in modes if m in TORCH_MODES and m != "max-autotune"]
    if "max-autotune" in modes:
        plan.append(("max-autotune", list(max_autotune_tokens or tokens)))
    return plan


def columns(modes):
    """Table columns: one per fxfuse mode (always a CUDA graph), two per torch mode."""
    return [c for m in modes for c in ((m,) if m in FXFUSE_MODES else (m, m + " (graph)"))]


def fxfuse_bench_argv(fxfuse, plan, mode, tokens, iters, json_path):
    """The `fxfuse bench` command line of one fxfuse mode at T = tokens."""
    return [fxfuse, "bench", plan, "--device=cuda", "--bind", f"s0={tokens}", "--iters", str(iters),
            "--warmup", str(min(20, iters)), "--json", json_path] + FXFUSE_MODES[mode]


def iters_for(us_estimate, max_iters):
    """About 2 s of timing at most, at least 10 replays. Computed once per T and used for every
    fxfuse mode at that T, so tuned and heuristic are timed over the same number of replays (the
    2026-11-29 run timed T=4096 tuned over 100 replays and heuristic over 15)."""
    return max(10, min(max_iters, int(2e6 / max(us_estimate, 1.0))))


def next_estimate(median_us, tokens):
    """Estimate of the next (larger) T's layer time from this T's: attention grows as T^2."""
    return median_us * (64 if tokens >= 512 else 8)
