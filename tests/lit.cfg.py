# lit configuration of fxfuse's golden tests: `.fxg` graphs and `.test` scripts whose
# `// RUN:` lines run the CLI and pipe its output through FileCheck (LLVM 14's lit, FileCheck
# and `not`, from Debian's llvm-14-tools).
#
# Substitutions: %fxfuse (the CLI under test, also on PATH as `fxfuse`), %data (tests/data),
# and lit's own %s (the file), %S (its directory), %t (a scratch path).
import os

import lit.formats

config.name = "fxfuse"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".fxg", ".test"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.environ.get("TEST_TMPDIR") or os.path.join(config.test_source_root, "Output")

fxfuse = lit_config.params.get("fxfuse")
if not fxfuse or not os.access(fxfuse, os.X_OK):
    lit_config.fatal("pass the CLI under test with --param fxfuse=PATH (got %r)" % fxfuse)
fxfuse = os.path.abspath(fxfuse)
LLVM_BIN = "/usr/lib/llvm-14/bin"
if not os.access(os.path.join(LLVM_BIN, "FileCheck"), os.X_OK):
    lit_config.fatal(LLVM_BIN + "/FileCheck not found (apt-get install llvm-14-tools; tools/install_deps.sh)")

config.substitutions.append(("%fxfuse", fxfuse))
config.substitutions.append(("%data", os.path.join(config.test_source_root, "data")))
config.environment["PATH"] = os.pathsep.join([os.path.dirname(fxfuse), LLVM_BIN, os.environ.get("PATH", "")])
