#!/usr/bin/env bash
# usage: replay_exit.sh KVWELD EXPECTED_RC SIM_ARGS...
# Runs `kvweld sim SIM_ARGS --trace T --json J`, then `kvweld replay T
# --json J2`; both must exit with EXPECTED_RC, and the replay must print the
# same report and write the same JSON report, byte for byte.
set -u
kvweld=$1 want=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" sim "$@" --trace "$dir/trace.jsonl" --json "$dir/sim.json" >"$dir/sim.txt"
sim_rc=$?
"$kvweld" replay "$dir/trace.jsonl" --json "$dir/replay.json" >"$dir/replay.txt"
replay_rc=$?
tail -3 "$dir/replay.txt"
echo "sim exit code $sim_rc, replay exit code $replay_rc, expected $want"
[[ $sim_rc -eq $want && $replay_rc -eq $want ]] || exit 1
diff "$dir/sim.txt" "$dir/replay.txt" || { echo "the replay's report differs from the run's"; exit 1; }
cmp "$dir/sim.json" "$dir/replay.json" || { echo "the replay's JSON report differs from the run's"; exit 1; }
