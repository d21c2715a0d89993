#!/usr/bin/env bash
# llama-server (-ctk f32 -ctv f32 -np 2 --kv-unified --cache-reuse 0 --cache-ram 8192 --cache-idle-slots), reuse at op 2: cache_n 0 but slot 0 holds 11 of the prompt (lost reuse)
# Written by `kvweld repro --server <llama-server> pinned_empty_slot_skips_cache.jsonl` from a server trace (seed 8, 3 requests). It starts llama-server on 127.0.0.1 at an ephemeral port, sends
# the requests with curl, and compares the last one's answer with kvweld's reference,
# written below for the model of:
#   kvweld convert --config small --seed 8 --vocab test model.gguf
#   <this script> <llama-server> model.gguf
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 2)) || { echo "usage: $0 <llama-server> <model.gguf>"; exit 2; }
server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
FAILED=2
GGML_NO_BACKTRACE=1 "$server" -m "$model" --host 127.0.0.1 --port 0 -c 256 -t 1 --no-warmup -fa off --slots -ctk f32 -ctv f32 -np 2 --kv-unified --cache-reuse 0 --cache-ram 8192 --cache-idle-slots --slot-save-path "$dir/" > "$dir/log" 2>&1 & pid=$!
for _ in $(seq 600); do
  url=$(sed -n 's|.*listening on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$dir/log" | head -1)
  [[ -n $url ]] && curl -sf "$url/health" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || { wait "$pid"; rc=$? pid=; echo "llama-server ended while starting (exit $rc); its log ends:"; tail -3 "$dir/log"; exit 2; }
  url= && sleep 0.1
done
[[ -n $url ]] || { echo "llama-server did not answer /health in 60 s"; exit 2; }
post() { curl -sf --max-time 60 "$url$1" -d "$2" || { { echo "POST $1 failed; the server's log ends:"; tail -3 "$dir/log"; ((FAILED != 1)) || echo "FINDING SHOWN: exit 1"; } >&2; exit $FAILED; }; }
idle() { until curl -sf "$url/slots" | python3 -c 'import json, sys; sys.exit(any(s["is_processing"] for s in json.load(sys.stdin)))'; do sleep 0.05; done; }
# op 0: complete
post /completion '{"cache_prompt":true,"id_slot":0,"n_predict":1,"n_probs":4,"prompt":[46,42,74,32,95,47,14,43,63,19,87],"return_tokens":true,"stream":false,"temperature":0.0}' > /dev/null
# op 1: complete
post /completion '{"cache_prompt":true,"id_slot":1,"n_predict":1,"n_probs":4,"prompt":[0,60,74,59,47,87,69,93,69,30,69,24,18,53,17,55,32,60,88,2],"return_tokens":true,"stream":false,"temperature":0.0}' > /dev/null
# op 2, the failing one: complete
FAILED=1
post /completion '{"cache_prompt":true,"id_slot":0,"n_predict":1,"n_probs":4,"prompt":[46,42,74,32,95,47,14,43,63,19,87,90,60,72,93,8,87],"return_tokens":true,"stream":false,"temperature":0.0}' > "$dir/answer-0"
python3 - "$dir" <<'PY'
import json, sys
expect = json.loads('[{"answers":[[{"token":90,"top":{"49":-2.6458692355938167,"64":-2.5805606647320003,"68":-2.6213979526348323,"90":-2.194742421705267}}]],"cache_n":[11,11],"file":"$dir/answer-0","kind":"completion"}]')
shown = False
for e in expect:
    got = json.load(open(e["file"].replace("$dir", sys.argv[1])))
    if e["kind"] == "embedding":
        for i, want in enumerate(e["want"]):
            row = got[i]["embedding"][0]
            d = max(abs(x - y) for x, y in zip(row, want))
            print(f"input {i}: max |embedding - kvweld's reference| = {d:.3g} (tolerance 1e-4)")
            shown |= d > 1e-4
        continue
    for n, (answer, want) in enumerate(zip(got if isinstance(got, list) else [got], e["answers"])):
        lo, hi = e["cache_n"]
        if n == 0 and not lo <= answer["timings"]["cache_n"] <= hi:
            print(f"completion {n}: cache_n {answer['timings']['cache_n']}, but kvweld's cache model allows {lo} to {hi} (what the slot held, or the prompt cache gave it)")
            shown = True
        for i, (step, w) in enumerate(zip(answer["completion_probabilities"], want)):
            top = {p["id"]: p["logprob"] for p in step["top_logprobs"]}
            d = max((abs(top[int(t)] - lp) if int(t) in top else float("inf")) for t, lp in w["top"].items())
            own = w["top"].get(str(answer["tokens"][i]))  # the token's own logprob, where it is in the reference's top 4
            if own is not None:
                d = max(d, abs(step["logprob"] - own))
            print(f"completion {n}, token {i}: {answer['tokens'][i]} (the reference's most likely: {max(w['top'], key=w['top'].get)}); "
                  f"its logprob {step['logprob']:.6g}" + ("" if own is None else f" (the reference's {own:.6g})") + f", "
                  f"{len(top)} top logprobs; max |logprob - reference| over the reference's top 4 = {d:.3g} (tolerance 1e-4)")
            shown |= d > 1e-4
            if answer["tokens"][i] != w["token"]:
                break  # the reference's next values are for the tokens the trace recorded
print("FINDING SHOWN: exit 1" if shown else "not shown: exit 0")
sys.exit(1 if shown else 0)
PY
