#!/usr/bin/env bash
# One finding's server script (docs/findings/server/<id>.sh) run against a
# cached build's llama-server, with the model the reports give it (kvweld
# convert --config small --seed 1 --vocab test: a generating script needs a
# vocabulary), or the files a script kvweld repro wrote names: it must exit WANT (1: the bug shown, on
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
# A script kvweld repro wrote names the files it needs in its header
# ("#   kvweld convert ARGS FILE", the model first, then each LoRA adapter, then a draft model):
# made here, in that order. Any other is given the reports' model.
files=()
while read -r -a words; do
  "$kvweld" "${words[@]:2:${#words[@]}-3}" "$dir/${words[-1]}" > /dev/null || { echo "kvweld ${words[*]:2} failed"; exit 1; }
  files+=("$dir/${words[-1]}")
done < <(grep -E '^#   kvweld convert .* [A-Za-z0-9_.-]+\.gguf$' "$script")
if ((${#files[@]} == 0)); then
  "$kvweld" convert --config small --seed 1 --vocab test "$dir/model.gguf" > /dev/null || { echo "kvweld convert failed"; exit 1; }
  files=("$dir/model.gguf")
fi
# A request timed to a stream's event (the script's `moment`) lands where
# the trace says only as often as the machine allows: such a finding must
# show in one of 3 runs; a build that must not show it runs it 3 times.
tries=1
grep -q '^moment ' "$script" && tries=3
for ((k = 1; k <= tries; ++k)); do
  out=$(GGML_NO_BACKTRACE=1 bash "$script" "$server" "${files[@]}" 2>&1); rc=$?
  [[ $want == 1 && $rc == 1 ]] && break
  [[ $want == 0 && $rc != 0 ]] && break
done
printf '%s\n' "$out" | tail -8
if [[ $rc != "$want" ]]; then
  echo "server_script: $(basename "$script") exited $rc, expected $want ($([[ $want == 1 ]] && echo 'the bug shown on the unfixed build' || echo 'no bug with the fix'))"
  exit 1
fi
echo "server_script: $(basename "$script") exited $rc, as it must"
