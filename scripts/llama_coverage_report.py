#!/usr/bin/env python3
"""Reads gcov's counts of a --coverage llama.cpp build (scripts/llama-coverage)
and writes what one run reached of the reuse and memory sources: per file
lines, functions and branches; the decode path of llama-context.cpp; each
branch of llm_graph_params::allow_reuse and of every graph input's can_reuse;
and the functions never reached. --summary puts the runs side by side."""
import argparse
import sys
import collections
import json
import pathlib
import re
import subprocess

FILES = ["llama-context.cpp", "llama-graph.cpp", "llama-graph.h", "llama-kv-cache.cpp", "llama-kv-cells.h",
         "llama-batch.cpp", "llama-kv-cache-iswa.cpp", "llama-memory-recurrent.cpp", "llama-memory-hybrid.cpp",
         "llama-memory-hybrid-iswa.cpp", "llama-memory.cpp"]
# llama-context.cpp's decode path: what one llama_decode runs, graph reuse and the memory update included.
DECODE_PATH = re.compile(r"llama_context::(decode|process_ubatch|graph_params|graph_build|graph_compute|"
                         r"graph_get|output_reserve|output_reorder|sched_reserve|memory_update)\b|^llama_decode\b")
REUSE = re.compile(r"allow_reuse|can_reuse")


def gcov_json(objects):
    """Every .gcda's JSON (gcov --json-format --stdout), one document per data file."""
    docs = []
    for gcda in sorted(pathlib.Path(objects).rglob("*.gcda")):
        p = subprocess.run(["gcov", "--json-format", "--stdout", "--branch-probabilities", "-o", str(gcda.parent), str(gcda)],
                           capture_output=True, text=True, cwd=gcda.parent)
        for line in p.stdout.splitlines():
            if line.strip().startswith("{"):
                docs.append(json.loads(line))
    return docs


def merge(docs):
    """Per file (by base name): line -> [count, branch counts, function], function -> [count, first line]."""
    lines = collections.defaultdict(dict)
    funcs = collections.defaultdict(dict)
    for doc in docs:
        for f in doc.get("files", []):
            name = pathlib.Path(f["file"]).name
            if name not in FILES:
                continue
            for fn in f.get("functions", []):
                key = fn.get("demangled_name") or fn["name"]
                entry = funcs[name].setdefault(key, [0, fn["start_line"], fn.get("end_line", fn["start_line"])])
                entry[0] += fn["execution_count"]
            for ln in f.get("lines", []):
                n = ln["line_number"]
                entry = lines[name].setdefault(n, [0, [], ln.get("function_name", "")])
                entry[0] += ln["count"]
                counts = [b["count"] for b in ln.get("branches", [])]
                if len(entry[1]) == len(counts):
                    entry[1] = [a + b for a, b in zip(entry[1], counts)]
                elif len(counts) > len(entry[1]):
                    entry[1] = counts
    # A line's function, where gcov names none: the innermost function whose lines hold it.
    for name, ls in lines.items():
        spans = sorted((v[1], v[2], k) for k, v in funcs[name].items())
        for n, v in ls.items():
            if not v[2]:
                inner = [k for start, end, k in spans if start <= n <= end]
                v[2] = inner[-1] if inner else ""
    return lines, funcs


def demangled(name):
    return name if "::" in name or "(" in name else subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "-"


def union(out, runs):
    """The runs' counts added up: what they reached together."""
    lines = collections.defaultdict(dict)
    funcs = collections.defaultdict(dict)
    for run in runs:
        path = out / f"{run}.raw.json"
        if not path.exists():  # a run not measured (scripts/llama-coverage --runs)
            print(f"llama_coverage_report: no {path}: '{run}' is not in the union", file=sys.stderr)
            continue
        raw = json.loads(path.read_text())
        for name, ls in raw["lines"].items():
            for n, (count, branches, fn) in ls.items():
                entry = lines[name].setdefault(int(n), [0, [0] * len(branches), fn])
                entry[0] += count
                if len(entry[1]) == len(branches):
                    entry[1] = [a + b for a, b in zip(entry[1], branches)]
                elif len(branches) > len(entry[1]):  # a run read without branch counts has none
                    entry[1] = list(branches)
        for name, fs in raw["functions"].items():
            for k, (count, start, end) in fs.items():
                funcs[name].setdefault(k, [0, start, end])[0] += count
    return lines, funcs


