#!/usr/bin/env python3
"""Unit tests of bench_modes.py, the mode dispatch of bench_decoder_layer.py (no torch needed).

Guards the bug of the 2026-11-29 H200 run: "fxfuse-heuristic" was handed to torch.compile
instead of `fxfuse bench --no-gemm-tune`, and its column came out "n/a".
"""
import ast
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_modes as bm  # noqa: E402

DEFAULT_MODES = "fxfuse,fxfuse-heuristic,eager,default,max-autotune"


class TorchNeverMeasuresFxfuseModes(unittest.TestCase):
    def test_default_and_final_call_modes(self):
        for text in (DEFAULT_MODES, "fxfuse,fxfuse-heuristic,eager,default", "fxfuse-heuristic,eager"):
            modes = bm.parse_modes(text)
            torch_modes = [m for m, _ in bm.torch_plan(modes, [1, 8])]
            self.assertFalse(set(torch_modes) & set(bm.FXFUSE_MODES), (text, torch_modes))
            self.assertEqual(bm.fxfuse_modes(modes), [m for m in modes if m.startswith("fxfuse")])

    def test_torch_plan_order_and_max_autotune_tokens(self):
        plan = bm.torch_plan(bm.parse_modes("max-autotune,fxfuse-heuristic,default,eager"), [1, 64], [64])
        self.assertEqual(plan, [("default", [1, 64]), ("eager", [1, 64]), ("max-autotune", [64])])

    def test_every_mode_is_measured_exactly_once(self):
        modes = bm.parse_modes(DEFAULT_MODES)
        measured = bm.fxfuse_modes(modes) + [m for m, _ in bm.torch_plan(modes, [1])]
        self.assertEqual(sorted(measured), sorted(modes))


class FxfuseCommandLines(unittest.TestCase):
    def test_heuristic_turns_tuning_off_and_tuned_does_not(self):
        tuned = bm.fxfuse_bench_argv("fx", "p.pb", "fxfuse", 64, 100, "t.json")
        heur = bm.fxfuse_bench_argv("fx", "p.pb", "fxfuse-heuristic", 64, 100, "h.json")
        self.assertNotIn("--no-gemm-tune", tuned)
        self.assertIn("--no-gemm-tune", heur)
        self.assertEqual(tuned[:3], ["fx", "bench", "p.pb"])
        self.assertIn("s0=64", tuned)
        # identical apart from the JSON path and the tuning flag
        self.assertEqual([a for a in heur if a not in ("h.json", "--no-gemm-tune")],
                         [a for a in tuned if a != "t.json"])

    def test_iteration_count_bounds(self):
        self.assertEqual(bm.iters_for(87.5, 100), 100)
        self.assertEqual(bm.iters_for(2076.1 * 64, 100), 15)
        self.assertEqual(bm.iters_for(1e9, 100), 10)


class ModeParsing(unittest.TestCase):
    def test_unknown_and_repeated_modes_are_errors(self):
        with self.assertRaisesRegex(ValueError, "fxfuse-heuristc"):
            bm.parse_modes("fxfuse,fxfuse-heuristc")
        with self.assertRaisesRegex(ValueError, "twice"):
            bm.parse_modes("eager,eager")

    def test_columns(self):
        self.assertEqual(bm.columns(bm.parse_modes("fxfuse,fxfuse-heuristic,eager")),
                         ["fxfuse", "fxfuse-heuristic", "eager", "eager (graph)"])


class BenchScriptUsesTheDispatch(unittest.TestCase):
    """bench_decoder_layer.py needs torch 2.x to import; read its source instead of running it."""

    def setUp(self):
        with open(os.path.join(HERE, "bench_decoder_layer.py")) as f:
            self.tree = ast.parse(f.read())

    def called_names(self):
        return {n.func.id for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}

    def test_torch_loop_and_fxfuse_commands_come_from_bench_modes(self):
        calls = self.called_names()
        for fn in ("parse_modes", "torch_plan", "fxfuse_modes", "fxfuse_bench_argv"):
            self.assertIn(fn, calls)

    def test_no_mode_filter_by_hand(self):
        # a literal tuple of modes to exclude was the bug: the torch list must come from torch_plan
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                for c in node.comparators:
                    if isinstance(c, (ast.Tuple, ast.List, ast.Set)):
                        names = {e.value for e in c.elts if isinstance(e, ast.Constant)}
                        self.assertFalse(names & set(bm.FXFUSE_MODES), ast.dump(node)[:200])


if __name__ == "__main__":
    unittest.main()
