#!/usr/bin/env bash
# llama.cpp finding 'state-io-under-queued-copy' through llama-server: one
# KV stream per slot (--no-kv-unified). A request with n_cmpl 2 and
# n_predict 1 copies its prompt's sequence into a second slot; llama.cpp
# queues a copy between streams for the next decode, and the copy's slot
# drops its cells as it ends. A slot state restored into that slot before
# any other decode is overwritten by the queued copy at the next one, so the
# restored conversation decodes over the other request's rows. Ground
# truth: the same prompt computed afresh on the same server (cache_prompt
# false). The model needs a vocabulary (a token is generated); kvweld's
# test gives its own (kvweld convert --config small --seed 1 --vocab test model.gguf).
#   state-io-under-queued-copy.sh <llama-server> <model.gguf> [extra server flags...]
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf> [server flags...]"; exit 2; }
server=$1 model=$2; shift 2
source "$(dirname "$0")/start-server.bash"
start_server -np 2 --no-kv-unified -c 256 -fa off -ctk f32 -ctv f32 --cache-ram 0 --slot-save-path "$dir/" "$@" ||
  { echo "llama-server exited at start:"; tail -5 "$log_file"; exit 2; }
post() { curl -sf --max-time 60 "$url$1" -d "$2" || { echo "POST $1 failed"; exit 2; }; }
post /completion '{"prompt": [45, 25, 6, 70, 72], "n_predict": 3, "id_slot": 1, "cache_prompt": true}' > /dev/null
post "/slots/1?action=save" '{"filename": "conversation.bin"}' > /dev/null
# Two completions of another prompt: its sequence is copied from slot 0 into slot 1.
post /completion '{"prompt": [91, 11, 54, 93, 0, 10, 33, 66, 69, 94], "n_predict": 1, "n_cmpl": 2, "id_slot": 0}' > /dev/null
post "/slots/1?action=restore" '{"filename": "conversation.bin"}' > /dev/null
ask='"prompt": [45, 25, 6, 70, 72, 87, 6, 50], "n_predict": 1, "n_probs": 4, "temperature": 0, "return_tokens": true'
got=$(post /completion "{$ask, \"id_slot\": 1, \"cache_prompt\": true}")
fresh=$(post /completion "{$ask, \"id_slot\": 0, \"cache_prompt\": false}")
python3 - "$got" "$fresh" <<'PY'
import json, sys
got, fresh = (json.loads(a) for a in sys.argv[1:])
top = lambda r: {p["id"]: p["logprob"] for p in r["completion_probabilities"][0]["top_logprobs"]}
g, f = top(got), top(fresh)
print(f"restored slot 1: reused {got['timings']['cache_n']} tokens, next token {got['tokens'][0]}; computed afresh: {fresh['tokens'][0]}")
for i in f:
    restored = f"{g[i]:.6f}" if i in g else "not in the top 4"
    print(f"  token {i}: logprob {restored} restored, {f[i]:.6f} afresh")
diff = max(abs(g[i] - f[i]) if i in g else float("inf") for i in f)
print(f"max |restored - afresh| = {diff:.3g} (tolerance 1e-3)")
print("FINDING SHOWN: exit 1" if diff > 1e-3 else "not shown: exit 0")
sys.exit(1 if diff > 1e-3 else 0)
PY
