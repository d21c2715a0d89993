#!/usr/bin/env bash
# llama-server's log probabilities against kvweld's reference forward: the
# first oracle of a server run, by hand. kvweld convert --vocab test writes
# a model the server generates with (F32 weights; the server runs F32 KV
# and flash attention off, as kvweld's GGUF test does); a greedy completion
# of a prompt given as token ids, with n_probs, must return at each
# generated position the token and the top log probabilities that kvweld
# forward computes over the prompt and the tokens the server generated.
# REF_SEED is the reference's weight seed: 1 is the served model's (the
# check must pass), another seed is other weights (it must fail: the
# oracle's other half). A cache without llama-server skips (77) unless
# REQUIRED is ON.
#   server_logprobs.sh KVWELD LLAMA_SERVER REF_SEED WANT REQUIRED
set -uo pipefail
kvweld=$1 server=$2 ref_seed=$3 want=$4 required=${5:-OFF}
if [[ ! -x $server ]]; then
  echo "no $server: scripts/setup-llama builds llama-server into the pinned build"
  [[ $required == ON ]] && exit 1
  exit 77
fi
source "$(dirname "$0")/../../docs/findings/server/start-server.bash"
model=$dir/model.gguf
"$kvweld" convert --config small --seed 1 --vocab test "$model" > /dev/null || { echo "kvweld convert failed"; exit 1; }
start_server -np 1 -c 128 -fa off -ctk f32 -ctv f32 || { echo "llama-server exited ($server_rc) at start:"; tail -5 "$log_file"; exit 1; }
prompt=5,6,7,8,9,10,11,12
out=$(curl -sf --max-time 60 "$url/completion" -d "{\"prompt\": [$prompt], \"n_predict\": 8, \"n_probs\": 4,
  \"temperature\": 0, \"return_tokens\": true, \"cache_prompt\": false}") || { echo "the completion request failed"; exit 1; }
generated=$(python3 -c 'import json, sys; print(",".join(map(str, json.loads(sys.argv[1])["tokens"])))' "$out") || exit 1
ref=$("$kvweld" forward --config small --seed "$ref_seed" --tokens "$prompt,$generated" --top 4) || { echo "kvweld forward failed"; exit 1; }
python3 - "$out" "$ref" "$prompt" "$want" <<'PY'
import json, sys
out, ref, prompt, want = json.loads(sys.argv[1]), [json.loads(l) for l in sys.argv[2].splitlines()], sys.argv[3].split(","), int(sys.argv[4])
tolerance, worst, wrong = 1e-4, 0.0, []
for i, step in enumerate(out["completion_probabilities"]):
    expected = ref[len(prompt) - 1 + i]["top"]  # the reference's next-token distribution after position len(prompt)-1+i
    got = [(p["id"], p["logprob"]) for p in step["top_logprobs"]]
    if step["id"] != expected[0][0]:
        wrong.append(f"generated token {i}: the server took {step['id']}, the reference's most likely is {expected[0][0]}")
    for (gid, glp), (eid, elp) in zip(got, expected):
        worst = max(worst, abs(glp - elp))
        if gid != eid:
            wrong.append(f"generated token {i}: the server's top tokens {[g[0] for g in got]}, the reference's {[e[0] for e in expected]}")
            break
print(f"server_logprobs: prompt [{','.join(prompt)}], the server generated {out['tokens']}; "
      f"max |logprob - reference| = {worst:.3g} (tolerance {tolerance:g}), {len(wrong)} token mismatches")
for w in wrong[:3]:
    print("  " + w)
ok = worst <= tolerance and not wrong
print("server_logprobs: " + ("matches the reference" if ok else "differs from the reference") +
      (", as it must" if ok == (want == 0) else f", but it must {'match' if want == 0 else 'differ'}"))
sys.exit(0 if ok == (want == 0) else 1)
PY
