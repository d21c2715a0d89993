#!/usr/bin/env bash
# usage: diff_replay.sh KVWELD VERDICT DIFF_ARGS...
# Runs `kvweld diff DIFF_ARGS --traces DIR`, which must exit 1 (the engines
# differ) and write a shrunk trace of a seed that ended with VERDICT; then
# `kvweld replay` of that trace must exit with VERDICT's code (rows_differ 7,
# reuse_differs 8) and print the same verdict.
set -u
kvweld=$1 verdict=$2
shift 2
case $verdict in rows_differ) want=7 ;; reuse_differs) want=8 ;; *) echo "unknown verdict $verdict"; exit 2 ;; esac
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" diff "$@" --traces "$dir" >"$dir/diff.txt" 2>&1
rc=$?
tail -6 "$dir/diff.txt"
echo "diff exit code $rc (expected 1)"
[[ $rc -eq 1 ]] || exit 1
traces=("$dir"/diff-seed*-"$verdict".jsonl)
[[ -f ${traces[0]} ]] || { echo "no shrunk trace of a $verdict seed in $dir"; exit 1; }
"$kvweld" replay "${traces[0]}" >"$dir/replay.txt"
replay_rc=$?
tail -3 "$dir/replay.txt"
echo "replay exit code $replay_rc (expected $want)"
[[ $replay_rc -eq $want ]] && grep -q "verdict: FAIL $verdict" "$dir/replay.txt"
