"""fxg_tests(): one sh_test per golden test file (.fxg graphs or .test scripts).

Each file carries `// RUN:` lines (continued with a trailing `\\`) that LLVM's lit runs
(tests/run_lit.sh, configuration in tests/lit.cfg.py): `%fxfuse` is the CLI under test (also
`fxfuse` on PATH), `%data` is tests/data, `%s`/`%S`/`%t` are lit's own; FileCheck and `not`
come from Debian's llvm-14-tools.
"""

def fxg_tests(name, srcs, data = [], tags = []):
    tests = []
    for src in srcs:
        test_name = name + "/" + src.replace("/", "_").replace(".", "_")
        native.sh_test(
            name = test_name,
            srcs = ["//tests:run_lit.sh"],
            args = [
                "$(location //:fxfuse)",
                "$(location %s)" % src,
            ],
            data = [src, "//:fxfuse", "//tests:lit.cfg.py"] + data,
            size = "medium",
            tags = tags,
        )
        tests.append(test_name)
    native.test_suite(name = name, tests = tests, tags = tags)
