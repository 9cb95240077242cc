"""torch_parity.py on the CPU (Debian's torch, no FP8: emulated e4m3) against fxfuse's CPU
interpreter on the tiny model: the e4m3 helpers are exact, the paged cache is gathered through
the block table, the interpreter's logits agree with torch's on the same inputs, and the same
comparison fails when torch reads the cache of the wrong sequences."""
import argparse
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
import decode_model  # noqa: E402
import torch_decode as td  # noqa: E402
import torch_parity as tp  # noqa: E402

FXFUSE = os.environ.get("FXFUSE", "bazel-bin/fxfuse")


class E4m3Test(unittest.TestCase):
    def test_every_value_rounds_to_itself_and_back_to_its_byte(self):
        table = tp.e4m3_table()
        finite = table[~torch.isnan(table)]
        self.assertEqual(len(finite), 254)
        self.assertTrue(torch.equal(td.round_e4m3(finite), finite))
        self.assertTrue(torch.equal(tp.e4m3_table()[tp.e4m3_bytes(finite).long()], finite))
        self.assertEqual(finite.max().item(), 448.0)

    def test_ties_round_to_even_and_subnormals_step_by_2_to_the_minus_9(self):
        x = torch.tensor([1.0625, 1.1875, 2.0 ** -9 * 1.5, 2.0 ** -9 * 0.5, 300.0, -0.3])
        want = torch.tensor([1.0, 1.25, 2.0 ** -8, 0.0, 288.0, -0.3125])
        self.assertTrue(torch.equal(td.round_e4m3(x), want))


class StaticCacheTest(unittest.TestCase):
    def test_positions_follow_the_block_table(self):
        bs, hk, e = 4, 2, 3
        paged = torch.arange(6 * bs * hk * e, dtype=torch.float32).reshape(6, bs, hk, e)
        table = torch.tensor([[5, 1, 0], [2, 4, 0]], dtype=torch.int32)
        s = tp.static_cache(paged, table, 2, 6)  # [B, Hk, C, E]
        self.assertEqual(list(s.shape), [2, hk, 6, e])
        self.assertTrue(torch.equal(s[0, 1, 0], paged[5, 0, 1]))
        self.assertTrue(torch.equal(s[0, 0, 5], paged[1, 1, 0]))
        self.assertTrue(torch.equal(s[1, 1, 4], paged[4, 0, 1]))


class InterpreterParityTest(unittest.TestCase):
    def test_tiny_model_matches_torch_and_a_wrong_cache_does_not(self):
        out = tempfile.mkdtemp()
        a = argparse.Namespace(fxfuse=FXFUSE, config="tiny", layers=2, vocab=None, batch=3, context=40, seed=7, cpu=True,
                               out=out)
        config = decode_model.CONFIGS["tiny"]
        inputs, ours = tp.fxfuse_runs(a, config, "t", [], "cpu", False)
        ref = tp.Step(config, 2, inputs, 3, 40, "emulate").logits("eager")
        good = tp.compare(ours, ref)
        self.assertTrue(good["finite"])
        self.assertLess(good["rel_l2"], 0.02, good)
        self.assertEqual(good["same_top_token"], 3)
        swapped = dict(inputs)
        swapped["block_table"] = inputs["block_table"].flip(0)  # every sequence reads another's cache
        bad = tp.compare(ours, tp.Step(config, 2, swapped, 3, 40, "emulate").logits("eager"))
        print("\nparity: %s; with the block table's rows swapped: %s" % (good, bad))
        self.assertGreater(bad["rel_l2"], 0.1, bad)


if __name__ == "__main__":
    unittest.main()
