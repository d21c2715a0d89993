#!/usr/bin/env bash
# A server known finding's trace written as a shell script by kvweld repro
# (replayed on the pinned llama-server), then run on the trace's model: it
# must exit 1 on the pinned build (the finding shown), and WANT_FIXED on the
# fixed one (0 where the finding has a fix, 1 where it has none).
#   server_repro.sh KVWELD TRACE PINNED_SERVER FIXED_SERVER WANT_FIXED
set -uo pipefail
kvweld=$1 trace=$2 pinned=$3 fixed=$4 want_fixed=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" repro --server "$pinned" "$trace" -o "$dir/finding.sh" || { echo "server_repro: kvweld repro failed"; exit 1; }
seed=$(head -1 "$trace" | python3 -c 'import json, sys; print(json.load(sys.stdin)["seed"])')
preset=$(head -1 "$trace" | python3 -c 'import json, sys; print(json.load(sys.stdin)["preset"])')
"$kvweld" convert --config "$preset" --seed "$seed" --vocab test "$dir/model.gguf" > /dev/null || exit 1
loras=$(head -1 "$trace" | python3 -c 'import json, sys; print(json.load(sys.stdin)["settings"].get("loras", 0))')
adapters=()
for ((i = 0; i < loras; i++)); do
  "$kvweld" convert --config "$preset" --seed "$seed" --lora "$i" "$dir/lora-$i.gguf" > /dev/null || exit 1
  adapters+=("$dir/lora-$i.gguf")
done
status=0
for side in "$pinned 1" "$fixed $want_fixed"; do
  read -r server want <<< "$side"
  out=$(bash "$dir/finding.sh" "$server" "$dir/model.gguf" "${adapters[@]}" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -v "Aborted" | tail -4
  echo "server_repro: $(basename "$trace") on $server exited $rc (expected $want)"
  [[ $rc == "$want" ]] || status=1
done
exit $status
