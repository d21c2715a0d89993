#!/usr/bin/env python3
"""Compares benchmark ratios with bench/baseline.json; exits 1 on a regression.

Only ratios gate (machines differ; a ratio measured in one run on one machine does not):
  held/replan  decode speedup (tokens/s), tiny and stories15M dims, CPU
  checked/unchecked  simulator throughput (decodes/s)
A ratio regresses when it falls below baseline * (1 - threshold).
Absolute figures are printed beside them, never gated.
"""
import argparse
import json
import re
import sys


def medians(path, counter):
    """name -> median of `counter` from a Google Benchmark JSON file."""
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
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
    if "sim/checked_over_unchecked" in sr:
        r["checked/unchecked sim"] = sr["sim/checked_over_unchecked"]
    if "sim/checked" in s:
        absolute["checked decodes/s"] = s["sim/checked"]
    return r, absolute


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("decode_json")
    p.add_argument("sim_json")
    p.add_argument("--baseline", default="bench/baseline.json")
    p.add_argument("--threshold", type=float, default=0.30, help="allowed fractional drop of a ratio (default 0.30)")
    p.add_argument("--update", action="store_true", help="write the current ratios as the new baseline")
    a = p.parse_args()

    now, absolute = ratios(a.decode_json, a.sim_json)
    if a.update:
        json.dump({"ratios": now, "absolute_at_baseline": absolute, "threshold": a.threshold},
                  open(a.baseline, "w"), indent=2, sort_keys=True)
        print(f"bench-gate: baseline written to {a.baseline}")
        return 0
    base = json.load(open(a.baseline))
    failed = False
    print(f"{'ratio':28} {'baseline':>10} {'now':>10} {'change':>8}  verdict")
    for name, b in sorted(base["ratios"].items()):
        n = now.get(name)
        if n is None:
            print(f"{name:28} {b:10.3f} {'missing':>10} {'':>8}  FAIL (benchmark did not run)")
            failed = True
            continue
        ok = n >= b * (1 - a.threshold)
        failed |= not ok
        print(f"{name:28} {b:10.3f} {n:10.3f} {100 * (n / b - 1):+7.1f}%  {'ok' if ok else 'REGRESSED'}")
    print("absolute (shown, never gated):")
    for name, v in sorted(absolute.items()):
        was = base.get("absolute_at_baseline", {}).get(name)
        print(f"  {name:26} {v:12.1f}" + (f"   (baseline machine: {was:.1f})" if was else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
