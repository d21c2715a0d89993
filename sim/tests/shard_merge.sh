#!/usr/bin/env bash
# usage: shard_merge.sh KVWELD [SWARM_ARGS...]   (e.g. --engine llamacpp)
# Runs a swarm whole and in 4 shards, merges the shards' reports, and checks
# the merged report equals the whole one byte for byte; then checks that a
# merge with a shard missing exits 2.
set -u
kvweld=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" swarm "$@" --seeds 10..29 --steps 80 --jobs 2 --json "$dir/whole.json" >/dev/null || exit 1
for i in 0 1 2 3; do
  "$kvweld" swarm "$@" --seeds 10..29 --steps 80 --jobs 2 --shard "$i/4" --json "$dir/s$i.json" >/dev/null || exit 1
done
"$kvweld" merge "$dir"/s3.json "$dir"/s1.json "$dir"/s0.json "$dir"/s2.json --json "$dir/merged.json" >"$dir/merge.out"
rc=$?
tail -2 "$dir/merge.out"
echo "merge of the four shards: exit $rc (expected 0)"
cmp "$dir/whole.json" "$dir/merged.json" || { echo "the merged report differs from the unsharded one"; exit 1; }
echo "merged report identical to the unsharded run's"
"$kvweld" merge "$dir"/s0.json "$dir"/s1.json "$dir"/s2.json; missing=$?
echo "merge without shard 3: exit $missing (expected 2)"
[[ $rc -eq 0 && $missing -eq 2 ]]