def report(objects, run, out, runs=None):
    lines, funcs = union(out, runs) if runs else merge(gcov_json(objects))
    (out / f"{run}.raw.json").write_text(json.dumps({"lines": lines, "functions": funcs}))
    md = [f"# llama.cpp coverage: run `{run}`", "",
          "Written by scripts/llama-coverage (scripts/llama_coverage_report.py) from gcov's counts of the pinned "
          "release built with --coverage -O0.", "",
          "| file | lines | functions | branches taken |", "|---|---|---|---|"]
    data = {"run": run, "files": {}}
    for name in FILES:
        if name not in lines:
            continue
        ls, fs = lines[name], funcs[name]
        hit = sum(1 for v in ls.values() if v[0] > 0)
        fhit = sum(1 for v in fs.values() if v[0] > 0)
        branches = [c for v in ls.values() for c in v[1]]
        bhit = sum(1 for c in branches if c > 0)
        md.append(f"| {name} | {hit}/{len(ls)} ({pct(hit, len(ls))}) | {fhit}/{len(fs)} ({pct(fhit, len(fs))}) | "
                  f"{bhit}/{len(branches)} ({pct(bhit, len(branches))}) |")
        data["files"][name] = {"lines": [hit, len(ls)], "functions": [fhit, len(fs)], "branches": [bhit, len(branches)]}
    ctx = lines.get("llama-context.cpp", {})
    path_lines = [v for v in ctx.values() if DECODE_PATH.search(demangled(v[2]) or "")]
    phit = sum(1 for v in path_lines if v[0] > 0)
    data["decode_path"] = [phit, len(path_lines)]
    md += ["", f"**llama-context.cpp's decode path** (decode, process_ubatch, graph_params/build/compute/get, "
           f"output_reserve/reorder, sched_reserve, memory_update): {phit}/{len(path_lines)} lines "
           f"({pct(phit, len(path_lines))}).", "",
           "## The reuse condition: allow_reuse and each input's can_reuse", "",
           "A branch is taken both ways when each of its outcomes counted at least once. Lines with an outcome never taken:", ""]
    reuse = {}
    for name in ("llama-graph.h", "llama-graph.cpp"):
        for n, v in sorted(lines.get(name, {}).items()):
            fn = demangled(v[2])
            if not REUSE.search(fn or ""):
                continue
            r = reuse.setdefault(fn, {"file": name, "lines": [0, 0], "branches": [0, 0], "untaken": []})
            r["lines"][0] += v[0] > 0
            r["lines"][1] += 1
            r["branches"][0] += sum(1 for c in v[1] if c > 0)
            r["branches"][1] += len(v[1])
            if any(c == 0 for c in v[1]):
                r["untaken"].append(f"{name}:{n} ({sum(1 for c in v[1] if c > 0)} of {len(v[1])} outcomes)")
    md += ["| function | lines | branch outcomes taken | not taken at |", "|---|---|---|---|"]
    for fn, r in sorted(reuse.items()):
        md.append(f"| `{fn}` | {r['lines'][0]}/{r['lines'][1]} | {r['branches'][0]}/{r['branches'][1]} | "
                  f"{', '.join(r['untaken']) or ('every outcome taken' if r['branches'][1] else '-')} |")
    data["reuse"] = reuse
    md += ["", "## Functions never reached", ""]
    for name in FILES:
        never = sorted((v[1], demangled(k)) for k, v in funcs.get(name, {}).items() if v[0] == 0)
        if never:
            md += [f"**{name}** ({len(never)}): " + ", ".join(f"`{fn}` ({line})" for line, fn in never), ""]
    data["never"] = {name: sorted(demangled(k) for k, v in funcs.get(name, {}).items() if v[0] == 0) for name in FILES}
    (out / f"{run}.md").write_text("\n".join(md) + "\n")
    (out / f"{run}.json").write_text(json.dumps(data, indent=1) + "\n")


def summary(out):
    runs = [json.loads((out / f"{r}.json").read_text()) for r in ("swarm", "ubatch", "flash", "quant", "fuzz", "tests", "steady", "shapes", "before", "all") if (out / f"{r}.json").exists()]
    md = ["# llama.cpp coverage by run", "", "Lines reached per file (scripts/llama-coverage); each run's report has "
          "the functions and branches.", "", "| file | " + " | ".join(r["run"] for r in runs) + " |",
          "|---|" + "---|" * len(runs)]
    for name in FILES:
        cells = [pct(*r["files"][name]["lines"]) if name in r["files"] else "-" for r in runs]
        if any(c != "-" for c in cells):
            md.append(f"| {name} | " + " | ".join(cells) + " |")
    md.append("| llama-context.cpp decode path | " + " | ".join(pct(*r["decode_path"]) for r in runs) + " |")
    (out / "summary.md").write_text("\n".join(md) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects")
    ap.add_argument("--run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--union", help="runs whose counts to add up (RUN,RUN,...) instead of reading gcov's")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.summary:
        summary(out)
    else:
        report(a.objects, a.run, out, a.union.split(",") if a.union else None)


if __name__ == "__main__":
    main()
