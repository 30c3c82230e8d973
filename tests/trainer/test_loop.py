"""The training loop on real Postgres + Redis with hand-inserted rollouts and LLM calls."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers.training_rows import (
    F,
    R,
    S,
    add_group,
    ensure_goal,
    finish_running,
    train_steps_of,
)
from sqlalchemy import select

from app.config import Settings
from app.core.celery import create_celery
from app.core.endpoint import ENDPOINT_CHANNEL, ENDPOINT_KEY, read_endpoint
from app.core.redis_client import db_channel
from app.db.lifecycle import PolicyVersionStatus, RolloutMode, RolloutStatus
from app.db.models import PolicyVersion, Rollout, TrainStep
from app.db.session import make_engine, make_sessionmaker, session_scope
from trainer.backends.local import checkpoints
from trainer.backends.local.run import LocalRun, start_local_run
from trainer.config import LocalSection, RunConfig, TrainerConfig
from trainer.loop import LoopOptions, TrainLoop
from trainer.scheduler import Scheduler

CONFIG = TrainerConfig(
    group_size=2, batch_groups=2, max_staleness=1, lr=1e-3, micro_batch_size=4, seed=0
)


def not_enqueuing(config: TrainerConfig) -> RunConfig:
    """A run of ``config`` whose trainer enqueues nothing (the test adds the groups)."""
    return RunConfig(algorithm=config, local=LocalSection(enqueue=False))


@pytest.fixture
def sessions(fresh_settings: Settings) -> Iterator:
    engine = make_engine(fresh_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


def start(settings: Settings, model: Path, config: TrainerConfig = CONFIG) -> LocalRun:
    options = LoopOptions(checkpoint_dir=settings.data_dir / "ckpt", poll_s=0.1)
    return start_local_run(settings, not_enqueuing(config), model, options)


def test_step_trains_complete_fresh_groups_marks_them_and_republishes(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path
) -> None:
    with session_scope(sessions) as session:
        session.add(PolicyVersion(version=5, status=PolicyVersionStatus.ACTIVE))
        ready = [add_group(session, [S, S], version=5), add_group(session, [S, S, F], version=5)]
        incomplete = add_group(session, [S, R], version=5)
        stale = add_group(session, [S, S], version=3)
        too_few = add_group(session, [S, F], version=5)
    client = redis.Redis.from_url(fresh_settings.resolved_redis_url())
    trainer = start(fresh_settings, tiny_checkpoint)
    try:
        assert trainer.loop.version == 6  # above everything published, no checkpoint yet
        pubsub = client.pubsub()
        pubsub.subscribe(db_channel(client, ENDPOINT_CHANNEL))
        pubsub.get_message(timeout=1.0)  # the subscription confirmation
        [_] = trainer.loop.run(steps=1, wait_timeout_s=10)
        announced = []
        while (message := pubsub.get_message(timeout=1.0)) is not None:
            # this db's channel only: the other test processes' trainers (on their own
            # dbs of the same server) are not heard
            announced.append(json.loads(message["data"] or "{}"))
        assert [(a["version"], a["status"]) for a in announced] == [
            (7, "paused"),
            (7, "serving"),
        ]
        assert announced[-1]["base_url"] == trainer.base_url
        assert read_endpoint(client).version == 7 and read_endpoint(client).serving

        marks = train_steps_of(sessions, [*ready, incomplete, stale, too_few])
        assert all(marks[g] == {1} for g in ready)
        assert marks[stale] == {1} and marks[too_few] == {1}  # retired, never pulled again
        assert marks[incomplete] == {None}
        with session_scope(sessions) as session:
            step = session.get(TrainStep, 1)
            assert step.policy_version == 7 and step.rollouts_used == 4
            for key in (
                "reward/mean",
                "reward/std",
                "reward/success",
                "losses/total",
                "losses/entropy",
                "perf/generated_tokens",
                "samples/prefix_mismatches",
                "samples/dropped_overlength",
                "staleness/behind_1",
                "batch/stale",
                "batch/retired_groups",
                "time/wait_s",
                "time/batch_s",
                "time/update_s",
                "time/sync_s",
                "time/publish_s",
                "time/step_s",
            ):
                assert key in step.metrics, key
            assert step.metrics["reward/mean"] == pytest.approx(0.75)
            assert step.metrics["reward/success"] == pytest.approx(0.5)
            assert step.metrics["batch/retired_groups"] == 2.0
            statuses = dict(
                session.execute(select(PolicyVersion.version, PolicyVersion.status)).all()
            )
            assert statuses[7] == PolicyVersionStatus.ACTIVE
            assert statuses[6] == statuses[5] == PolicyVersionStatus.RETIRED
        assert [
            c.step for c in checkpoints.list_checkpoints(trainer.loop.options.checkpoint_dir)
        ] == [1]

        # Nothing left to train: the used groups are never pulled again.
        assert trainer.loop.run(steps=1, wait_timeout_s=0.5) == []
        # The incomplete group completes, but at version 5 it is now 2 versions behind v7.
        with session_scope(sessions) as session:
            finish_running(session, incomplete, version=5)
        assert trainer.loop.run(steps=1, wait_timeout_s=0.5) == []
        pubsub.close()
    finally:
        trainer.close()
        client.close()


def test_restart_resumes_from_checkpoint_and_discards_uncommitted_one(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path
) -> None:
    config = CONFIG.with_(batch_groups=1, max_staleness=10)
    with session_scope(sessions) as session:
        groups = [add_group(session, [S, S], version=0) for _ in range(3)]
    trainer = start(fresh_settings, tiny_checkpoint, config)
    try:
        trainer.loop.run(steps=1, wait_timeout_s=10)
        assert (trainer.loop.step, trainer.loop.version) == (1, 1)
        # A crash after step 2's checkpoint was written but before its commit:
        uncommitted = checkpoints.save_checkpoint(
            trainer.loop.options.checkpoint_dir, 2, 2, trainer.learner
        )
        weights = {k: v.clone() for k, v in trainer.learner.model.state_dict().items()}
    finally:
        trainer.close()
    again = start(fresh_settings, tiny_checkpoint, config)
    try:
        assert not uncommitted.path.exists()
        assert (again.loop.step, again.loop.version) == (1, 1)
        assert again.resumed_from is not None and again.resumed_from.name == "step-000001"
        restored = again.learner.model.state_dict()
        assert all((restored[k] == v).all() for k, v in weights.items())
        assert again.learner.optimizer.state  # AdamW moments came back too
        results = again.loop.run(steps=2, wait_timeout_s=10)
        assert [(r.step, r.version) for r in results] == [(2, 2), (3, 3)]
    finally:
        again.close()
    marks = train_steps_of(sessions, groups)
    assert sorted(next(iter(m)) for m in marks.values()) == [1, 2, 3]


def test_another_trainer_marking_first_rolls_the_step_back(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path
) -> None:
    from trainer.loop import AlreadyTrainedError, commit_step
    from trainer.ready_groups import load_ready_groups

    with session_scope(sessions) as session:
        add_group(session, [S, S], version=0)
        records, selection = load_ready_groups(session, 0, 1, 1)
    ids = [r.rollout_id for r in records]
    with session_scope(sessions) as session:
        commit_step(session, 1, 1, ids, selection, {})
    with (
        pytest.raises(AlreadyTrainedError, match="already belong"),
        session_scope(sessions) as session,
    ):
        commit_step(session, 2, 2, ids, selection, {})
    with session_scope(sessions) as session:
        assert session.get(TrainStep, 2) is None


def test_groups_with_equal_rewards_are_used_up_without_an_update(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path, caplog
) -> None:
    with session_scope(sessions) as session:
        groups = [add_group(session, [S, S], rewards=[0.0, 0.0]) for _ in range(2)]
    trainer = start(fresh_settings, tiny_checkpoint)
    try:
        weights = {k: v.clone() for k, v in trainer.learner.model.state_dict().items()}
        with caplog.at_level(logging.WARNING, logger="trainer.loop"):
            [result] = trainer.loop.run(steps=1, wait_timeout_s=10)
        assert result.version == 0 and result.metrics["update/skipped"] == 1.0
        assert result.metrics["batch/zero_variance_groups"] == 2.0
        # said loudly, with the cause: a run whose versions never move says why
        [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warning.startswith("step 1 made no update; the policy stays v0 (1 steps in a row)")
        assert "in each of its 2 groups every rollout scored the same (rewards 0)" in warning
        after = trainer.learner.model.state_dict()
        assert all((after[k] == v).all() for k, v in weights.items())
        assert read_endpoint(trainer.redis).version == 0
    finally:
        trainer.close()
    assert all(m == {1} for m in train_steps_of(sessions, groups).values())


def test_stop_event_ends_a_waiting_loop(fresh_settings: Settings, tiny_checkpoint: Path) -> None:
    trainer = start(fresh_settings, tiny_checkpoint)
    try:
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        assert trainer.loop.run(stop=stop) == []
    finally:
        trainer.close()
    assert isinstance(trainer.loop, TrainLoop)


def start_evaluating(settings: Settings, model: Path, options: LoopOptions) -> LocalRun:
    """A trainer whose scheduler queues evaluations of 2 goals and no train groups (target
    0), so the batches are the test's own."""
    trainer = start_local_run(settings, not_enqueuing(CONFIG), model, options)
    trainer.loop.scheduler = Scheduler(
        create_celery(settings), settings, group_size=2, target_groups=0, eval_goals=2
    )
    return trainer


