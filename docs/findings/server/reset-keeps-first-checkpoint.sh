#!/usr/bin/env bash
# llama-server with context checkpoints on a recurrent model (mamba; lfm2,
# lfm2 with a sliding window and granite_swa show it too): a checkpoint made
# at the first token of one prompt outlives a prompt that shares nothing
# with it, and a later prompt that shares its first token with the second
# one is served from it: cache_n 1 over another prompt's token.
# The trace: targets/llamaserver/known_findings/reset_keeps_first_checkpoint.jsonl
# (kvweld replay --server <llama-server> reproduces it). Written by hand
# from the trace; the model:
#   kvweld convert --config small --seed 1 --vocab test --arch mamba model.gguf
#   <this script> <llama-server> model.gguf
# It sends the trace's three requests, then the third again with
# "cache_prompt": false (computed from the start on the same server), and
# compares the two answers' log probabilities.
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf>"; exit 2; }
server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
GGML_NO_BACKTRACE=1 "$server" -m "$model" --host 127.0.0.1 --port 0 -c 128 -t 1 --no-warmup -fa off -np 1 \
  --cache-reuse 0 --cache-ram 0 --ctx-checkpoints 3 > "$dir/log" 2>&1 & pid=$!
for _ in $(seq 600); do
  url=$(sed -n 's|.*listening on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$dir/log" | head -1)
  [[ -n $url ]] && curl -sf "$url/health" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || { wait "$pid"; rc=$? pid=; echo "llama-server ended while starting (exit $rc); its log ends:"; tail -3 "$dir/log"; exit 2; }
  url= && sleep 0.1
done
[[ -n $url ]] || { echo "llama-server did not answer /health in 60 s"; exit 2; }
post() { curl -sf --max-time 60 "$url/completion" -d "$1" || { echo "POST /completion failed; the server's log ends:"; tail -3 "$dir/log"; exit 2; }; }
ask() { printf '{"prompt":%s,"n_predict":1,"n_probs":4,"temperature":0.0,"id_slot":0,"return_tokens":true,"cache_prompt":%s}' "$1" "${2:-true}"; }
# A 5-token prompt: a checkpoint at n_tokens 1 (its last 4 tokens are a batch of their own).
post "$(ask '[57,80,32,90,29]')" > /dev/null
# A prompt that shares nothing: processed from the start; the checkpoint (pos_max 0) is kept.
post "$(ask '[85,92,1,13,89,56,91,68,80]')" > /dev/null
# One that shares 3 tokens with it: the newest checkpoint ends past them, the kept one starts at 0.
post "$(ask '[85,92,1,40,41,42,43,44,45,46,47]')" > "$dir/reused"
post "$(ask '[85,92,1,40,41,42,43,44,45,46,47]' false)" > "$dir/fresh"
python3 - "$dir" <<'PY'
import json, sys
reused, fresh = (json.load(open(f"{sys.argv[1]}/{n}")) for n in ("reused", "fresh"))
print(f"third request: cache_n {reused['timings']['cache_n']} (its prompt shares 3 tokens with the slot's, and no checkpoint of them exists)")
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
