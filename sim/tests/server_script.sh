#!/usr/bin/env bash
# One finding's server script (docs/findings/server/<id>.sh) run against a
# cached build's llama-server, with the model the reports give it (kvweld
# convert --config small --seed 1 --vocab test: a generating script needs a
# vocabulary): it must exit WANT (1: the bug shown, on
# the pinned build; 0: not, on the fixed one). A cache without llama-server
# skips (77), naming what builds it, unless REQUIRED is ON (CI): then it fails.
#   server_script.sh KVWELD SCRIPT LLAMA_SERVER WANT REQUIRED
set -uo pipefail
kvweld=$1 script=$2 server=$3 want=$4 required=${5:-OFF}
if [[ ! -x $server ]]; then
  echo "no $server: scripts/setup-llama builds llama-server into the pinned build and the fixed one"
  [[ $required == ON ]] && exit 1
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$kvweld" convert --config small --seed 1 --vocab test "$dir/model.gguf" > /dev/null || { echo "kvweld convert failed"; exit 1; }
out=$(GGML_NO_BACKTRACE=1 bash "$script" "$server" "$dir/model.gguf" 2>&1); rc=$?
printf '%s\n' "$out" | tail -8
if [[ $rc != "$want" ]]; then
  echo "server_script: $(basename "$script") exited $rc, expected $want ($([[ $want == 1 ]] && echo 'the bug shown on the unfixed build' || echo 'no bug with the fix'))"
  exit 1
fi
echo "server_script: $(basename "$script") exited $rc, as it must"
