"""The dashboard in a real browser (Debian's headless Chromium through Playwright) on a
database filled by a real run: env server, scripted LLMs, a Celery worker.

Policy v1 is the scripted ``rule`` policy, v2 the ``oracle``: both play the same goals, so
compare has two versions of one goal; an eval round follows on v2. With
``WSRL_TEST_SCREENSHOTS=<dir>`` the pages' screenshots are also saved there (the
ones in docs/ are made so).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.processes import scripted_llm
from helpers.stack import RolloutStack, isolated_settings
from sqlalchemy import select

from app.api.main import create_app
from app.core.endpoint import PolicyEndpoint, publish_policy, withdraw_endpoint
from app.db.models import Attempt, Rollout, Step
from app.db.session import session_scope
from app.webshop.server.runner import RunningServer, serve_in_thread

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "dashboard-test-token"
GOALS = 4


@pytest.fixture(scope="module")
def run(make_database, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two policy versions played on the same goals by real workers, then an eval round."""
    root: Path = tmp_path_factory.mktemp("dashboard")
    settings = isolated_settings(
        make_database,
        redis_url,
        root,
        api_token=TOKEN,
        llm_timeout_s=5.0,
        llm_retry_budget_s=5.0,
        env_timeout_s=5.0,
        step_timeout_s=10.0,
        logs_channel=f"wsrl:logs:{uuid.uuid4().hex[:8]}",
    )
    with RolloutStack.start(root, settings, workers=1, concurrency=4) as stack:
        rule = scripted_llm(root, stack.settings, policy="rule").start()
        try:
            goals = stack.goal_ids[:GOALS]
            ids: dict[int, list[uuid.UUID]] = {}
            for version, url in ((1, rule.url), (2, stack.llm.url)):
                with session_scope(stack.sessions) as session:
                    publish_policy(session, stack.redis, PolicyEndpoint(url, "policy", version))
                ids[version] = stack.enqueue(goal_ids=goals, group_size=2)
                stack.wait(ids[version])
            evals = stack.enqueue(goal_ids=goals, group_size=1, mode="eval")
            stack.wait(evals)
            with serve_in_thread(create_app(stack.settings)) as api:
                yield {"stack": stack, "api": api, "ids": ids, "goals": goals}
        finally:
            withdraw_endpoint(stack.redis)
            rule.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (as .ci/run does)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


def _shot(page, name: str, tmp_path: Path) -> None:
    path = tmp_path / f"dashboard-{name}.png"
    page.screenshot(path=str(path))  # the first screenful
    assert path.stat().st_size > 10_000
    if target := os.environ.get("WSRL_TEST_SCREENSHOTS"):
        shutil.copy(path, Path(target) / path.name)


def test_dashboard_pages_in_a_browser(run: dict, browser, tmp_path: Path) -> None:
    api: RunningServer = run["api"]
    stack: RolloutStack = run["stack"]
    page = browser.new_page()

    # Without the token: the 401 login page; the form sets the cookie and goes on.
    answer = page.goto(f"{api.url}/dashboard")
    assert answer is not None and answer.status == 401
    page.fill("input[name=token]", "wrong")
    page.click("button[type=submit]")
    assert "wrong token" in page.inner_text("#error")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{api.url}/dashboard")

    # Overview: it opens on the curves (held-out success and reward by version with their
    # intervals, then train), in the first screenful; the versions table comes below.
    held_out = page.locator("#curves #held-out svg.chart")
    assert held_out.locator("g.success circle").count() == 1  # one round, at v2
    assert held_out.locator("g.reward circle").count() == 1
    assert held_out.locator("g.success line").count() == 1  # its interval
    assert "v2" in held_out.locator("text").all_text_contents()
    chart_box, table_box = held_out.bounding_box(), page.locator("#versions table").bounding_box()
    assert chart_box is not None and table_box is not None
    assert chart_box["y"] + chart_box["height"] <= table_box["y"]
    assert chart_box["y"] + chart_box["height"] <= 900  # the viewport: no scrolling
    assert "Train: no train step recorded yet" in page.inner_text("#curves")  # no trainer here

    # Both versions with their train episodes, the eval round with its intervals.
    versions = page.locator("#versions tr.version")
    assert versions.count() == 2
    assert versions.nth(0).inner_text().startswith("v2")
    assert versions.nth(1).inner_text().startswith("v1")
    v2_cells = versions.nth(0).locator("td").all_inner_texts()
    assert v2_cells[3] == str(2 * GOALS)  # train episodes of v2
    assert page.locator("#evals tr.round").count() == 1
    assert str(GOALS) in page.locator("#evals tr.round").inner_text()
    assert page.locator("#queued b").inner_text() == "0"
    _shot(page, "overview", tmp_path)

    # Rollouts: the filter form narrows the table (all of v1's train rollouts, then v1
    # with success).
    page.click("header a[href='/dashboard/rollouts']")
    total = page.locator("#rollouts tr.rollout").count()
    assert total == 4 * GOALS + GOALS  # two versions x groups of 2, plus the eval round
    page.fill("#filters input[name=version]", "1")
    page.select_option("#filters select[name=mode]", "train")
    page.click("#filters button[type=submit]")
    assert "version=1" in page.url
    rows = page.locator("#rollouts tr.rollout")
    assert rows.count() == 2 * GOALS
    assert all("v1" in text for text in rows.all_inner_texts())
    with session_scope(stack.sessions) as session:
        v1_successes = session.scalar(
            select(Rollout.id)
            .where(Rollout.id.in_(run["ids"][1]), Rollout.success.is_(True))
            .limit(1)
        )
    page.select_option("#filters select[name=success]", "yes")
    page.click("#filters button[type=submit]")
    narrowed = page.locator("#rollouts tr.rollout").count()
    assert narrowed < 2 * GOALS
    assert (narrowed > 0) == (v1_successes is not None)
    page.goto(f"{api.url}/dashboard/rollouts?version=2&limit=25")
    _shot(page, "rollouts", tmp_path)

    # One episode: clicking a rollout opens it with every recorded step and the parts.
    first = page.locator("#rollouts tr.rollout a").first
    rollout_id = uuid.UUID(first.get_attribute("href").rsplit("/", 1)[1])
    first.click()
    page.wait_for_url(f"**/dashboard/rollouts/{rollout_id}")
    with session_scope(stack.sessions) as session:
        recorded = session.scalars(
            select(Step.action)
            .join(Attempt, Attempt.id == Step.attempt_id)
            .where(Attempt.rollout_id == rollout_id)
            .order_by(Step.attempt_id, Step.index)
        ).all()
        rollout = session.get(Rollout, rollout_id)
        assert rollout is not None and rollout.reward_parts
    assert page.locator(".step").count() == len(recorded) > 0
    assert page.locator(".step code.action").all_inner_texts() == list(recorded)
    assert page.locator("#outcome .reward-parts tr").count() == 5  # header + four parts
    assert "attributes (r_att)" in page.inner_text("#outcome .reward-parts")
    assert page.locator(".step pre.reply").count() >= 1
    assert page.locator(".step pre.seen").count() >= 1
    _shot(page, "episode", tmp_path)

    # Compare: the episode links to the same goal played by v1 and v2.
    page.click("#compare")
    page.wait_for_url("**/dashboard/compare?*")
    sides = page.locator("section.side h2").all_inner_texts()
    assert [s.split(":")[0] for s in sides] == ["v1", "v2"]
    assert page.locator("section.side > .reward-parts").count() == 2
    _shot(page, "compare", tmp_path)
