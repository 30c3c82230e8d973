"""docker-compose.yml, .env.example, docs/operations.md and the slim image's requirements agree.

No Docker engine is needed: the compose file is parsed with PyYAML and checked for what
``docker compose`` would otherwise only reveal at start-up (a service that starts before
what it needs is healthy, a variable nobody documents, a command the CLI lacks).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from app.cli import cli

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
OPERATIONS = ROOT / "docs" / "operations.md"
VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?][^}]*)?\}")
HEALTHY = ("service_healthy", "service_completed_successfully")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _depends(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):  # short form: only "started", never waits on health
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def _ready_gated(name: str, services: dict[str, dict[str, Any]], seen: frozenset = frozenset()):
    """A service is gated when it has a healthcheck, is a one-shot job others wait for, or
    waits (healthy / completed) on services that are themselves gated."""
    service = services[name]
    if "healthcheck" in service:
        return True
    deps = _depends(service)
    if not deps or name in seen:
        return False
    return all(
        cond in HEALTHY and _ready_gated(dep, services, seen | {name}) for dep, cond in deps.items()
    )


def test_compose_parses_with_the_expected_services(services) -> None:
    expected = {"postgres", "redis", "migrate", "webshop", "api", "worker", "reconciler", "flower"}
    assert expected | {"trainer-gpu", "trainer-cpu"} <= set(services)


def test_every_service_has_a_healthcheck_or_waits_on_one(services) -> None:
    loose = [name for name in services if not _ready_gated(name, services)]
    assert not loose, f"services that start without waiting on a healthy dependency: {loose}"


def test_dependencies_exist_and_wait_for_health(services) -> None:
    for name, service in services.items():
        for dep, cond in _depends(service).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert cond in HEALTHY, f"{name} -> {dep} waits only for {cond!r}"
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits on {dep}, which has none"


def test_redis_keeps_its_append_only_file_in_a_volume(compose, services) -> None:
    """Postgres is the truth, but a restarted Redis that kept its queue loses no message
    for the reconciler to find: the append-only file lands in /data, a named volume."""
    command = services["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    volumes = dict(v.split(":", 1) for v in services["redis"]["volumes"])
    assert {target for target in volumes.values()} == {"/data"}
    assert set(volumes) <= set(compose["volumes"]), "a named volume, not the container's layer"


def test_gpu_profile_trainer_reserves_nvidia_gpus_and_mounts_hf_cache(services) -> None:
    gpu = services["trainer-gpu"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert any(str(v).endswith(":/hf-cache") for v in gpu["volumes"])
    assert gpu["environment"]["HF_HOME"] == "/hf-cache"
    assert gpu["command"][:4] == ["wsrl", "train", "--backend", "verl"]


def test_gpu_trainer_publishes_the_policy_port_it_relays_and_advertises(services) -> None:
    # verl's vLLM server listens on a random port; workers get the relay's fixed port.
    gpu = services["trainer-gpu"]
    command = gpu["command"]
    overrides = [command[i + 1] for i, word in enumerate(command) if word == "--override"]
    assert "webshop.endpoint.port=${TRAINER_POLICY_PORT}" in overrides
    assert "webshop.endpoint.advertise_host=${TRAINER_ADVERTISE_HOST}" in overrides
    assert gpu["ports"] == ["${TRAINER_POLICY_PORT}:${TRAINER_POLICY_PORT}"]
    env = _env_example()
    assert env["TRAINER_ADVERTISE_HOST"] == "trainer-gpu"  # the stack's own workers
    assert 1 <= int(env["TRAINER_POLICY_PORT"]) <= 65535


def test_dev_profile_runs_the_cpu_trainer(services) -> None:
    cpu = services["trainer-cpu"]
    assert cpu["profiles"] == ["dev"]
    assert cpu["command"][:4] == ["wsrl", "train", "--backend", "local"]
    assert "deploy" not in cpu


PROTOCOL_VARIABLES = ("WSRL_AGENT_MODE", "WSRL_AGENT_HISTORY_STEPS", "WSRL_MAX_STEPS")


def test_one_env_serves_every_profile(services) -> None:
    """The agent protocol is published with the policy: no service takes it from `.env`
    (the dev and gpu profiles wanted different values there), and `make dev-docker` and
    `make compose-test` write none. The CPU trainer alone constrains its tiny policy's
    replies, in its own environment, and publishes that."""
    for name, service in services.items():
        environment = service.get("environment", {})
        assert not [v for v in PROTOCOL_VARIABLES if v in environment], name
        if name != "trainer-cpu":
            assert "WSRL_AGENT_CONSTRAIN_ACTIONS" not in environment, name
    assert services["trainer-cpu"]["environment"]["WSRL_AGENT_CONSTRAIN_ACTIONS"] == "true"
    assert not [key for key in _env_example() if key.startswith("AGENT_")]
    assert "AGENT_" not in (ROOT / "Makefile").read_text()
    assert not re.findall(r'echo "AGENT_', (ROOT / "docker" / "compose-test.sh").read_text())


def test_core_services_have_no_profile(services) -> None:
    core = ("postgres", "redis", "migrate", "webshop", "api", "worker", "reconciler", "flower")
    assert all("profiles" not in services[name] for name in core)


def _cli_paths() -> set[tuple[str, ...]]:
    """Every (group, command) path of ``wsrl`` with its options."""
    root = get_command(cli)
    paths: dict[tuple[str, ...], set[str]] = {}

    def walk(command, prefix: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for sub_name, sub in subcommands.items():
                walk(sub, (*prefix, sub_name))
            return
        paths[prefix] = {opt for p in command.params for opt in getattr(p, "opts", [])}

    walk(root, ())
    return paths


def test_service_commands_exist_in_the_cli(services) -> None:
    paths = _cli_paths()
    for name, service in services.items():
        command = service.get("command")
        if not command or command[0] != "wsrl":
            continue
        words = [w for w in command[1:] if not w.startswith("-")]
        path = next(
            (tuple(words[:n]) for n in (2, 1) if tuple(words[:n]) in paths),
            None,
        )
        assert path is not None, f"{name}: `{' '.join(command)}` is not a wsrl command"
        options = {w for w in command if w.startswith("--")}
        unknown = options - paths[path]
        assert not unknown, f"{name}: wsrl {' '.join(path)} has no option(s) {unknown}"


def _compose_variables() -> set[str]:
    return set(VARIABLE.findall(COMPOSE.read_text()))


def _env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value
    return pairs


def test_every_compose_variable_is_in_env_example() -> None:
    missing = _compose_variables() - set(_env_example())
    assert not missing, f"add to .env.example: {sorted(missing)}"


def test_every_compose_variable_is_documented_in_operations() -> None:
    text = OPERATIONS.read_text()
    assert "## Docker Compose variables" in text
    section = text.split("## Docker Compose variables", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1) for m in re.finditer(r"^\|\s*`([A-Z_][A-Z0-9_]*)`", section, re.M)}
    missing = (_compose_variables() | set(_env_example())) - rows
    where = "docs/operations.md, section 'Docker Compose variables'"
    assert not missing, f"document in {where}: {missing}"


def test_sql_password_reaches_the_migration_and_every_app_service(services) -> None:
    """``wsrl db upgrade`` (the migrate service) gives the read-only role the password that
    ``wsrl sql`` then logs in with in any app container; Postgres asks for one over TCP."""
    assert services["migrate"]["command"] == ["wsrl", "db", "upgrade"]
    for name, service in services.items():
        if service.get("image", "").startswith("webshop-rl"):
            environment = service["environment"]
            assert environment.get("WSRL_SQL_PASSWORD") == "${WSRL_SQL_PASSWORD}", name
    assert _env_example()["WSRL_SQL_PASSWORD"], "an empty password leaves the role unusable"


def test_train_config_default_names_a_verl_config() -> None:
    from trainer.backends.verl.config import CONFIG_NAMES

    assert _env_example()["TRAIN_CONFIG"] in CONFIG_NAMES


def _compose_environment(service: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The service's environment with the ``.env`` values substituted as Compose does
    (``${NAME}``, ``${NAME:-default}``)."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(0)[2:-1].partition(":-")[2]
        return env.get(name) or default

    return {
        key: re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(?::-[^}]*)?\}", value, str(raw))
        for key, raw in service["environment"].items()
    }


@pytest.mark.parametrize("name", ["smoke", "fast", "qwen", "qwen3b"])
def test_default_env_lets_every_gpu_config_start(services, name: str) -> None:
    """``cp .env.example .env && TRAIN_CONFIG=<any> docker compose --profile gpu up``: no
    agent setting of the trainer's environment contradicts its config's protocol (it
    stopped with "WSRL_AGENT_MODE=text but the verl config 'fast' expects tools" when the
    protocol came from `.env`), and the protocol published is the config's."""
    pytest.importorskip("verl")
    from app.config import Settings
    from trainer.backends.verl.config import agent_protocol_of, load_config

    trainer = _compose_environment(services["trainer-gpu"], _env_example())
    settings = Settings(
        _env_file=None,
        **{
            key.removeprefix("WSRL_").lower(): value
            for key, value in trainer.items()
            if key.startswith("WSRL_AGENT_") or key == "WSRL_MAX_STEPS"
        },
    )
    config = load_config(name)
    protocol = agent_protocol_of(config, settings, name)
    assert str(protocol.mode) == config.webshop.agent_mode
    assert protocol.max_steps == config.webshop.max_turns and not protocol.constrain_actions
    # The tiny policy is bootstrapped naming results by number; Qwen reads the original's ids.
    assert str(protocol.result_refs) == ("numbers" if name == "smoke" else "ids")


