#!/usr/bin/env bash
# llama-server with --swa-full --kv-unified on a sliding-window model
# (granite_swa, window 16), 4 slots, --context-shift: --swa-full makes the
# server take the window as kept whole (n_swa 0), but in a unified cache
# llama_kv_cache::find_slot gives cells another slot's window no longer
# needs to a new token. A long completion on slot 0 (its context shifted)
# takes 10 of slot 2's oldest cells; a prompt that reuses 16 of slot 2's
# tokens is then computed over a window that lost them.
# The trace: targets/llamaserver/known_findings/swa_full_find_slot_drops_window.jsonl
# (kvweld replay --server <llama-server> reproduces it). Written by hand
# from the trace; the model:
#   kvweld convert --config small --seed 25 --vocab test --arch granite_swa --window 16 model.gguf
#   <this script> <llama-server> model.gguf
# It sends the trace's three requests, then the third again with
# "cache_prompt": false (computed from the start on the same server), and
# compares the two answers' log probabilities.
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf>"; exit 2; }
server=$1 model=$2
source "$(dirname "$0")/start-server.bash"
export GGML_NO_BACKTRACE=1
start_server -c 128 -fa off \
  --cache-reuse 0 --cache-ram 0 --ctx-checkpoints 0 -np 4 --kv-unified --swa-full --context-shift ||
  { echo "llama-server ended while starting (exit $server_rc); its log ends:"; tail -3 "$log_file"; exit 2; }
post() { curl -sf --max-time 60 "$url/completion" -d "$1" || { echo "POST /completion failed; the server's log ends:"; tail -3 "$log_file"; exit 2; }; }
ask() { printf '{"prompt":%s,"n_predict":%s,"n_probs":4,"temperature":0.0,"id_slot":%s,"return_tokens":true,"cache_prompt":%s}' "$1" "$2" "$3" "${4:-true}"; }
# Slot 2: 20 tokens and 6 generated.
post "$(ask '[7,57,75,12,9,20,78,28,14,88,50,89,78,17,8,42,42,69,28,43]' 6 2)" > /dev/null
# Slot 0: 94 tokens and 44 generated: its context (128) shifts, and its new tokens take cells in the one unified cache.
post "$(ask '[76,52,57,88,72,91,55,32,18,43,82,65,39,74,69,63,67,63,19,13,9,63,19,50,53,88,56,72,73,6,48,66,86,43,66,34,93,82,1,40,13,30,15,45,24,42,4,82,28,44,84,14,42,23,8,71,72,16,67,87,32,81,71,37,40,4,16,14,93,71,67,6,20,4,81,24,84,42,41,17,23,7,80,37,6,22,20,3,87,12,86,65,14,15,83]' 44 0)" > /dev/null
# Slot 2 again: its first 16 tokens and 6 new ones.
post "$(ask '[7,57,75,12,9,20,78,28,14,88,50,89,78,17,8,42,1,55,9,41,20,90]' 1 2)" > "$dir/reused"
post "$(ask '[7,57,75,12,9,20,78,28,14,88,50,89,78,17,8,42,1,55,9,41,20,90]' 1 2 false)" > "$dir/fresh"
python3 - "$dir" <<'PY'
import json, sys
reused, fresh = (json.load(open(f"{sys.argv[1]}/{n}")) for n in ("reused", "fresh"))
print(f"third request: cache_n {reused['timings']['cache_n']} (16 of slot 2's tokens reused)")
top = lambda a: {p["id"]: p["logprob"] for p in a["completion_probabilities"][0]["top_logprobs"]}
r, f = top(reused), top(fresh)
d = max(abs(r[t] - f[t]) for t in r if t in f) if set(r) & set(f) else float("inf")
print(f"its token {reused['tokens'][0]} top logprobs {r}")
print(f"computed from the start: {fresh['tokens'][0]} {f}")
print(f"max |difference| {d:.3g}")
shown = reused["timings"]["cache_n"] > 0 and (d > 1e-4 or reused["tokens"] != fresh["tokens"])
print("FINDING SHOWN: exit 1" if shown else "not shown: exit 0")
sys.exit(1 if shown else 0)
PY
