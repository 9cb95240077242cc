#!/usr/bin/env bash
# Runs a Python test script with the system interpreter (Debian's python3).
exec python3 "$@"
