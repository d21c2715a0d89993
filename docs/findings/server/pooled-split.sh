#!/usr/bin/env bash
# llama.cpp finding 'pooled-split' through llama-server: mean-pooled
# embeddings with one KV stream per slot (no --kv-unified). Two inputs of
# unequal length in one request share a decode call, which splits the
# longer one over ubatches; its embedding is compared with the same input
# sent alone. Any embedding model shows it; kvweld's test gives its own
# (kvweld convert --config small --seed 1 model.gguf).
#   pooled-split.sh <llama-server> <model.gguf> [extra server flags...]
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf> [server flags...]"; exit 2; }
server=$1 model=$2; shift 2
source "$(dirname "$0")/start-server.bash"
start_server --embedding --pooling mean -np 2 -c 256 "$@" || { echo "llama-server exited at start:"; tail -5 "$log_file"; exit 2; }
embed() { curl -sf --max-time 60 "$url/embedding" -d "{\"content\": $1}"; }
alone=$(embed '[[1, 2, 3, 4]]') && pair=$(embed '[[1, 2, 3, 4], [5, 6]]') || { echo "a request failed"; exit 2; }
python3 - "$alone" "$pair" <<'PY'
import json, sys
alone, pair = (json.loads(a) for a in sys.argv[1:])
def vec(results, i):  # the pooled embedding of input i
    e = results[i]["embedding"]
    return e[0] if isinstance(e[0], list) else e
a, b = vec(alone, 0), vec(pair, 0)
diff = max(abs(x - y) for x, y in zip(a, b))
print(f"input [1, 2, 3, 4]: max |embedding with [5, 6] beside it - embedding alone| = {diff:.3g} (tolerance 1e-3)")
print("FINDING SHOWN: exit 1" if diff > 1e-3 else "not shown: exit 0")
sys.exit(1 if diff > 1e-3 else 0)
PY
