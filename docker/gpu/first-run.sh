#!/usr/bin/env bash
# The GPU path's first run on one offline GPU host, from the kit of `make gpu-kit`
# (docs/operations.md, "Training on an offline GPU host"). Run from the repository root:
#
#   bash docker/gpu/first-run.sh receive    # once per call that carried pieces of the kit
#   bash docker/gpu/first-run.sh run        # the last call: install, start, train, report
#   bash docker/gpu/first-run.sh prepare    # install, convert and warm-start the kit's model,
#       then stop: a call of its own when `run`'s steps need the whole next call (`run`
#       then finds the converted and warm-started folders and goes on in seconds)
#   CONFIG=fast MODEL=/models/Qwen2.5-0.5B-Instruct bash docker/gpu/first-run.sh run
#   CONFIG=smollm2 bash docker/gpu/first-run.sh run   # a kit of `make gpu-kit MODEL=smollm2-135m`
#   CONFIG=smollm2 LORA_RANK=16 bash docker/gpu/first-run.sh run   # the LoRA case: an adapter
#       trained and synced alone (the report's sync times and memory peak against the run above)
#   bash docker/gpu/first-run.sh run --override KEY=VALUE ...   # more of `wsrl train`'s flags
#
# `receive` copies build/gpu-kit/* (whatever this call carried) into /tmp/wsrl-pieces.
# `run` receives too, installs the kit into /tmp/wsrl-site (PYTHONPATH, nothing else on the
# host touched), starts the embedded Postgres and Redis, the env server, the API and two
# Celery workers, then `wsrl train --backend verl --config $CONFIG` (default smoke, the
# shipped tiny policy; MODEL: a model folder on the host in its place) for STEPS steps (vLLM on
# the GPU as verl starts it, colocated: sleep/wake and weight sync each step) with a
# held-out evaluation after each version, then (VLLM_ALONE=0 skips it) vLLM's own offline
# benchmark on the same model and GPU, and writes $OUT/report.md with the logs' tails.
# A kit built with MODEL=NAME carries that model's GGUF: `run` converts it into
# $DATA/models/NAME first (`wsrl model get NAME --from FILE`), then (WARM_START=0 skips it)
# warm-starts it on the GPU on the tiny policy's demonstrations (`wsrl policy bootstrap
# --model NAME`: zero-shot it scores 0, and RL learns nothing from flat groups) and trains
# that folder, played with its demonstrations' protocol. EVAL_EVERY and EVAL_GOALS set the
# held-out rounds (default: 8 goals after every version; EVAL_EVERY=$STEPS EVAL_GOALS=100:
# version 0 and the last on 100 goals). ATTRIBUTE=1 (the default; not with LORA_RANK) saves
# each step's weights in Hugging Face form and, after the run, scores the calls recorded
# under each version with its weights and the next's: which generated the calls that
# crossed a pause (report.py attribute).
# Everything lives under /tmp and in processes started with setsid: later commands of the
# same machine see them.
set -uo pipefail
cd "$(dirname "$0")/../.."

PIECES=/tmp/wsrl-pieces
SITE=/tmp/wsrl-site
DATA=/tmp/wsrl-data
LOGS=$DATA/logs
OUT=${OUT:-/tmp/wsrl-out}
STEPS=${STEPS:-3}
TRAIN_TIMEOUT_S=${TRAIN_TIMEOUT_S:-400}
PY=${PYTHON:-python3}
CONFIG=${CONFIG:-smoke}
MODEL=${MODEL:-}
LORA_RANK=${LORA_RANK:-0}
WARM_START=${WARM_START:-1}
EVAL_EVERY=${EVAL_EVERY:-1}
EVAL_GOALS=${EVAL_GOALS:-8}
ATTRIBUTE=${ATTRIBUTE:-1}
[ "$LORA_RANK" -gt 0 ] && ATTRIBUTE=0  # versions are adapters there, not whole weights

receive() {
  if [ ! -d "$PIECES" ] && [ -n "${OUT:-}" ]; then
    # The first call: what the host is, while the pieces travel.
    mkdir -p "$OUT"
    { nvidia-smi; $PY --version; nproc; free -g; df -h /tmp /dev/shm; } > "$OUT/host.txt" 2>&1
    $PY -m pip list --format=freeze > "$OUT/host-packages.txt" 2>/dev/null
  fi
  mkdir -p "$PIECES"
  local n=0
  for f in build/gpu-kit/manifest.json build/gpu-kit/wsrl-gpu-kit.tar.*; do
    [ -f "$f" ] && cp "$f" "$PIECES/" && n=$((n + 1))
  done
  echo "received $n file(s); $PIECES holds: $(ls "$PIECES" | tr '\n' ' ')"
}

