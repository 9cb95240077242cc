"""cuda_library: compiles .cu files with nvcc (called by absolute path) for Hopper (sm_90a).

Each .cu becomes one object file through a genrule; the objects are wrapped in a cc_library
that links the static CUDA runtime, so binaries built here run on a GPU machine that has a
driver but no toolkit. No relocatable device code: every .cu must be self-contained on the
device side. nvcc warnings are errors for our code (-Werror all-warnings, host -Wall -Wextra).
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

NVCC = "/usr/local/cuda/bin/nvcc"

# Where fxfuse's sources sit in the execution root: "" when fxfuse is the main workspace,
# "external/fxfuse" when another workspace uses it (fxfuse_plan). Includes such as
# "compiler/runtime/embedded.h" are relative to it.
_FXFUSE_ROOT = Label("//kernels:cuda.bzl").workspace_root

# The one dtype enum (generated from the IR proto) is part of every kernel's API: each nvcc
# action gets the header, each library the dependency.
_DTYPE_HEADER = str(Label("//proto:dtype.h"))
_DTYPE_LIBRARY = str(Label("//proto:dtype"))

def _include_roots():
    """-I flags for fxfuse's tree and the calling package's repository (sources and generated)."""
    repo = native.repository_name()
    roots = ["" if repo == "@" else "external/" + repo[1:], _FXFUSE_ROOT]
    flags = []
    for root in roots:
        for flag in ["-I" + (root or "."), "-I$(GENDIR)" + ("/" + root if root else "")]:
            if flag not in flags:
                flags.append(flag)
    return flags

NVCC_FLAGS = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-lineinfo",
    "-Xcompiler",
    "-fPIC",
    "-Werror",
    "all-warnings",
    "-Xcompiler",
    "-Wall,-Wextra,-Werror",
]

def cuda_library(name, srcs, hdrs = [], deps = [], cuda_hdrs = [], nvcc_flags = [], **kwargs):
    """Compiles `srcs` (.cu) with nvcc and wraps the objects in a cc_library.

    Args:
      name: name of the resulting cc_library.
      srcs: .cu files, one object each.
      hdrs: public headers of the library (also visible to nvcc).
      deps: cc_library deps of the library; their headers are not passed to nvcc, so
        list any header a .cu includes in `hdrs` or `cuda_hdrs`.
      cuda_hdrs: private headers included only by the .cu files (.cuh).
      nvcc_flags: extra nvcc flags.
      **kwargs: forwarded to cc_library (visibility, tags, ...).
    """
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library srcs must be .cu files: " + src)
        obj = name + "_" + src[:-len(".cu")].replace("/", "_") + ".o"
        native.genrule(
            name = obj.replace(".", "_"),
            srcs = [src] + hdrs + cuda_hdrs + [_DTYPE_HEADER],
            outs = [obj],
            cmd = " ".join([NVCC] + NVCC_FLAGS + nvcc_flags + _include_roots() + [
                "-isystem /usr/local/cuda/include",
                "-c $(location " + src + ")",
                "-o $@",
            ]),
            message = "nvcc " + src,
        )
        objs.append(obj)
    cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + [_DTYPE_LIBRARY, "@cuda//:cudart_static", "@cuda//:headers"],
        **kwargs
    )
