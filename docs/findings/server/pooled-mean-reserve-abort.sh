#!/usr/bin/env bash
# llama.cpp finding 'pooled-mean-reserve-abort' through llama-server: mean
# pooling with three slots (-np 3) and a context of 256: the graph reserve
# rounds its token count (256) up to a multiple of 3, and llama-server
# aborts while it starts. kvweld's test gives its own model (kvweld convert
# --config small --seed 1 model.gguf).
#   pooled-mean-reserve-abort.sh <llama-server> <model.gguf> [extra server flags...]
# Exit 1: the finding shows (the server aborted); 0: it serves an embedding; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf> [server flags...]"; exit 2; }
server=$1 model=$2; shift 2
source "$(dirname "$0")/start-server.bash"
if ! start_server --embedding --pooling mean -np 3 -c 256 "$@"; then
  grep -m1 "GGML_ASSERT" "$log_file" || { echo "llama-server exited ($server_rc) at start, with no assert:"; tail -5 "$log_file"; exit 2; }
  echo "llama-server aborted at start (exit $server_rc)"; echo "FINDING SHOWN: exit 1"; exit 1
fi
out=$(curl -sf --max-time 60 "$url/embedding" -d '{"content": [[1, 2, 3, 4]]}') || { echo "the request failed"; exit 2; }
echo "llama-server started with -np 3 and served an embedding of $(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])[0]["embedding"][0]))' "$out") values"
echo "not shown: exit 0"