def test_slim_dockerfile_installs_no_train_extra() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    installs = " ".join(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "train" not in installs and "verl" not in installs and "torch" not in installs


@pytest.mark.slow
def test_slim_requirements_resolve_without_torch(tmp_path: Path) -> None:
    """What the slim image installs (core deps + export) pulls no torch or CUDA package."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--quiet", "--report", str(report), f"{ROOT}[export]"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        unreachable = ("No matching distribution", "Could not find a version", "connection")
        if any(s.lower() in result.stderr.lower() for s in unreachable):
            pytest.skip(f"package index unreachable or incomplete: {result.stderr[-300:]}")
        pytest.fail(result.stderr[-2000:])
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    heavy = sorted(n for n in names if n in {"torch", "triton"} or n.startswith("nvidia-"))
    assert not heavy, f"the slim image would install {heavy}"
    assert {"celery", "fastapi", "sqlalchemy"} <= names


def test_token_capture_can_be_turned_off_for_the_compose_workers(services) -> None:
    """The troubleshooting fix for an endpoint that rejects `return_token_ids`
    (`WSRL_LLM_TOKEN_CAPTURE=false`) reaches the workers through `.env`."""
    env = _env_example()
    worker = _compose_environment(services["worker"], {**env, "LLM_TOKEN_CAPTURE": "false"})
    assert worker["WSRL_LLM_TOKEN_CAPTURE"] == "false"
    assert _compose_environment(services["worker"], env)["WSRL_LLM_TOKEN_CAPTURE"] == "true"
