"""fxg_tests(): one sh_test per golden test file (.fxg graphs or .test scripts).

Each file carries `// RUN:` lines (continued with a trailing `\\`). The runner
(tests/passes/run_lit.sh) substitutes `%fxfuse` (the CLI), `%s` (the file), `%S` (its
directory), `%data` (tests/data) and `FileCheck` / `not` (LLVM 14's tools from Debian's
llvm-14-tools), and runs every RUN line under `bash -o pipefail`.
"""

def fxg_tests(name, srcs, data = [], tags = []):
    tests = []
    for src in srcs:
        test_name = name + "/" + src.replace("/", "_").replace(".", "_")
        native.sh_test(
            name = test_name,
            srcs = ["//tests/passes:run_lit.sh"],
            args = [
                "$(location //:fxfuse)",
                "$(location %s)" % src,
            ],
            data = [src, "//:fxfuse"] + data,
            size = "small",
            tags = tags,
        )
        tests.append(test_name)
    native.test_suite(name = name, tests = tests, tags = tags)