def test_held_out_evaluations_at_start_and_every_n_versions(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path
) -> None:
    with session_scope(sessions) as session:
        for goal in (11, 12, 13):
            ensure_goal(session, goal, split="test")
        for _ in range(4):
            add_group(session, [S, S])
    options = LoopOptions(checkpoint_dir=fresh_settings.data_dir / "ckpt", poll_s=0.1, eval_every=2)
    trainer = start_evaluating(fresh_settings, tiny_checkpoint, options)
    try:
        results = trainer.loop.run(steps=2, wait_timeout_s=10)
        assert [r.version for r in results] == [1, 2]
    finally:
        trainer.close()

    def evaluations() -> list[int]:
        with session_scope(sessions) as session:
            return list(
                session.scalars(select(Rollout.goal_id).where(Rollout.mode == RolloutMode.EVAL))
            )

    # The starting weights (none evaluated yet) and version 2; version 1 is skipped.
    assert len(evaluations()) == 4 and set(evaluations()) <= {11, 12, 13}
    trainer = start_evaluating(fresh_settings, tiny_checkpoint, options)
    try:
        trainer.loop.run(steps=1, wait_timeout_s=1)
    finally:
        trainer.close()
    assert len(evaluations()) == 4  # a restart does not evaluate the same weights again


def _finish_evaluations_after(sessions, delay_s: float) -> threading.Thread:
    """What the workers would do: play every eval episode queued so far, ``delay_s`` later."""

    def finish() -> None:
        time.sleep(delay_s)
        with session_scope(sessions) as session:
            for rollout in session.scalars(select(Rollout).where(Rollout.mode == RolloutMode.EVAL)):
                rollout.status = RolloutStatus.SUCCEEDED

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def _one_step_evaluating_every_version(settings: Settings, sessions, model: Path) -> LocalRun:
    """Three test goals, two complete groups (one step's batch), an evaluation per version."""
    with session_scope(sessions) as session:
        for goal in (11, 12, 13):
            ensure_goal(session, goal, split="test")
        add_group(session, [S, S])
        add_group(session, [S, S])
    options = LoopOptions(checkpoint_dir=settings.data_dir / "ckpt", poll_s=0.05, eval_every=1)
    return start_evaluating(settings, model, options)


