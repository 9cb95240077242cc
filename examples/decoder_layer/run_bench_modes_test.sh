#!/usr/bin/env bash
# Runs bench_modes_test.py (Python unittest) with the system interpreter; no torch needed.
exec python3 examples/decoder_layer/bench_modes_test.py -v
