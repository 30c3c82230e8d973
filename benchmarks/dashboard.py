"""Server time of each dashboard page at ``--rollouts`` generated rollouts (default 10k, 1M).

For each size: a scratch database (created on the server of ``--database-url``, migrated,
dropped at the end) is filled in SQL (``generate_series``): 12,000 goals, one policy
version and one train step (with the trainer's metrics) per 64 rollouts, rollouts in
groups of 4 with an evaluation round of 200 every 2,000, 1 % failed, 100 still queued or
running, one attempt each; steps (6) and LLM calls (5, with a 2 kB prompt, 24 token ids
and logprobs) for 2,000 of them (an episode page reads one rollout's rows by key). Then
the API app (in process, ``TestClient``, with the token) serves each page ``--repeat``
times; prints p50 / p95 in ms.

Target: p50 <= 100 ms at 1M rollouts for the overview, a rollouts page and an episode.

    python benchmarks/dashboard.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg
from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.databases import admin_url, scratch_database  # noqa: E402

from app.api.main import create_app  # noqa: E402
from app.config import Settings, get_settings  # noqa: E402
from app.db import migrate  # noqa: E402

TOKEN = "bench-token"
EPISODES_WITH_STEPS = 2_000

FILL = [
    """
    INSERT INTO goals (id, split, instruction, spec)
    SELECT g, CASE WHEN g < 500 THEN 'test' ELSE 'train' END,
           'i need a ' || (ARRAY['blue','red','black','white'])[1 + g % 4] || ' '
           || (ARRAY['cotton shirt','running shoes','phone case','desk lamp'])[1 + g / 4 % 4]
           || ' number ' || g || ', and price lower than ' || (20 + g % 80) || '.00 dollars',
           jsonb_build_object(
               'asin', 'B' || lpad(g::text, 9, '0'), 'name', 'product ' || g,
               'attributes', jsonb_build_array('soft', 'long lasting'),
               'goal_options', jsonb_build_object('color', 'blue', 'size', 'large'),
               'price_upper', 20 + g % 80)
    FROM generate_series(0, 11999) AS g
    """,
    """
    INSERT INTO policy_versions (version, status, model, created_at)
    SELECT v, CASE WHEN v = :versions THEN 'active' ELSE 'retired' END, 'policy',
           timestamptz '2026-11-01' + v * interval '16 seconds'
    FROM generate_series(1, :versions) AS v
    """,
    """
    INSERT INTO train_steps (step, policy_version, rollouts_used, metrics, created_at)
    SELECT s, s, 64, jsonb_build_object(
             'reward/mean', 0.3 + 0.5 * s / :versions + 0.05 * random(),
             'reward/success', 0.1 + 0.6 * s / :versions + 0.05 * random(),
             'policy/version', s, 'staleness/behind_0', 12, 'staleness/behind_1', 4,
             'time/wait_s', 4 * random(), 'time/batch_s', 0.2, 'time/update_s', 6 + random(),
             'time/checkpoint_s', 0.5, 'time/commit_s', 0.05, 'time/sync_s', 1.5,
             'time/publish_s', 0.3, 'time/step_s', 8.5),
           timestamptz '2026-11-01' + s * interval '16 seconds'
    FROM generate_series(1, :versions) AS s
    """,
    """
    INSERT INTO rollouts (id, goal_id, group_id, sample_index, mode, start, status, attempts,
        reward, success, num_steps, policy_version_min, policy_version_max, reward_parts,
        worker, last_error, created_at, started_at, finished_at, deadline_at)
    SELECT gen_random_uuid(), goal, md5('group' || i / 4)::uuid, i % 4, mode, 'search', status,
           CASE WHEN status = 'queued' THEN 0 ELSE 1 END,
           CASE WHEN status = 'succeeded' THEN reward END,
           CASE WHEN status = 'succeeded' THEN reward = 1 END,
           CASE WHEN status = 'succeeded' THEN 2 + i % 9 END,
           CASE WHEN status <> 'queued' THEN version END,
           CASE WHEN status <> 'queued' THEN version END,
           CASE WHEN status = 'succeeded' THEN jsonb_build_object('r_att', 1.0,
               'r_option', 0.5, 'r_price', 1.0, 'r_type', 1.0, 'query_match', true,
               'category_match', true, 'title_score', 0.8, 'n_att', 2, 'n_option', 1,
               'n_goal_att', 2, 'n_goal_option', 2) END,
           CASE WHEN status <> 'queued' THEN 'w' || i % 4 || '@bench:1' END,
           CASE WHEN status = 'failed' THEN
               CASE WHEN i % 2 = 0 THEN 'env error: 503 from the env server'
                    ELSE 'EpisodeError: no valid action in 3 replies' END END,
           created, created, CASE WHEN status IN ('succeeded', 'failed') THEN created END,
           CASE WHEN status = 'running' THEN now() + interval '30 seconds' END
    FROM (
        SELECT i,
               CASE WHEN i % 2000 >= 1800 THEN 'eval' ELSE 'train' END AS mode,
               CASE WHEN i % 2000 >= 1800 THEN i % 500 ELSE 500 + (i / 4 * 7919) % 11500 END
                   AS goal,
               CASE WHEN i > :rollouts - 50 THEN 'queued'
                    WHEN i > :rollouts - 100 THEN 'running'
                    WHEN i % 97 = 0 THEN 'failed' ELSE 'succeeded' END AS status,
               CASE WHEN random() < 0.3 THEN 1.0 ELSE round((random() * 100)::numeric) / 100 END
                   ::float AS reward,
               1 + i / 64 AS version,
               timestamptz '2026-11-01' + CASE WHEN i % 2000 >= 1800
                   THEN (i / 2000 * 2000 + 1800) / 4 ELSE i / 4 END * interval '1 second'
                   AS created
        FROM generate_series(1, :rollouts) AS i
    ) AS r
    """,
    """
    INSERT INTO attempts (rollout_id, number, worker, status, started_at, finished_at, error,
                          reward, reward_parts)
    SELECT id, 1, worker, status, started_at, finished_at, last_error, reward, reward_parts
    FROM rollouts WHERE status <> 'queued'
    """,
    """
    CREATE TEMP TABLE sample AS
    SELECT a.id FROM attempts a JOIN rollouts r ON r.id = a.rollout_id
    WHERE r.status = 'succeeded' ORDER BY r.created_at DESC LIMIT :sample
    """,
    """
    INSERT INTO steps (attempt_id, index, action, observation, reward, done, valid,
                       latency_ms, info)
    SELECT s.id, k, CASE WHEN k = 0 THEN 'search[blue cotton shirt]' ELSE 'click[item ' || k
           || ']' END, repeat('Back to Search [SEP] Page 1 [SEP] B0TEST [SEP] a product ', 20),
           CASE WHEN k = 5 THEN 0.8 ELSE 0 END, k = 5, true, 12.5,
           jsonb_build_object('reply', 'click', 'llm_latency_ms', 10, 'env_latency_ms', 2.5,
                              'policy_version', 1)
    FROM sample s, generate_series(0, 5) AS k
    """,
    """
    INSERT INTO llm_calls (attempt_id, index, policy_version, model, request_messages,
        response_text, prompt_token_ids, response_token_ids, response_logprobs,
        finish_reason, latency_ms, trainable)
    SELECT s.id, k, 1, 'policy',
           jsonb_build_array(jsonb_build_object('role', 'system', 'content', 'You shop.'),
               jsonb_build_object('role', 'user', 'content', repeat('Instruction: find a '
               || 'shirt [SEP] Available actions: click[b0test] ', 40))),
           'click[item ' || k || ']', decode(repeat('01000000', 500), 'hex'),
           decode(repeat('02000000', 24), 'hex'), decode(repeat('0000803f', 24), 'hex'),
           'stop', 10.0, true
    FROM sample s, generate_series(0, 5) AS k
    """,
]


def _fill(url: str, rollouts: int) -> float:
    started = time.perf_counter()
    params = {"rollouts": rollouts, "versions": rollouts // 64 + 1, "sample": EPISODES_WITH_STEPS}
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        for sql in FILL:
            named = sql.replace("%", "%%")
            for key in params:
                named = named.replace(f":{key}", f"%({key})s")
            conn.execute(named, params)
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def _pages(client: TestClient) -> dict[str, str]:
    """The URLs timed: each page, the rollouts table unfiltered, filtered and deep."""
    first = client.get("/dashboard/rollouts?limit=50&status=succeeded").text
    marker = 'href="/dashboard/rollouts/'
    rollout_id = first[first.index(marker) + len(marker) :].split('"', 1)[0]
    deep = client.get("/dashboard/rollouts?limit=200")
    for _ in range(20):  # 20 pages down: 4,000 rollouts older than the newest
        cursor = deep.text.split('id="next" ', 1)[0].rsplit('href="', 1)[1].split('"', 1)[0]
        deep = client.get(cursor.replace("&amp;", "&"))
    compare_goal = client.get(f"/dashboard/rollouts/{rollout_id}").text
    compare = compare_goal.split('id="compare" href="', 1)[1].split('"', 1)[0]
    return {
        "overview": "/dashboard",
        "rollouts, first page (50)": "/dashboard/rollouts",
        "rollouts, version + success filter": "/dashboard/rollouts?version=3&success=yes",
        "rollouts, split + goal text filter": "/dashboard/rollouts?split=test&q=blue+cotton",
        "rollouts, failure kind filter": "/dashboard/rollouts?failure=infrastructure",
        "rollouts, reward range filter": "/dashboard/rollouts?reward_min=0.2&reward_max=0.4",
        "rollouts, 21st page of 200": cursor.replace("&amp;", "&"),
        "episode (6 steps, 6 LLM calls)": f"/dashboard/rollouts/{rollout_id}",
        "compare": compare.replace("&amp;", "&"),
    }


def measure(server_url: str, redis_url: str, rollouts: int, repeat: int) -> None:
    with scratch_database(server_url, "wsrl_bench_dashboard") as url:
        migrate.upgrade(url)
        fill_s = _fill(url, rollouts)
        settings = Settings(_env_file=None, database_url=url, redis_url=redis_url, api_token=TOKEN)
        with TestClient(create_app(settings)) as client:
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            pages = _pages(client)
            print(f"\n{rollouts:,} rollouts (filled in {fill_s:.0f} s); ms per page:")
            for label, path in pages.items():
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    answer = client.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    assert answer.status_code == 200, (path, answer.status_code)
                times.sort()
                p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
                print(f"  {label:40s} p50 {statistics.median(times):7.1f}  p95 {p95:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--database-url", help="a server to make the scratch database on")
    parser.add_argument("--redis-url", help="Redis the app connects to (nothing is written)")
    args = parser.parse_args()
    settings = get_settings()
    server = args.database_url or settings.resolved_database_url()
    redis_url = args.redis_url or settings.resolved_redis_url()
    for size in args.rollouts:
        measure(server, redis_url, size, args.repeat)


if __name__ == "__main__":
    main()
