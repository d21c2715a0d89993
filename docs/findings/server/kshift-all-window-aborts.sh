#!/usr/bin/env bash
# llama-server on an lfm2 model with a sliding window (every attention
# layer slides), --cache-reuse 4: an agent's edit (one token cut from the
# middle of its last prompt) makes the server shift the chunk after the cut
# (a K-shift), and the next decode aborts the process in
# llama_kv_cache::set_input_k_shift (GGML_ASSERT(buffer)): the library's
# finding kshift-all-window-aborts, met through the server.
# The trace: targets/llamaserver/known_findings/kshift_all_window_aborts.jsonl
# (kvweld replay --server <llama-server> reproduces it). Written by hand
# from the trace; the model:
#   kvweld convert --config small --seed 24 --vocab test --arch lfm2_swa --window 8 model.gguf
#   <this script> <llama-server> model.gguf
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf>"; exit 2; }
server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
GGML_NO_BACKTRACE=1 "$server" -m "$model" --host 127.0.0.1 --port 0 -c 128 -t 1 --no-warmup -fa off -np 1 \
  -ctk f16 -ctv f16 --cache-reuse 4 --cache-ram 0 --ctx-checkpoints 0 --swa-full > "$dir/log" 2>&1 & pid=$!
for _ in $(seq 600); do
  url=$(sed -n 's|.*listening on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$dir/log" | head -1)
  [[ -n $url ]] && curl -sf "$url/health" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || { wait "$pid"; rc=$? pid=; echo "llama-server ended while starting (exit $rc); its log ends:"; tail -3 "$dir/log"; exit 2; }
  url= && sleep 0.1
done
[[ -n $url ]] || { echo "llama-server did not answer /health in 60 s"; exit 2; }
ask() { printf '{"prompt":%s,"n_predict":1,"temperature":0.0,"id_slot":0,"cache_prompt":true}' "$1"; }
curl -sf --max-time 60 "$url/completion" -d "$(ask '[76,77,49,82,70,24,52,29,77,87,9,71,64,90,94,34,93,61,25,1,13]')" > /dev/null ||
  { echo "the first request failed; the server's log ends:"; tail -3 "$dir/log"; exit 2; }
# The same prompt with token 90 cut: the 7 tokens after it are a chunk the server shifts back by one.
if curl -sf --max-time 60 "$url/completion" -d "$(ask '[76,77,49,82,70,24,52,29,77,87,9,71,64,94,34,93,61,25,1,13,13]')" > /dev/null; then
  echo "the edited prompt was answered: not shown: exit 0"
  exit 0
fi
sleep 0.5
if kill -0 "$pid" 2> /dev/null; then
  echo "the edited prompt failed but llama-server still runs; its log ends:"; tail -3 "$dir/log"; exit 2
fi
wait "$pid"; rc=$? pid=
echo "llama-server ended (exit $rc) on the edited prompt; its log:"
grep -E "reusing chunk|GGML_ASSERT" "$dir/log" | tail -3
grep -q "GGML_ASSERT(buffer) failed" "$dir/log" && { echo "FINDING SHOWN: exit 1"; exit 1; }
echo "it ended otherwise: exit 2"; exit 2