def test_a_run_that_trained_all_its_steps_waits_for_its_last_evaluation(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path
) -> None:
    """The last version's round was still in flight when a trainer with --steps exited
    (seen on the first GPU run): its weights stopped being served under it."""
    trainer = _one_step_evaluating_every_version(fresh_settings, sessions, tiny_checkpoint)
    try:
        workers = _finish_evaluations_after(sessions, 1.5)
        started = time.monotonic()
        results = trainer.loop.run(steps=1, wait_timeout_s=20, finish_evaluation=True)
        waited = time.monotonic() - started
        workers.join()
        assert [r.version for r in results] == [1]
        assert waited >= 1.5, "returned while the evaluation was still queued"
        assert waited < 15, "kept waiting after the evaluation was played"
        with session_scope(sessions) as session:
            statuses = session.scalars(
                select(Rollout.status).where(Rollout.mode == RolloutMode.EVAL)
            ).all()
        assert len(statuses) == 4 and set(statuses) == {RolloutStatus.SUCCEEDED}
    finally:
        trainer.close()


def test_the_wait_for_the_last_evaluation_is_bounded(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path, caplog
) -> None:
    trainer = _one_step_evaluating_every_version(fresh_settings, sessions, tiny_checkpoint)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="trainer.loop"):
            trainer.loop.run(steps=1, wait_timeout_s=2, finish_evaluation=True)
        assert 2 <= time.monotonic() - started < 15
        assert "4 evaluation episodes of v1 unplayed" in caplog.text
        # Left queued, they would be played after the trainer stopped serving v1: against
        # no server, or a later trainer's weights under v1's round.
        with session_scope(sessions) as session:
            left = session.execute(
                select(Rollout.status, Rollout.last_error).where(Rollout.mode == RolloutMode.EVAL)
            ).all()
        assert [(str(s), e) for s, e in left] == [
            ("cancelled", "cancelled: the trainer stopped at v1 before it was played")
        ] * 4
    finally:
        trainer.close()


