#!/usr/bin/env bash
# llama-server (-ctk bf16 -ctv bf16 -np 2 --no-kv-unified --cache-reuse 0 --cache-ram 0 --no-cache-idle-slots --context-shift), server at op 0: POST http://127.0.0.1:36003/completion: not an HTTP answer (0 bytes: ''); llama-server has ended; its log's last lines (/tmp/kvweld-repro-31324/llama-server.log
# Written by `kvweld repro --server <llama-server> bf16_kshift_abort.jsonl` from a server trace (seed 95, 1 requests). It starts llama-server on 127.0.0.1 at an ephemeral port, sends
# the requests with curl, and compares the last one's answer with kvweld's reference,
# written below for the model of:
#   kvweld convert --config small --seed 95 --vocab test model.gguf
#   <this script> <llama-server> model.gguf
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf>"; exit 2; }
server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
FAILED=2
GGML_NO_BACKTRACE=1 "$server" -m "$model" --host 127.0.0.1 --port 0 -c 256 -t 1 --no-warmup -fa off --slots -ctk bf16 -ctv bf16 -np 2 --no-kv-unified --cache-reuse 0 --cache-ram 0 --no-cache-idle-slots --context-shift --slot-save-path "$dir/" > "$dir/log" 2>&1 & pid=$!
for _ in $(seq 600); do
  url=$(sed -n 's|.*listening on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$dir/log" | head -1)
  [[ -n $url ]] && curl -sf "$url/health" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || { wait "$pid"; rc=$? pid=; echo "llama-server ended while starting (exit $rc); its log ends:"; tail -3 "$dir/log"; exit 2; }
  url= && sleep 0.1
done
[[ -n $url ]] || { echo "llama-server did not answer /health in 60 s"; exit 2; }
post() { curl -sf --max-time 60 "$url$1" -d "$2" || { { echo "POST $1 failed; the server's log ends:"; tail -3 "$dir/log"; ((FAILED != 1)) || echo "FINDING SHOWN: exit 1"; } >&2; exit $FAILED; }; }
idle() { until curl -sf "$url/slots" | python3 -c 'import json, sys; sys.exit(any(s["is_processing"] for s in json.load(sys.stdin)))'; do sleep 0.05; done; }
# op 0, the failing one: complete
FAILED=1
post /completion '{"cache_prompt":true,"id_slot":0,"n_predict":44,"n_probs":4,"prompt":[18,42,55,68,85,34,24,24,35,91,23,34,72,40,5,41,69,8,90,11,50,48,92,25,14,86,82,26,9,34,69,60,88,80,16,50,93,49,62,7,9,92,27,60,55,44,44,75,26,16,71,59,94,91,52,14,9,92,44,33,59,12,34,8,69,12,80,46,95,91,44,51,48,2,95,28,62,94,35,45,42,4,39,51,60,17,65,78,37,72,25,47],"return_tokens":true,"stream":false,"temperature":0.0}' > /dev/null
echo "llama-server answered every request: not shown: exit 0"
