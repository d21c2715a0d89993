#!/usr/bin/env bash
# llama-server with --swa-full and the RAM prompt cache on a sliding-window
# model (granite_swa, window 16), 2 slots, --cache-idle-slots: --swa-full
# makes the server take the window as kept whole (n_swa 0), so after it
# loads a prompt from the RAM cache it checks no window before reusing a
# prefix of it. But the state it saved holds only the window's cells:
# llama_kv_cache::state_write leaves out the cells the window masks, whatever
# the cache's size. Slot 0 loads slot 1's 26-token prompt, keeps the 16 it
# shares, and computes the rest over a window that lost positions 0 to 9.
# The trace: targets/llamaserver/known_findings/swa_full_state_drops_window.jsonl
# (kvweld replay --server <llama-server> reproduces it). Written by hand
# from the trace; the model:
#   kvweld convert --config small --seed 150 --vocab test --arch granite_swa --window 16 model.gguf
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
start_server -c 256 -fa off \
  --cache-reuse 0 --cache-ram -1 --cache-idle-slots --ctx-checkpoints 0 -np 2 --no-kv-unified --swa-full ||
  { echo "llama-server ended while starting (exit $server_rc); its log ends:"; tail -3 "$log_file"; exit 2; }
post() { curl -sf --max-time 60 "$url/completion" -d "$1" || { echo "POST /completion failed; the server's log ends:"; tail -3 "$log_file"; exit 2; }; }
ask() { printf '{"prompt":%s,"n_predict":%s,"n_probs":4,"temperature":0.0,"id_slot":%s,"return_tokens":true,"cache_prompt":%s}' "$1" "$2" "$3" "${4:-true}"; }
# Slot 1: 21 tokens and 6 generated.
post "$(ask '[93,75,70,25,70,54,50,21,63,86,24,61,57,61,17,38,82,38,63,27,89]' 6 1)" > /dev/null
# Slot 0: another prompt; slot 1, idle, is saved to the RAM cache.
post "$(ask '[7,89,33,45,52,14,38,56,59,84,86,3,35,18]' 1 0)" > /dev/null
# Slot 0 again: slot 1's first 16 tokens and 6 new ones, loaded from the RAM cache.
post "$(ask '[93,75,70,25,70,54,50,21,63,86,24,61,57,61,17,38,62,13,68,10,76,0]' 4 0)" > "$dir/reused"
post "$(ask '[93,75,70,25,70,54,50,21,63,86,24,61,57,61,17,38,62,13,68,10,76,0]' 4 0 false)" > "$dir/fresh"
python3 - "$dir" <<'PY'
import json, sys
reused, fresh = (json.load(open(f"{sys.argv[1]}/{n}")) for n in ("reused", "fresh"))
print(f"third request: cache_n {reused['timings']['cache_n']} (16 of slot 1's tokens, loaded from the RAM cache)")
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