stamp() { echo "[$(date +%T)] $*" | tee -a "$OUT/report.md"; }

tail_logs() {
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    { echo; echo "### $(basename "$f") (last 40 lines)"; echo '```'; tail -n 40 "$f"; echo '```'; } \
      >> "$OUT/report.md"
  done
  # Ray's actors (vLLM's server, verl's workers) log to their own files.
  for f in /tmp/ray/session_latest/logs/*.err /tmp/ray/session_latest/logs/*.out; do
    [ -s "$f" ] || continue
    { echo "=== $f"; tail -n 150 "$f"; } >> "$OUT/ray-logs.txt"
  done
}

run() {
  if [ -n "$MODEL" ] && [ ! -f "$MODEL/config.json" ]; then
    echo "MODEL=$MODEL: no config.json there; name a Hugging Face model folder on this host" >&2
    exit 2
  fi
  mkdir -p "$OUT" "$LOGS"
  : > "$OUT/report.md"
  local t0=$SECONDS
  receive
  stamp "host: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
  stamp "python: $($PY --version), torch $($PY -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1)"

  $PY docker/gpu/kit.py install --out "$PIECES" --target "$SITE" --unpack /tmp/wsrl-kit \
    > "$LOGS/install.log" 2>&1 || { stamp "FAILED: install"; tail_logs; exit 1; }
  stamp "installed in $((SECONDS - t0)) s"
  # HOST_SITE: more of the host's packages on the path (a CPU rehearsal's stand-in for them)
  # The checkout's code first: a fix made after the kit was built travels with the next call.
  export PYTHONPATH=$PWD:$SITE${HOST_SITE:+:$HOST_SITE} PATH=$SITE/bin:$PATH WSRL_DATA_DIR=$DATA
  # No network here: a model id not in the Hugging Face cache fails the preflight at once
  # (name the carried folder with MODEL) rather than vLLM's download minutes later.
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  # JAX is on such hosts; once initialised it takes 75 % of the GPU for itself (seen: 60 GB
  # in use before verl's actor was built). Nothing here needs it on the GPU.
  export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false
  # No agent settings: the trainer publishes the smoke config's protocol with each version
  # and the workers play it (decision 0027).
  # vLLM picks FLASH_ATTN (its bundled kernels) first on Hopper; FlashInfer is not in the kit.
  export VLLM_USE_FLASHINFER_SAMPLER=0
  # pip check over host + kit, less what the kit leaves out on purpose (kit-omit.txt)
  $PY -m pip check > "$LOGS/pip-check.log" 2>&1
  grep -v -i -E "requires ($(grep -v '^#' docker/gpu/kit-omit.txt | cut -d' ' -f1 | paste -sd'|')),"  \
    "$LOGS/pip-check.log" > "$LOGS/pip-check-unexpected.log"
  stamp "pip check: $(wc -l < "$LOGS/pip-check-unexpected.log") unexpected line(s) (pip-check-unexpected.log)"
  $PY -m pip list --format=freeze > "$OUT/host-packages.txt" 2>/dev/null

  mkdir -p "$DATA/policy" && cp -r /tmp/wsrl-kit/policy/tiny-0 "$DATA/policy/"
  # The kit's model (make gpu-kit MODEL=NAME), converted here: its GGUF is smaller to carry
  # than the converted folder. A second run finds the folder and does nothing.
  local kit_model
  kit_model=$($PY -c 'import json, sys; m = json.load(open(sys.argv[1])).get("model")
print("%s %s" % (m["name"], m["file"]) if m else "")' /tmp/wsrl-kit/manifest.json)
  if [ -n "$kit_model" ]; then
    local name=${kit_model%% *} file=/tmp/wsrl-kit/${kit_model#* } t_model=$SECONDS
    wsrl model get "$name" --from "$file" > "$LOGS/model.log" 2>&1 \
      || { stamp "FAILED: converting the kit's $name"; tail_logs; exit 1; }
    stamp "model $name in $((SECONDS - t_model)) s: $(grep -m1 -E '^(already )?converted' "$LOGS/model.log")"
    if [ "$WARM_START" = 1 ] && [ -z "$MODEL" ]; then
      local t_warm=$SECONDS
      wsrl policy bootstrap --model "$name" --out "$DATA/policy/$name-warm" \
        > "$LOGS/warm-start.log" 2>&1 \
        || { stamp "FAILED: warm-starting $name"; tail_logs; exit 1; }
      stamp "warm start in $((SECONDS - t_warm)) s: $(grep -m1 'warm-started' "$LOGS/warm-start.log")"
      MODEL=$DATA/policy/$name-warm
    fi
  fi
  if [ "${PREPARE_ONLY:-0}" = 1 ]; then
    stamp "prepared in $((SECONDS - t0)) s${MODEL:+: $MODEL}; \`run\` next"
    return 0
  fi
  wsrl services start > "$LOGS/services.log" 2>&1 && wsrl db upgrade >> "$LOGS/services.log" 2>&1 \
    || { stamp "FAILED: embedded Postgres/Redis"; tail_logs; exit 1; }
  setsid wsrl env serve > "$LOGS/env.log" 2>&1 < /dev/null &
  setsid wsrl api serve > "$LOGS/api.log" 2>&1 < /dev/null &
  for i in 1 2; do
    setsid wsrl worker -c 8 -Q rollouts,eval --name "gpu$i" > "$LOGS/worker$i.log" 2>&1 < /dev/null &
  done
  setsid nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits \
    -lms 500 > "$LOGS/gpu.csv" 2>&1 < /dev/null &
  setsid $PY docker/gpu/report.py watch-endpoint > "$LOGS/endpoint.log" 2>&1 < /dev/null &
  $PY - <<'WAIT' || { stamp "FAILED: env server / API not up in 180 s"; tail_logs; exit 1; }
import time, urllib.request
for _ in range(180):
    try:
        for url in ("http://127.0.0.1:3000/health", "http://127.0.0.1:8000/health"):
            urllib.request.urlopen(url, timeout=2)
        break
    except OSError:
        time.sleep(1)
else:
    raise SystemExit(1)
WAIT
  stamp "services up in $((SECONDS - t0)) s"

  stamp "config $CONFIG, model ${MODEL:-as the config names}, LoRA rank $LORA_RANK, $STEPS steps${*:+, $*}"
  local model=()
  [ -n "$MODEL" ] && model=(--override "actor_rollout_ref.model.path=$MODEL")
  if [ -f "$MODEL/bootstrap.json" ]; then  # a warm start: played as its demonstrations were
    model+=($($PY -c 'import json, sys; m = json.load(open(sys.argv[1]))
print("--override webshop.history_steps=%s --override webshop.result_refs=%s"
      % (m["history_steps"], m["result_refs"]))' "$MODEL/bootstrap.json"))
  fi
  [ "$LORA_RANK" -gt 0 ] && model+=(--lora-rank "$LORA_RANK" --lora-alpha "$((2 * LORA_RANK))")
  if [ "$ATTRIBUTE" = 1 ]; then  # every version's weights kept, without the optimizer
    model+=(--override trainer.save_freq=1 --override trainer.max_actor_ckpt_to_keep=null
            --override "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]")
  fi
  local t_train=$SECONDS
  timeout "$TRAIN_TIMEOUT_S" wsrl train --backend verl --config "$CONFIG" "${model[@]}" \
    --override "trainer.total_training_steps=$STEPS" \
    --override "webshop.eval_every=$EVAL_EVERY" --override "webshop.eval_goals=$EVAL_GOALS" \
    "$@" 2>&1 | tee "$LOGS/trainer.log" > "$OUT/trainer.log"
  local rc=${PIPESTATUS[0]}
  stamp "trainer exited $rc after $((SECONDS - t_train)) s (total $((SECONDS - t0)) s)"
  if [ "${VLLM_ALONE:-1}" = 1 ]; then  # the GPU is free again: vLLM's own ceiling on it
    local t_alone=$SECONDS
    if $PY docker/gpu/report.py vllm-alone "$LOGS" "$CONFIG" $MODEL > "$LOGS/vllm-alone.log" 2>&1; then
      stamp "vLLM alone benchmarked in $((SECONDS - t_alone)) s"
    else
      stamp "vLLM alone: failed after $((SECONDS - t_alone)) s (vllm-alone.log)"
    fi
  fi
  if [ "$ATTRIBUTE" = 1 ]; then
    local t_attr=$SECONDS
    if $PY docker/gpu/report.py attribute "$LOGS" "$CONFIG" $MODEL > "$LOGS/attribute.log" 2>&1; then
      stamp "calls attributed to their weights in $((SECONDS - t_attr)) s"
    else
      stamp "attribution: failed after $((SECONDS - t_attr)) s (attribute.log)"
    fi
  fi
  $PY docker/gpu/report.py summary "$LOGS" >> "$OUT/report.md" 2>&1
  tail_logs
  stamp "$([ "$rc" -eq 0 ] && echo PASSED || echo FAILED) in $((SECONDS - t0)) s"
  return "$rc"
}

case "${1:-}" in
  receive) receive ;;
  run) shift; run "$@" ;;
  prepare) shift; PREPARE_ONLY=1 run "$@" ;;
  *) echo "usage: $0 receive|prepare|run" >&2; exit 2 ;;
esac
