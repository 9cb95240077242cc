#!/usr/bin/env python3
"""Baseline (b) of the fused all-reduce + RMSNorm benchmark: PyTorch's NCCL all-reduce followed
by a torch.compile'd residual add + RMSNorm (+ static FP8 quant), one process per GPU
(torch.multiprocessing, no torchrun), under CUDA graphs. Runs at world size 1 too.

The compiled function has the semantics of our kernels (vLLM fused_add_rms_norm[_static_fp8_quant]):
z = round16(a + residual); n = round16(round16(z * rsqrt(mean(z^2) + eps)) * w);
q = fp8(clamp(n * (1 / scale), +-448)). T is marked dynamic: one compilation per (H, variant).

Timing: each (T, H, variant) is captured into one CUDA graph of --calls back-to-back calls
rotating over buffer sets; after warm-up the graph is replayed --reps times, each replay timed
with CUDA events after a barrier; per rank the median replay time / calls, then the maximum over
ranks. Output: JSON rows in the C++ driver's schema (method "torch_nccl+compiled_norm").

  python3 bench_torch_baseline.py --world-size N [--tokens 1,8,...] [--hidden 4096,8192]
      [--dtype bf16|fp16] [--reps 30] [--calls 16] --out FILE.json
"""
import argparse
import json
import math
import os
import sys
import tempfile

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402  (after the environment: NCCL reads it at load)

EPS = 1e-6
FP8_MAX = 448.0


def norm(a, residual, weight):
    z = (a.float() + residual.float()).to(a.dtype)
    zf = z.float()
    inv = torch.rsqrt(zf.pow(2).mean(-1, keepdim=True) + EPS)
    n = (zf * inv).to(a.dtype) * weight
    return z, n


def norm_quant(a, residual, weight, scale):
    z, n = norm(a, residual, weight)
    q = (n.float() * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return z, q


def worker(rank, args, init_file, results_file):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=args.world_size)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    compiled = {False: torch.compile(norm, dynamic=True), True: torch.compile(norm_quant, dynamic=True)}
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    for h in args.hidden:
        weight = (torch.rand(h, device="cuda", generator=gen) + 0.5).to(dtype)
        scale = torch.tensor([0.05], device="cuda", dtype=torch.float32)
        for t in args.tokens:
            sets = max(1, min(args.calls, math.ceil(96e6 / (t * h * 2 * 4))))
            xs = [torch.randn(t, h, device="cuda", generator=gen).to(dtype) for _ in range(sets)]
            rs = [torch.randn(t, h, device="cuda", generator=gen).to(dtype) for _ in range(sets)]
            for quant in (False, True):
                fn = compiled[quant]

                def call(i):
                    x = xs[i % sets]
                    dist.all_reduce(x)
                    return fn(x, rs[i % sets], weight, scale) if quant else fn(x, rs[i % sets], weight)

                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for i in range(3):  # compile and warm up outside the graph
                        call(i)
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for i in range(args.calls):
                        call(i)
                for _ in range(3):
                    graph.replay()
                torch.cuda.synchronize()
                times = []
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                for _ in range(args.reps):
                    dist.barrier()
                    torch.cuda.synchronize()
                    start.record()
                    graph.replay()
                    stop.record()
                    stop.synchronize()
                    times.append(start.elapsed_time(stop))
                times.sort()
                us = times[len(times) // 2] * 1000.0 / args.calls
                worst = torch.tensor([us], device="cuda")
                dist.all_reduce(worst, op=dist.ReduceOp.MAX)
                del graph
                rows.append({
                    "mode": "gpus", "world_size": args.world_size, "dtype": "bfloat16" if args.dtype == "bf16" else "float16",
                    "tokens": t, "hidden": h, "variant": "residual+norm+fp8" if quant else "residual+norm",
                    "method": "torch_nccl+compiled_norm", "us": worst.item(), "message_bytes": t * h * 2,
                })
                if rank == 0:
                    print(json.dumps(rows[-1]), flush=True)
    if rank == 0:
        with open(results_file, "w") as f:
            json.dump(rows, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--tokens", default="1,8,32,128,512,2048,8192")
    p.add_argument("--hidden", default="4096,8192")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--calls", type=int, default=16)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.tokens = [int(v) for v in args.tokens.split(",")]
    args.hidden = [int(v) for v in args.hidden.split(",")]
    if torch.cuda.device_count() < args.world_size:
        print(f"bench_torch_baseline: --world-size {args.world_size} needs that many GPUs, "
              f"found {torch.cuda.device_count()}", file=sys.stderr)
        sys.exit(2)
    init_file = tempfile.mktemp(prefix="fxfuse_torch_baseline_")
    torch.multiprocessing.spawn(worker, args=(args, init_file, args.out), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
