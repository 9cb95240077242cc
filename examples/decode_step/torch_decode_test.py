"""torch_decode.py's decode step on the CPU (torch from Debian; bf16 weights instead of FP8,
which that torch lacks): the step's logits have the right shape and are finite, this step's
key and value land at position C - 1 of every layer's cache and nowhere else, and the step is
deterministic. Where torch has no grouped-query SDPA, torch_decode.attend's reference stands
in."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fixtures"))
import decode_model  # noqa: E402
import torch_decode as td  # noqa: E402

class DecodeStepTest(unittest.TestCase):
    def run_step(self, batch, context):
        m = td.DecodeModel(decode_model.CONFIGS["tiny"], device="cpu", weights="bf16").set_batch(batch, context)
        before = [(lw["k_cache"].clone(), lw["v_cache"].clone()) for lw in m.layers]
        out = td.make_step(m, td.layer_for("eager"))()
        return m, before, out

    def test_logits_and_cache_writes(self):
        for batch, context in ((1, 16), (3, 40)):
            m, before, out = self.run_step(batch, context)
            self.assertEqual(tuple(out.shape), (batch, m.V))
            self.assertTrue(torch.isfinite(out.float()).all())
            for (k0, v0), lw in zip(before, m.layers):
                for old, new in ((k0, lw["k_cache"]), (v0, lw["v_cache"])):
                    self.assertTrue(torch.equal(old[:, :, : context - 1], new[:, :, : context - 1]))
                    self.assertFalse(torch.equal(old[:, :, context - 1], new[:, :, context - 1]))

    def test_deterministic(self):
        _, _, a = self.run_step(2, 24)
        _, _, b = self.run_step(2, 24)
        self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    unittest.main()
