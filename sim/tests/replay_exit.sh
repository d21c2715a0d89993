#!/usr/bin/env bash
# usage: replay_exit.sh KVWELD EXPECTED_RC SIM_ARGS...
# Runs `kvweld sim SIM_ARGS --trace T`, then `kvweld replay T`; both must
# exit with EXPECTED_RC, and the replay must print the same report.
set -u
kvweld=$1 want=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" sim "$@" --trace "$dir/trace.jsonl" >"$dir/sim.txt"
sim_rc=$?
"$kvweld" replay "$dir/trace.jsonl" >"$dir/replay.txt"
replay_rc=$?
tail -3 "$dir/replay.txt"
echo "sim exit code $sim_rc, replay exit code $replay_rc, expected $want"
[[ $sim_rc -eq $want && $replay_rc -eq $want ]] || exit 1
diff "$dir/sim.txt" "$dir/replay.txt" || { echo "the replay's report differs from the run's"; exit 1; }
