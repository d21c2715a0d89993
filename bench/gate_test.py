#!/usr/bin/env python3
"""The gate can fail: a ratio that drops past the threshold fails it, one
within the threshold passes, and a missing benchmark fails it."""
import json
import os
import subprocess
import sys
import tempfile

gate = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.py")


def bench_file(path, entries):
    json.dump({"benchmarks": [{"name": n + "/iterations:5", "run_name": n + "/iterations:5",
                               "aggregate_name": "median", "ratio": r} for n, r in entries.items()]},
              open(path, "w"))


def run(tmp, held, checked):
    d, s, base = (os.path.join(tmp, f) for f in ("d.json", "s.json", "base.json"))
    bench_file(d, {"decode/cpu/tiny/held_over_replan": held, "decode/cpu/stories15m/held_over_replan": 10.0})
    bench_file(s, {"sim/checked_over_unchecked": checked})
    json.dump({"ratios": {"held/replan tiny": 3.0, "held/replan stories15m": 10.0, "checked/unchecked sim": 0.5}},
              open(base, "w"))
    return subprocess.run([sys.executable, gate, d, s, "--baseline", base, "--threshold", "0.3"],
                          capture_output=True, text=True).returncode


with tempfile.TemporaryDirectory() as tmp:
    results = {"unchanged": run(tmp, 3.0, 0.5), "small drop": run(tmp, 2.5, 0.4),
               "held/replan regressed": run(tmp, 1.5, 0.5), "checked/unchecked regressed": run(tmp, 3.0, 0.2)}
    expected = {"unchanged": 0, "small drop": 0, "held/replan regressed": 1, "checked/unchecked regressed": 1}
    for case, rc in results.items():
        print(f"{case:28} exit {rc} (expected {expected[case]})")
    sys.exit(0 if results == expected else 1)
