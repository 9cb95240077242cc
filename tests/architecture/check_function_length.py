#!/usr/bin/env python3
"""Checks that no function in lowering, the runtime or the interpreter is longer than MAX_LINES.

docs/architecture.md: lowering is a table of rules, the runtime one function per step kind and
the interpreter a table of ops (registered by kind, a few screens each), so a function that
grows past a screen or two is a sign of an if-chain coming back.
The checker finds function bodies in C++/CUDA sources by their braces (comments, string
and raw-string literals blanked first): a `{` whose preceding text ends like a function head
(`) {`, `) const {`, `) -> T {`, a constructor's initializer list) and that is not inside
another function. Lambdas and blocks inside a function count toward that function.
Prints FILE:LINE: NAME has N lines for each one over the limit and exits 1 if there is any.

usage: check_function_length.py [REPO_ROOT]
       check_function_length.py --self-test   # finds a planted long function, ignores the rest
"""
import os
import re
import sys

CHECKED_FOLDERS = ["compiler/lowering", "compiler/runtime", "tools/interpreter"]
MAX_LINES = 150
CODE_EXT = (".cc", ".h", ".cu", ".cuh")
FUNCTION_HEAD = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(->\s*[\w:<>,\s*&]+)?(:[^;{}]*)?$")
CONTROL_HEAD = re.compile(r"\b(if|for|while|switch|catch)\s*\(.*\)\s*$")


def blank_literals(src):
    """`src` with comments and string/char/raw-string literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if not m:
                out.append(src[i])
                i += 1
                continue
            j = src.find(")" + m.group(1) + '"', i)
            j = n if j < 0 else j + len(m.group(1)) + 2
        elif src[i] in "\"'":
            j = i + 1
            while j < n and src[j] != src[i] and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


def long_functions(text, max_lines):
    """(first line, name, line count) of each outermost function body longer than max_lines."""
    lines = blank_literals(text).split("\n")
    stack, found = [], []  # stack: (line, is_function)
    for ln, line in enumerate(lines, 1):
        for col, ch in enumerate(line):
            if ch == "{":
                head = (" ".join(lines[max(0, ln - 4):ln - 1]) + " " + line[:col]).strip()
                is_fn = bool(FUNCTION_HEAD.search(head)) and not CONTROL_HEAD.search(head[-200:])
                inside_fn = any(f for _, f in stack)
                stack.append((ln, is_fn and not inside_fn))
            elif ch == "}" and stack:
                start, is_fn = stack.pop()
                if is_fn and ln - start + 1 > max_lines:
                    name = re.findall(r"([~\w:]+)\s*\(", " ".join(lines[max(0, start - 4):start]))
                    found.append((start, name[-1] if name else "?", ln - start + 1))
    return found


def violations(root):
    errors = []
    for folder in CHECKED_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "bazel-"))]
            for f in sorted(filenames):
                if not f.endswith(CODE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for start, name, n in long_functions(fh.read(), MAX_LINES):
                        errors.append(f"{os.path.relpath(path, root)}:{start}: {name} has {n} lines (at most {MAX_LINES})")
    return errors


def self_test():
    body = "  x += 1;\n" * (MAX_LINES + 5)
    text = (
        "int shortOne(int x) {\n  return x;\n}\n"
        "void Lowerer::tooLong(Node& n) const {\n" + body + "}\n"
        "struct S {\n" + body + "};\n"                                      # a class, not a function
        "void ok() {\n  auto f = [&](int y) {\n    return y;\n  };\n}\n"
        'const char* s = "void fake() {";\n'                               # a string, not code
    )
    found = long_functions(text, MAX_LINES)
    ok = len(found) == 1 and found[0][1] == "Lowerer::tooLong" and found[0][2] == MAX_LINES + 7
    print("self-test:", "ok" if ok else f"unexpected {found}")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    errors = violations(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
    for e in errors:
        print(e)
    print(f"function length: {len(errors)} function(s) over {MAX_LINES} lines in {', '.join(CHECKED_FOLDERS)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
