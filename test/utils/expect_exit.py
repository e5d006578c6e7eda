"""Runs a command and succeeds only if it exits with exactly the given code.

Usage: expect_exit.py CODE COMMAND [ARGS...]

`not` accepts any non-zero exit; tcc promises exit code 1 for bad input
(never a crash, never another code), which this checks. Output passes
through unchanged.
"""
import subprocess
import sys

expected = int(sys.argv[1])
rc = subprocess.call(sys.argv[2:])
if rc != expected:
    sys.stderr.write(f"expect_exit: {sys.argv[2]} exited with {rc}, expected {expected}\n")
    sys.exit(1)
