#!/usr/bin/env python3
"""Compares benchmark ratios with bench/baseline.json; exits 1 on a regression.

Only ratios gate, and each in one of two ways (GATES below):
  against the baseline: a ratio of two things measured in the same run that
    both move with the machine alike (a peer), so the baseline machine's
    value holds on any machine of this kind. It regresses when it falls
    below baseline * (1 - threshold).
      checked/unchecked  simulator throughput (decodes/s), oracles on / off
  against a floor: a ratio that moves with the machine, gated only where it
    says the feature is gone, whatever the host's speed.
      kvweld/llamacpp  kvweld's held plan over llama.cpp's decode on the
                   same weights, stories15M dims, 1 and 2 threads (only
                   where decode_bench has llama.cpp). Not a peer that moves
                   alike: 1.53 and 1.55 on the baseline machine, 1.38 to
                   2.27 across one day's runs there, 0.79 and 0.87 on an
                   AVX2-only 2-core EPYC (a clean clone's scripts/test,
                   2026-12-02), where kvweld's held plan ran 2.3 times
                   slower than on the baseline machine (llama.cpp's own
                   speed there was not recorded). The floor, 0.5, fails
                   kvweld's decode at half llama.cpp's speed.
      held/replan  decode speedup of a held plan over a replan every token
                   (tiny and stories15M dims, CPU). It moves with the cost
                   of a plan build against a decode (allocation, page
                   faults, cache sizes): 11.41 at stories15M dims on the
                   baseline machine, 7.88 on a faster 2-core EPYC. A replan
                   does the held step's work plus a build that reads and
                   writes every weight, so a working held plan is at least
                   about twice as fast on any machine; a held plan that is
                   rebuilt every step (lost reuse) gives about 1.
A ratio
that is missing, not a positive finite number, or whose benchmark reported
an error (a failing simulation is not a throughput) fails the gate, in the
baseline as in the run. --only restricts the gate to some ratios (the quick
gate runs a subset of the benchmarks).
Absolute figures are printed beside them, never gated.
"""
import argparse
import json
import math
import re
import sys

# name -> the floor it must stay above, or None: gated against the baseline.
GATES = {"held/replan tiny": 1.5, "held/replan stories15m": 2.0, "checked/unchecked sim": None,
         "kvweld/llamacpp stories15m t1": 0.5, "kvweld/llamacpp stories15m t2": 0.5}
GATED = tuple(GATES)


ERRORS = {}  # benchmark name -> its error message


def medians(path, counter):
    """name -> median of `counter` from a Google Benchmark JSON file."""
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("error_occurred"):
            ERRORS[b.get("run_name", b["name"])] = b.get("error_message", "error")
            continue
        if b.get("aggregate_name", "median") != "median":
            continue
        name = re.sub(r"/(min_time|iterations):.*$", "", b.get("run_name", b["name"]))
        if counter in b:
            out[name] = b[counter]
    return out


def ratios(decode_json, sim_json):
    """The gated ratios come from paired benchmarks (adjacent blocks, median
    over blocks), so machine noise moves both halves alike."""
    dr, sr = medians(decode_json, "ratio"), medians(sim_json, "ratio")
    d, s = medians(decode_json, "tokens_per_s"), medians(sim_json, "decodes_per_s")
    r, absolute = {}, {}
    for dims in ("tiny", "stories15m"):
        if f"decode/cpu/{dims}/held_over_replan" in dr:
            r[f"held/replan {dims}"] = dr[f"decode/cpu/{dims}/held_over_replan"]
        if f"decode/cpu/{dims}/held" in d:
            absolute[f"held tokens/s {dims}"] = d[f"decode/cpu/{dims}/held"]
    for t in ("t1", "t2"):
        if f"decode/cpu/stories15m/kvweld_over_llamacpp/{t}" in dr:
            r[f"kvweld/llamacpp stories15m {t}"] = dr[f"decode/cpu/stories15m/kvweld_over_llamacpp/{t}"]
    if "sim/checked_over_unchecked" in sr:
        r["checked/unchecked sim"] = sr["sim/checked_over_unchecked"]
    if "sim/checked" in s:
        absolute["checked decodes/s"] = s["sim/checked"]
    return r, absolute


def usable(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("decode_json")
    p.add_argument("sim_json")
    p.add_argument("--baseline", default="bench/baseline.json")
    p.add_argument("--threshold", type=float, default=0.30, help="allowed fractional drop of a ratio (default 0.30)")
    p.add_argument("--update", action="store_true", help="write the current ratios as the new baseline")
    p.add_argument("--only", default=",".join(GATED), help="comma-separated ratios to gate (default: all)")
    a = p.parse_args()
    gated = [g for g in a.only.split(",") if g]
    unknown = [g for g in gated if g not in GATED]
    if unknown or not gated:
        print(f"bench-gate: --only {a.only!r}: expected some of {', '.join(GATED)}")
        return 2

    now, absolute = ratios(a.decode_json, a.sim_json)
    for name, message in sorted(ERRORS.items()):
        print(f"benchmark {name} reported an error: {message}")
    bad = [g for g in gated if not usable(now.get(g))]
    if a.update:
        if bad or ERRORS:
            print(f"bench-gate: not writing a baseline: no usable value for {', '.join(bad) or 'an errored benchmark'}")
            return 1
        json.dump({"ratios": now, "absolute_at_baseline": absolute, "threshold": a.threshold},
                  open(a.baseline, "w"), indent=2, sort_keys=True)
        print(f"bench-gate: baseline written to {a.baseline}")
        return 0
    baseline = json.load(open(a.baseline))
    base = baseline.get("ratios") or {}
    failed = bool(ERRORS)
    print(f"{'ratio':30} {'bound':>16} {'now':>10} {'change':>8}  verdict")
    for name in gated:
        b, n, floor = base.get(name), now.get(name), GATES[name]
        if floor is None and not usable(b):
            print(f"{name:30} {str(b):>16} {'':>10} {'':>8}  FAIL (no usable baseline value)")
            failed = True
            continue
        bound = floor if floor is not None else b * (1 - a.threshold)
        said = f"floor {floor:.2f}" if floor is not None else f"{b:.3f} -{100 * a.threshold:.0f}%"
        if not usable(n):
            print(f"{name:30} {said:>16} {str(n):>10} {'':>8}  FAIL (benchmark did not run or gave no usable value)")
            failed = True
            continue
        ok = n >= bound
        failed |= not ok
        change = f"{100 * (n / b - 1):+7.1f}%" if usable(b) else ""
        print(f"{name:30} {said:>16} {n:10.3f} {change:>8}  {'ok' if ok else 'REGRESSED'}")
    print("absolute (shown, never gated):")
    for name, v in sorted(absolute.items()):
        was = (baseline.get("absolute_at_baseline") or {}).get(name)
        print(f"  {name:26} {v:12.1f}" + (f"   (baseline machine: {was:.1f})" if was else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
