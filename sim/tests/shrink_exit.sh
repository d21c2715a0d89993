#!/usr/bin/env bash
# usage: shrink_exit.sh KVWELD EXPECTED_RC SIM_ARGS...
# Runs a failing `kvweld sim SIM_ARGS --trace T`, shrinks T, and checks the
# shrunk trace replays to the same exit code with fewer ops.
set -u
kvweld=$1 want=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" sim "$@" --trace "$dir/trace.jsonl" >/dev/null
sim_rc=$?
"$kvweld" shrink "$dir/trace.jsonl" -o "$dir/small.jsonl" >"$dir/shrink.out" 2>&1
shrink_rc=$?
tail -4 "$dir/shrink.out"
"$kvweld" replay "$dir/small.jsonl" >/dev/null
replay_rc=$?
before=$(wc -l <"$dir/trace.jsonl") after=$(wc -l <"$dir/small.jsonl")
echo "sim exit $sim_rc, shrink exit $shrink_rc, shrunk replay exit $replay_rc (expected $want, 0, $want); $before -> $after trace lines"
[[ $sim_rc -eq $want && $shrink_rc -eq 0 && $replay_rc -eq $want && $after -lt $before ]]
