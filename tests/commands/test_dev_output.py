"""What ``wsrl dev`` tells the user besides progress: where the curves and logs are, what
still runs after Ctrl-C; and ``wsrl logs`` finding the newest run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.processes import REPO, WSRL, child_env

from app.commands import dev
from app.commands.logs import log_of, new_run, newest_run
from app.config import Settings
from app.embedded.services import ServiceReport


def _settings(tmp_path: Path, **update) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, **update)


def test_ctrl_c_says_the_embedded_services_still_run_and_how_to_stop_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = [
        ServiceReport("postgres", "running", "postgresql://x"),
        ServiceReport("redis", "running", "redis://x"),
    ]
    monkeypatch.setattr("app.embedded.services.services_status", lambda settings: reports)
    lines = "\n".join(dev.still_running(_settings(tmp_path)))
    assert "PostgreSQL (port 55432) and Redis (port 56379)" in lines
    assert "`wsrl services stop`" in lines and "`make services-stop`" in lines


def test_nothing_to_stop_when_the_services_are_external_or_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = [
        ServiceReport("postgres", "external", "postgresql://x"),
        ServiceReport("redis", "not running", None),
    ]
    monkeypatch.setattr("app.embedded.services.services_status", lambda settings: reports)
    assert dev.still_running(_settings(tmp_path)) == []


def test_dev_run_output_goes_to_the_terminal_and_the_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_log, children = new_run(tmp_path)
    out = dev.RunOutput(run_log)
    out.print("[bold]step 1[/bold] reward 0.5")
    out.close()
    assert "step 1 reward 0.5" in capsys.readouterr().out
    assert run_log.read_text() == "step 1 reward 0.5\n"  # plain text, no markup
    assert run_log.parent == tmp_path / "logs" and children == run_log.with_suffix("")


def test_dev_says_where_the_curves_and_logs_are(tmp_path: Path) -> None:
    run_log, _ = new_run(tmp_path)
    text = "\n".join(dev.where_to_look(_settings(tmp_path), run_log))
    assert f"tensorboard --logdir {tmp_path / 'tensorboard'}`" in text
    assert str(run_log) in text and "make logs-latest" in text and "make watch" in text
    quiet = dev.where_to_look(_settings(tmp_path, metrics_loggers="none"), run_log)
    assert not any("tensorboard" in line for line in quiet)


def test_logs_shows_the_newest_run_and_its_processes(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "dev-20250101-000000").mkdir(parents=True)
    (logs / "dev-20250101-000000.log").write_text("old run\n")
    (logs / "dev-20250102-000000").mkdir()
    (logs / "dev-20250102-000000.log").write_text("step 1\nstep 2\n")
    (logs / "dev-20250102-000000" / "env.log").write_text("GET /health 200\n")
    newest = newest_run(tmp_path)
    assert newest == logs / "dev-20250102-000000.log"
    assert log_of(newest, "env") == logs / "dev-20250102-000000" / "env.log"
    env = child_env(data_dir=tmp_path)

    def wsrl_logs(*args: str) -> subprocess.CompletedProcess[str]:
        command = [*WSRL, "logs", *args]
        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)

    assert wsrl_logs("-n", "1").stdout == "step 2\n"
    assert wsrl_logs("env").stdout == "GET /health 200\n"
    assert wsrl_logs("--path").stdout.strip() == str(newest)


def test_logs_without_a_run_says_how_to_make_one(tmp_path: Path) -> None:
    result = subprocess.run(
        [*WSRL, "logs"],
        env=child_env(data_dir=tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "make dev" in result.stderr


def test_the_progress_waits_out_a_database_outage(
    services_dir_factory, test_settings: Settings, tmp_path: Path
) -> None:
    """The database stopped under a running `wsrl dev` (here: its own server, stopped and
    started again): the progress says so, then that it is back, and goes on; it used to
    end `wsrl dev` with a traceback while its children waited the outage out."""
    import sys
    import threading
    import time
    from datetime import UTC, datetime

    from app.db import migrate
    from app.db.session import make_engine, make_sessionmaker
    from app.embedded.ports import free_port
    from app.embedded.postgres import EmbeddedPostgres
    from app.progress import TrainingProgress
    from app.supervisor import Supervisor

    server = EmbeddedPostgres(services_dir_factory("dev-outage-pg"))
    port = free_port()
    url = server.start(port)
    supervisor = Supervisor(tmp_path / "logs")
    engine = make_engine(test_settings.model_copy(update={"database_url": url}))
    try:
        migrate.upgrade(url)
        progress = TrainingProgress(make_sessionmaker(engine), datetime.now(UTC))
        supervisor.start("trainer", [sys.executable, "-c", "import time; time.sleep(9)"])
        out = dev.RunOutput(tmp_path / "run.log")
        failures: list[BaseException] = []

        def monitor() -> None:
            try:
                dev._monitor(supervisor, progress, time.monotonic(), out)
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=monitor)
        thread.start()
        time.sleep(1.5)
        server.stop()
        time.sleep(2.5)
        assert server.start(port) == url
        thread.join(timeout=30)
        assert not thread.is_alive() and not failures, failures
        text = (tmp_path / "run.log").read_text()
        down = text.index("the database does not answer")
        assert text.index("the database answers again") > down
        assert "the processes retry until it is back" in text
    finally:
        supervisor.stop_all()
        engine.dispose()
        server.stop()
