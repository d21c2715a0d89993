#!/usr/bin/env bash
# A server known finding's trace written as a shell script by kvweld repro
# (replayed on the pinned llama-server), then run on the trace's model: it
# must exit 1 on the pinned build (the finding shown), and WANT_FIXED on the
# fixed one (0 where the finding has a fix, 1 where it has none).
# KV_TYPE (f16, bf16): the trace's servers store KV rows in it, so the
# script must judge within that type's tolerance (a correct server's 16-bit
# rows round away more than F32's 1e-4).
#   server_repro.sh KVWELD TRACE PINNED_SERVER FIXED_SERVER WANT_FIXED [KV_TYPE]
set -uo pipefail
kvweld=$1 trace=$2 pinned=$3 fixed=$4 want_fixed=$5 kv_type=${6:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [[ -n $kv_type ]]; then
  python3 - "$trace" "$kv_type" "$dir/$(basename "$trace")" <<'PY' || { echo "server_repro: cannot set the KV type"; exit 1; }
import json, sys
lines = open(sys.argv[1]).read().splitlines()
header = json.loads(lines[0])
header["settings"]["kv_type"] = sys.argv[2]
open(sys.argv[3], "w").write("\n".join([json.dumps(header)] + lines[1:]) + "\n")
PY
  trace=$dir/$(basename "$trace")
fi
# A request timed to a stream's event (a during op) lands when the stream
# is where the trace says only as often as the machine allows (under
# ASan's load a 118-token stream can end first): such a finding must show
# in one of 3 runs, and a side that must not show it must not in any.
tries=1
grep -q '"op":"during"' "$trace" && tries=3
for ((k = 1; k <= tries; ++k)); do
  "$kvweld" repro --server "$pinned" "$trace" -o "$dir/finding.sh" && break
  ((k < tries)) || { echo "server_repro: kvweld repro failed ($tries tries)"; exit 1; }
done
# The files the script takes, as its header names them ("#   kvweld convert ARGS FILE": the model, each LoRA adapter, a draft model).
files=()
while read -r -a words; do
  "$kvweld" "${words[@]:2:${#words[@]}-3}" "$dir/${words[-1]}" > /dev/null || { echo "kvweld ${words[*]:2} failed"; exit 1; }
  files+=("$dir/${words[-1]}")
done < <(grep -E '^#   kvweld convert .* [A-Za-z0-9_.-]+\.gguf$' "$dir/finding.sh")
status=0
for side in "$pinned 1" "$fixed $want_fixed"; do
  read -r server want <<< "$side"
  ok=0
  ((want == 0)) && ok=1
  for ((k = 1; k <= tries; ++k)); do
    out=$(bash "$dir/finding.sh" "$server" "${files[@]}" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v "Aborted" | tail -4
    echo "server_repro: $(basename "$trace") on $server exited $rc (expected $want; run $k of $tries)"
    if ((want == 1)); then
      ((rc == 1)) && { ok=1; break; }  # shown: once is enough
    else
      ((rc == 0)) || { ok=0; break; }  # a fix must not show it in any run
    fi
  done
  ((ok)) || status=1
done
exit $status
