#!/usr/bin/env python3
"""The gate can fail: a ratio that drops past the threshold fails it, one
within the threshold passes; a missing, zero, NaN or errored ratio in the run
fails it, and so does an empty or incomplete baseline. held/replan moves
with the machine, so it gates against a floor, not the baseline: the figure
a faster 2-core EPYC gave (7.88 against this baseline's 11.41) passes, a
held plan that is rebuilt every step (about 1) fails."""
import json
import os
import subprocess
import sys
import tempfile

gate = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate.py")


BASE = {"held/replan tiny": 3.6, "held/replan stories15m": 11.41, "checked/unchecked sim": 0.5,
        "kvweld/llamacpp stories15m t1": 1.4, "kvweld/llamacpp stories15m t2": 1.3}
ERRORED = "errored"  # a benchmark that called SkipWithError (a failing simulation)


def entry(name, ratio):
    e = {"name": name + "/iterations:5", "run_name": name + "/iterations:5", "aggregate_name": "median"}
    if ratio is ERRORED:
        e.update(error_occurred=True, error_message="the simulation failed")
    elif ratio is not None:
        e["ratio"] = ratio
    return e


def bench_file(path, entries):
    json.dump({"benchmarks": [entry(n, r) for n, r in entries.items()]}, open(path, "w"))


def run(tmp, held, checked, base=BASE, only=None, over_llama=1.3, stories=11.0):
    d, s, b = (os.path.join(tmp, f) for f in ("d.json", "s.json", "base.json"))
    bench_file(d, {"decode/cpu/tiny/held_over_replan": held, "decode/cpu/stories15m/held_over_replan": stories,
                   "decode/cpu/stories15m/kvweld_over_llamacpp/t1": 1.4,
                   "decode/cpu/stories15m/kvweld_over_llamacpp/t2": over_llama})
    bench_file(s, {"sim/checked_over_unchecked": checked})
    json.dump({"ratios": base}, open(b, "w"))
    extra = ["--only", only] if only else []
    return subprocess.run([sys.executable, gate, d, s, "--baseline", b, "--threshold", "0.3"] + extra,
                          capture_output=True, text=True).returncode


with tempfile.TemporaryDirectory() as tmp:
    incomplete = {k: v for k, v in BASE.items() if k != "checked/unchecked sim"}
    results = {"unchanged": run(tmp, 3.0, 0.5), "small drop": run(tmp, 2.5, 0.4),
               "held/replan regressed": run(tmp, 1.2, 0.5),
               "held/replan on a faster host": run(tmp, 2.0, 0.5, stories=7.88),
               "held/replan stories15m lost reuse": run(tmp, 3.0, 0.5, stories=1.1), "checked/unchecked regressed": run(tmp, 3.0, 0.2),
               "ratio missing in the run": run(tmp, None, 0.5), "ratio zero": run(tmp, 3.0, 0.0),
               "ratio NaN": run(tmp, float("nan"), 0.5), "simulation errored": run(tmp, 3.0, ERRORED),
               "empty baseline": run(tmp, 3.0, 0.5, base={}), "baseline lacks a ratio": run(tmp, 3.0, 0.5, incomplete),
               "only the tiny ratio": run(tmp, 3.0, 0.0, only="held/replan tiny"),
               "unknown --only": run(tmp, 3.0, 0.5, only="nonsense"),
               "kvweld/llamacpp below its floor": run(tmp, 3.0, 0.5, over_llama=0.45),
               "kvweld/llamacpp on a slower host": run(tmp, 3.0, 0.5, over_llama=0.8),
               "kvweld/llamacpp missing": run(tmp, 3.0, 0.5, over_llama=None),
               "llama ratios not gated": run(tmp, 3.0, 0.5, over_llama=None,
                                             only="held/replan tiny,held/replan stories15m,checked/unchecked sim")}
    expected = {"unchanged": 0, "small drop": 0, "held/replan regressed": 1, "held/replan on a faster host": 0,
                "held/replan stories15m lost reuse": 1, "checked/unchecked regressed": 1,
                "ratio missing in the run": 1, "ratio zero": 1, "ratio NaN": 1, "simulation errored": 1,
                "empty baseline": 1, "baseline lacks a ratio": 1, "only the tiny ratio": 0, "unknown --only": 2,
                "kvweld/llamacpp below its floor": 1, "kvweld/llamacpp on a slower host": 0, "kvweld/llamacpp missing": 1, "llama ratios not gated": 0}
    for case, rc in results.items():
        print(f"{case:34} exit {rc} (expected {expected[case]})")
    sys.exit(0 if results == expected else 1)
