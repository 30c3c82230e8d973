"""Compare column representations of token ids and logprobs: Postgres arrays vs packed bytea.

For each representation, writes ``--rows`` LLM calls whose response has ``--tokens``
tokens with logprobs, then loads them back into Python lists (what the trainer does),
and prints write/read times and bytes on disk. This measurement chose the packed
``bytea`` columns of :mod:`app.db.types`.

    python benchmarks/token_storage.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import random
import time
import uuid

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, func, select
from sqlalchemy.dialects.postgresql import ARRAY, REAL

from app.config import get_settings
from app.db.types import Logprobs, TokenIds


def _tables(metadata: MetaData, suffix: str) -> dict[str, Table]:
    return {
        "int4[]/float4[]": Table(
            f"bench_tok_array_{suffix}",
            metadata,
            Column("id", Integer, primary_key=True),
            Column("token_ids", ARRAY(Integer)),
            Column("logprobs", ARRAY(REAL)),
        ),
        "bytea (packed <i4/<f4)": Table(
            f"bench_tok_bytea_{suffix}",
            metadata,
            Column("id", Integer, primary_key=True),
            Column("token_ids", TokenIds),
            Column("logprobs", Logprobs),
        ),
    }


def run(database_url: str, rows: int, tokens: int, repeats: int) -> list[dict[str, float | str]]:
    engine = create_engine(database_url)
    metadata = MetaData()
    tables = _tables(metadata, uuid.uuid4().hex[:8])
    rng = random.Random(0)
    data = [
        {
            "id": i,
            "token_ids": [rng.randrange(0, 151_000) for _ in range(tokens)],
            "logprobs": [-rng.random() * 10 for _ in range(tokens)],
        }
        for i in range(rows)
    ]
    results: list[dict[str, float | str]] = []
    metadata.create_all(engine)
    try:
        for name, table in tables.items():
            start = time.perf_counter()
            with engine.begin() as conn:
                conn.execute(table.insert(), data)
            write_s = time.perf_counter() - start
            read_times = []
            for _ in range(repeats):
                start = time.perf_counter()
                with engine.connect() as conn:
                    loaded = conn.execute(select(table.c.token_ids, table.c.logprobs)).all()
                assert len(loaded[0].token_ids) == tokens and isinstance(loaded[0].logprobs, list)
                read_times.append(time.perf_counter() - start)
            with engine.connect() as conn:
                size = conn.execute(select(func.pg_total_relation_size(table.name))).scalar_one()
                stored = conn.execute(
                    select(
                        func.avg(
                            func.pg_column_size(table.c.token_ids)
                            + func.pg_column_size(table.c.logprobs)
                        )
                    )
                ).scalar_one()
            results.append(
                {
                    "representation": name,
                    "write_ms_per_row": 1000 * write_s / rows,
                    "read_ms_per_row": 1000 * min(read_times) / rows,
                    "bytes_per_row": size / rows,
                    "stored_bytes_per_row": float(stored),
                }
            )
    finally:
        metadata.drop_all(engine)
        engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None, help="default: Settings' database")
    parser.add_argument("--rows", type=int, default=100, help="LLM calls written and read")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per response")
    parser.add_argument("--repeats", type=int, default=3, help="reads per representation (best)")
    args = parser.parse_args()
    url = args.database_url or get_settings().resolved_database_url()
    print(f"{args.rows} rows x {args.tokens} tokens (ids + logprobs) per representation")
    print(
        f"{'representation':<24} {'write ms/row':>13} {'read ms/row':>12} "
        f"{'column bytes':>13} {'table bytes/row':>16}"
    )
    for r in run(url, args.rows, args.tokens, args.repeats):
        print(
            f"{r['representation']:<24} {r['write_ms_per_row']:>13.2f} "
            f"{r['read_ms_per_row']:>12.2f} {r['stored_bytes_per_row']:>13.0f} "
            f"{r['bytes_per_row']:>16.0f}"
        )


if __name__ == "__main__":
    main()
