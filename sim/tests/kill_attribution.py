#!/usr/bin/env python3
"""Holds a kill matrix's attribution against a pinned table, every fault.

  kill_attribution.py REPORT.json PINNED.tsv       check (exit 1 on a difference)
  kill_attribution.py REPORT.json PINNED.tsv --write   write the table anew

REPORT.json is `kvweld mutants --json`. Each fault's row pins the seed that
first failed, the oracle that caught that seed, and the tally of oracles
that caught each failing seed first ("data 3, weld 1"). A report that names
another seed's oracle, or tallies otherwise, fails here naming the fault. A
fault the table lacks, or one it has that the report lacks, fails too: a
new fault switch is pinned when it is added (regenerate with --write and
read the diff).
"""
import json
import sys


def rows_of(report):
    out = {}
    for r in report["rows"]:
        first = str(r.get("first_seed", "-"))
        oracle = r["failure"]["oracle"] if "failure" in r else "-"
        out[r["fault"]] = (first, oracle, r["caught_first_by"])
    return out


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--write"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    report = json.load(open(argv[1]))
    got = rows_of(report)
    header = "# fault\tfirst failing seed\tits oracle\tcaught first by (per failing seed)"
    setup = f"# kvweld mutants --engine {report['engine']} --seeds {report['seeds']} --steps {report['steps']}"
    if len(argv) == 4:
        with open(argv[2], "w") as f:
            f.write(setup + "\n" + header + "\n")
            for fault, row in got.items():
                f.write("\t".join((fault,) + row) + "\n")
        print(f"wrote {len(got)} rows to {argv[2]}")
        return 0
    pinned = {}
    for line in open(argv[2]):
        if line.startswith("#") or not line.strip():
            continue
        fault, *row = line.rstrip("\n").split("\t")
        pinned[fault] = tuple(row)
    bad = 0
    for fault in sorted(set(pinned) | set(got)):
        want, have = pinned.get(fault), got.get(fault)
        if want != have:
            bad += 1
            print(f"DIFFERS {fault}: pinned {want}, report {have}")
    print(f"{len(got)} faults in the report, {len(pinned)} pinned, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