def test_a_stopped_run_cancels_its_evaluation_at_once(
    fresh_settings: Settings, sessions, tiny_checkpoint: Path, caplog
) -> None:
    """Ctrl-C (``make dev``) mid-run: the rounds in flight are cancelled without the wait
    a run that trained all its steps gives its last round."""
    trainer = _one_step_evaluating_every_version(fresh_settings, sessions, tiny_checkpoint)
    stop = threading.Event()
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="trainer.loop"):
            trainer.loop.run(None, stop, on_step=lambda _: stop.set(), finish_evaluation=True)
        assert time.monotonic() - started < 15
        assert "4 evaluation episodes of v1 unplayed (waited 0 s); cancelled" in caplog.text
        with session_scope(sessions) as session:
            left = session.scalars(select(Rollout.status).where(Rollout.mode == RolloutMode.EVAL))
            assert [str(s) for s in left] == ["cancelled"] * 4
    finally:
        trainer.close()


def test_the_published_endpoint_names_the_advertised_host(
    fresh_settings: Settings, tiny_checkpoint: Path
) -> None:
    """Listening on 0.0.0.0 (in a container), the trainer publishes a host the workers can
    reach (the Compose service name; here ``localhost``) with the real port."""
    import httpx

    options = LoopOptions(checkpoint_dir=fresh_settings.data_dir / "ckpt", poll_s=0.1)
    local = LocalSection(enqueue=False, policy_host="0.0.0.0", advertise_host="localhost")
    run = RunConfig(algorithm=CONFIG, local=local)
    trainer = start_local_run(fresh_settings, run, tiny_checkpoint, options)
    try:
        client = redis.Redis.from_url(fresh_settings.resolved_redis_url())
        published = read_endpoint(client)
        client.close()
        assert published is not None
        assert published.base_url.startswith("http://localhost:")
        assert published.base_url == trainer.base_url
        assert httpx.get(f"{published.base_url}/models", timeout=10).is_success
    finally:
        trainer.close()


