#!/usr/bin/env bash
# llama-server (-ctk f32 -ctv f32 -np 1 --kv-unified --cache-reuse 0 --cache-ram 0 --no-cache-idle-slots, 2 LoRA adapters), logprobs at op 5: generated token 0: token 71 logprob -1.72992, reference -1.76354 (|difference| 0.0336178 > 0.0001)
# Written by `kvweld repro --server <llama-server> slot_restore_ignores_lora.jsonl` from a server trace (seed 32, 6 requests). It starts llama-server on 127.0.0.1 at an ephemeral port, sends
# the requests with curl, and compares the last one's answer with kvweld's reference,
# written below for the model of:
#   kvweld convert --config small --seed 32 --vocab test model.gguf
#   kvweld convert --config small --seed 32 --lora 0 lora-0.gguf
#   kvweld convert --config small --seed 32 --lora 1 lora-1.gguf
#   <this script> <llama-server> model.gguf lora-0.gguf lora-1.gguf
# Exit 1: the finding shows; 0: it does not; 2: it could not run.
set -u
(($# >= 4)) || { echo "usage: $0 <llama-server> <model.gguf> lora-0.gguf lora-1.gguf"; exit 2; }
server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
FAILED=2
GGML_NO_BACKTRACE=1 "$server" -m "$model" --host 127.0.0.1 --port 0 -c 128 -t 1 --no-warmup -fa off --slots -ctk f32 -ctv f32 -np 1 --kv-unified --cache-reuse 0 --cache-ram 0 --no-cache-idle-slots --lora "$3" --lora "$4" --slot-save-path "$dir/" > "$dir/log" 2>&1 & pid=$!
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
post /completion '{"cache_prompt":true,"id_slot":-1,"n_predict":1,"n_probs":4,"prompt":[88,67,63,15,57,23,64,72,11,82,56,93,30,60,54,33,82,54,38,16,2,22,21,10,85,58],"return_tokens":true,"stream":false,"temperature":0.0}' > /dev/null
# op 1: slot
post "/slots/0?action=save" '{"filename": "slot-0.bin"}' > /dev/null
# op 2: lora
post /lora-adapters '[{"id":0,"scale":0.0},{"id":1,"scale":1.0}]' > /dev/null
# op 3: complete
post /completion '{"cache_prompt":true,"id_slot":0,"n_predict":1,"n_probs":4,"prompt":[7,45,66,79,13,15,44,39,70,42,72,67,72,9,6,32,42,40,86,13,53],"return_tokens":true,"stream":false,"temperature":0.0}' > /dev/null
# op 4: slot
post "/slots/0?action=restore" '{"filename": "slot-0.bin"}' > /dev/null
# op 5, the failing one: complete
FAILED=1
post /completion '{"cache_prompt":true,"id_slot":0,"lora":[{"id":0,"scale":0.0},{"id":1,"scale":1.0}],"n_predict":1,"n_probs":4,"prompt":[88,67,63,64,72,11,82,56,93,30,60,54,33,82,54,38,16,2,22,21,10,85,58,33,52,86],"return_tokens":true,"stream":false,"temperature":0.0}' > "$dir/answer-0"
python3 - "$dir" <<'PY'
import json, sys
expect = json.loads('[{"answers":[[{"token":71,"top":{"18":-2.30090458438867,"19":-2.426172328453001,"58":-2.252217603187498,"71":-1.7635396246718733}}]],"cache_n":[0,0],"file":"$dir/answer-0","kind":"completion"}]')
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
