"""fxfuse_plan: compile a graph into a launch plan at build time, with its kernels built by nvcc.

    load("@fxfuse//tools:fxfuse_plan.bzl", "fxfuse_plan")   # "//tools:..." inside fxfuse

    fxfuse_plan(
        name = "decoder_plan",          # cc_library; C++ calls load_decoder_plan()
        graph = "decoder.fxg",          # any graph fxfuse reads (.pt2, .json, .pb, .fxg)
        passes = [],                    # pass names (default: the full pipeline)
        world_size = 1,
    )

produces:
  * NAME.plan.pb           the launch plan (`fxfuse compile --emit=plan`)
  * NAME_kernels.cu        every generated kernel (`fxfuse embed`), compiled by nvcc for sm_90a
  * NAME.h / NAME.cc       `std::unique_ptr<fxfuse::runtime::Program> load_NAME()`: the plan
                           embedded in the binary, its kernels taken from the nvcc objects
                           (no NVRTC at load)
  * NAME                   a cc_library with all of it, depending on @fxfuse//compiler/runtime

Works from any workspace that names this repository `@fxfuse` (examples/external_workspace):
every fxfuse label below goes through Label(), which resolves it in this file's repository,
not in the calling package's.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")
load("//kernels:cuda.bzl", "cuda_library")

# fxfuse targets the macro depends on, resolved in fxfuse's repository.
_FXFUSE = Label("//:fxfuse")
_EMBEDDED_H = Label("//compiler/runtime:embedded.h")
_EMBEDDED = Label("//compiler/runtime:embedded")
_LOWERING = Label("//compiler/lowering")
_RUNTIME = Label("//compiler/runtime")

def _fxfuse_plan_gen_impl(ctx):
    name = ctx.attr.out_name
    plan = ctx.actions.declare_file(name + ".plan.pb")
    cu = ctx.actions.declare_file(name + "_kernels.cu")
    cc = ctx.actions.declare_file(name + ".cc")
    h = ctx.actions.declare_file(name + ".h")
    tool = ctx.executable._fxfuse
    compile_args = [ctx.file.graph.path, "--emit=plan", "-o", plan.path, "-q", "--world-size", str(ctx.attr.world_size)]
    if ctx.attr.passes:
        compile_args += ["--passes", ",".join(ctx.attr.passes)]
    ctx.actions.run(
        executable = tool,
        arguments = ["compile"] + compile_args,
        inputs = [ctx.file.graph],
        outputs = [plan],
        mnemonic = "FxfusePlan",
        progress_message = "fxfuse compile %s -> %s" % (ctx.file.graph.short_path, plan.short_path),
    )
    ctx.actions.run(
        executable = tool,
        arguments = ["embed", plan.path, "--name", name, "--cu", cu.path, "--cc", cc.path, "--header", h.path],
        inputs = [plan],
        outputs = [cu, cc, h],
        mnemonic = "FxfuseEmbed",
        progress_message = "fxfuse embed %s" % plan.short_path,
    )
    return [DefaultInfo(files = depset([plan, cu, cc, h]))]

_fxfuse_plan_gen = rule(
    implementation = _fxfuse_plan_gen_impl,
    attrs = {
        "graph": attr.label(allow_single_file = True, mandatory = True),
        "passes": attr.string_list(),
        "world_size": attr.int(default = 1),
        "out_name": attr.string(mandatory = True),
        # Built in the target configuration: the same fxfuse binary the rest of the build
        # uses (a host-configuration copy would build the whole compiler twice).
        "_fxfuse": attr.label(default = _FXFUSE, executable = True, cfg = "target"),
    },
    outputs = {
        "plan": "%{out_name}.plan.pb",
        "cu": "%{out_name}_kernels.cu",
        "cc": "%{out_name}.cc",
        "h": "%{out_name}.h",
    },
)

def fxfuse_plan(name, graph, passes = [], world_size = 1, visibility = None, **kwargs):
    """Launch plan + nvcc-compiled kernels of `graph` as cc_library `name` (load_NAME())."""
    _fxfuse_plan_gen(
        name = name + "_gen",
        graph = graph,
        passes = passes,
        world_size = world_size,
        out_name = name,
    )
    cuda_library(
        name = name + "_kernels",
        srcs = [name + "_kernels.cu"],
        cuda_hdrs = [str(_EMBEDDED_H)],
        deps = [str(_EMBEDDED)],
        visibility = visibility,
        # Same numerics as the NVRTC path (no FMA contraction); unused shared helpers are fine.
        nvcc_flags = ["--fmad=false", "-Xcudafe", "--diag_suppress=177", "-Xcudafe", "--diag_suppress=550"],
    )
    cc_library(
        name = name,
        srcs = [name + ".cc"],
        hdrs = [name + ".h"],
        deps = [
            name + "_kernels",
            str(_LOWERING),
            str(_RUNTIME),
        ],
        alwayslink = True,
        visibility = visibility,
        **kwargs
    )
