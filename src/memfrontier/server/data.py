"""Where ``memfrontier serve`` and ``memfrontier keys`` keep their data, from the same two options
(``--data-dir DIR``, ``--store``), so the admin commands always reach the database the server uses:

=====================================  ===========================================================
``--store`` not given (the default)    the embedded PostgreSQL server of ``DIR/pg`` (started by the
                                       command, or joined when already running), database
                                       ``memfrontier``: the store, the keys and the usage totals;
                                       view files (banks, graph index) in ``DIR/views``
``--store postgresql://...``           that server: the store, the keys and the usage totals in
                                       that database
``--store PATH`` (a directory)         the SQLite store at ``PATH``; keys and usage in the SQLite
                                       file ``DIR/keys.db``
=====================================  ===========================================================

The embedded server is shared (:class:`~memfrontier.store.embedded_pg.EmbeddedPostgres`):
``memfrontier keys create`` while ``serve`` runs joins the running server and leaves it running;
run alone, it starts the server for the duration of the command and stops it afterwards. The last
process that uses it stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.files import private_dir
from ..store.embedded_pg import EmbeddedPostgres
from ..store.postgres import is_postgres_url, redact_url
from ..store.sqlite_schema import DB_NAME


@dataclass(frozen=True)
class ServiceData:
    """The locations one service uses: ``store`` (a directory or a URL), ``keys`` (a file or a
    URL), ``view_dir`` (a PostgreSQL store's view files; None for the store's default), and
    ``description`` (where the data live, for the operator)."""

    store: str
    keys: str
    view_dir: str | None
    description: str


@contextmanager
def service_data(data_dir: str | Path, store: str | None = None) -> Iterator[ServiceData]:
    """The service's data locations for ``--data-dir data_dir`` and ``--store store`` (see the
    module docstring); with the embedded default, the embedded server runs for the duration of
    the ``with`` block (joined when already running, stopped at the end by its last user).

    Raises:
        ValueError: with the default, ``data_dir`` holds a SQLite store (``DIR/store``) and no
            embedded database (it would be silently left out: serve it with ``--store DIR/store``).
        StoreError: the embedded server cannot be started.
    """
    data_dir = Path(data_dir)
    if store is not None and is_postgres_url(store):
        yield ServiceData(store, store, None, f"store, keys and usage: PostgreSQL {redact_url(store)}")
        return
    if store is not None:
        keys = data_dir / "keys.db"
        yield ServiceData(str(store), str(keys), None, f"store: SQLite {store}; keys and usage: {keys}")
        return
    legacy = data_dir / "store"
    if (legacy / DB_NAME).is_file() and not (data_dir / "pg").exists():
        raise ValueError(
            f"{data_dir} holds a SQLite store ({legacy}) but no embedded PostgreSQL database; "
            f"serve that store with --store {legacy} (its keys stay in {data_dir / 'keys.db'})"
        )
    private_dir(data_dir)
    with EmbeddedPostgres(data_dir / "pg") as pg:
        views = data_dir / "views"
        yield ServiceData(
            pg.url,
            pg.url,
            str(views),
            f"store, keys and usage: embedded PostgreSQL, data in {pg.pgdata} (log: {pg.pgdata / 'log'}), "
            f"views in {views}",
        )


__all__ = ["ServiceData", "service_data"]