def test_the_trainer_publishes_the_agent_protocol_with_every_version(
    fresh_settings: Settings, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """A bootstrapped policy's history and text mode, the rest from the trainer's settings,
    in the Redis record (paused and serving) and on the version's row: the shared
    :class:`~trainer.publish.Publisher`, which the verl backend publishes through too."""
    import shutil

    from app.core.agent import AgentMode, AgentProtocol, ResultRefs
    from trainer.checkpoint_protocol import BOOTSTRAP_MANIFEST as MANIFEST
    from trainer.checkpoint_protocol import policy_protocol

    model = tmp_path / "bootstrapped"
    shutil.copytree(tiny_checkpoint, model)
    (model / MANIFEST).write_text(json.dumps({"history_steps": 1, "result_refs": "numbers"}))
    settings = fresh_settings.model_copy(update={"max_steps": 7})
    expected = AgentProtocol(
        AgentMode.TEXT, 1, constrain_actions=False, max_steps=7, result_refs=ResultRefs.NUMBERS
    )
    trainer = start(settings, model)
    client = redis.Redis.from_url(settings.resolved_redis_url())
    try:
        first = read_endpoint(client)
        assert first is not None and first.protocol == expected
        paused = []
        publisher = trainer.loop.publisher
        publisher.sync(first.version + 1, None, lambda: paused.append(read_endpoint(client)))
        assert paused[0] is not None and not paused[0].serving
        assert paused[0].protocol == expected
        with session_scope(trainer.loop.sessions) as session:
            rows = session.scalars(select(PolicyVersion.protocol)).all()
        assert rows == [expected.to_dict()] * 2
        # Its checkpoints keep it: `wsrl policy eval` plays a train step as the workers did.
        checkpoint = Path(trainer.loop.backend.save(1, first.version + 1))
        assert policy_protocol(fresh_settings, checkpoint) == expected
    finally:
        client.close()
        trainer.close()


def test_settings_that_contradict_the_bootstrap_stop_the_trainer_before_it_serves(
    fresh_settings: Settings, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    import shutil

    from app.core.agent import AgentProtocolMismatch
    from trainer.checkpoint_protocol import BOOTSTRAP_MANIFEST as MANIFEST

    model = tmp_path / "bootstrapped"
    shutil.copytree(tiny_checkpoint, model)
    (model / MANIFEST).write_text(json.dumps({"history_steps": 1}))
    settings = fresh_settings.model_copy(update={"agent_history_steps": 4})
    with pytest.raises(AgentProtocolMismatch, match="WSRL_AGENT_HISTORY_STEPS=4 is set here"):
        start(settings, model)
    engine = make_engine(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            assert session.scalars(select(PolicyVersion)).all() == [], "nothing was published"
    finally:
        engine.dispose()


def test_a_database_restart_while_the_trainer_waits_is_waited_out(
    services_dir_factory, test_settings: Settings, tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """Found by ``wsrl chaos``: the trainer exited on the first statement that met a
    restarting PostgreSQL (AdminShutdown, then connection refused) instead of waiting."""
    from app.db import migrate
    from app.embedded.ports import free_port
    from app.embedded.postgres import EmbeddedPostgres

    server = EmbeddedPostgres(services_dir_factory("loop-pg"))
    port = free_port()
    url = server.start(port)
    try:
        migrate.upgrade(url)
        settings = test_settings.model_copy(update={"database_url": url, "data_dir": tmp_path})
        trainer = start(settings, tiny_checkpoint, CONFIG.with_(batch_groups=1))
        engine = make_engine(settings)
        try:
            server.stop()

            def back() -> None:
                server.start(port)
                with session_scope(make_sessionmaker(engine)) as session:
                    add_group(session, [S, S], version=0)

            threading.Timer(3.0, back).start()
            [result] = trainer.loop.run(steps=1, wait_timeout_s=60)
            assert (result.step, result.version) == (1, 1)
        finally:
            trainer.close()
            engine.dispose()
            client = redis.Redis.from_url(test_settings.resolved_redis_url())
            client.delete(ENDPOINT_KEY)
    finally:
        server.stop()
