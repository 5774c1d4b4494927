"""The one place that owns database engines and sessions.

Every other module asks this one for a session (`session_scope`) and never builds
an engine itself, so the SQLite settings below hold for every connection:

* WAL journal mode: readers never block the writer and the writer never blocks
  readers, which is what lets several annotators and an evaluation batch write
  at once;
* ``foreign_keys=ON``: SQLite ignores foreign keys unless asked, per connection;
* ``busy_timeout``: a writer that finds the database locked waits instead of
  failing at once;
* ``check_same_thread=False``: Gradio serves requests from a thread pool, and a
  pooled connection may be used by a thread other than the one that opened it
  (never by two at the same time).

PostgreSQL works by setting ``DATABASE_URL`` (``postgresql://`` or ``postgres://``: psycopg 3, pinned in
requirements.txt, or psycopg2 if that is what is installed; its driver is imported only when such a URL
is used), and is tested as SQLite is (tests/conftest.py's ``db_url``); other databases SQLAlchemy knows
are untested. A bare path (no ``scheme://``) is a SQLite file. Without a URL, the SQLite file is in
:func:`data_dir`, which on a Hugging Face Space with persistent storage is on that storage.

A SQLite file can also be opened for reading only (:func:`read_only_url`): none of the settings above is
applied, no table is created, and a write fails; that is how the bundled example runs are read.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import quote, unquote

from sqlalchemy import CursorResult, Engine, MetaData, create_engine, event, inspect, make_url, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateColumn

from specsteer.protocol.exposure import SPACE_ENV

log = logging.getLogger(__name__)

DATABASE_URL_ENV = "DATABASE_URL"
DATA_DIR_ENV = "SPECSTEER_DATA_DIR"
DB_FILENAME = "specsteer.db"
BUSY_TIMEOUT_MS = 30_000
SPACE_STORAGE = Path("/data")  # where a Hugging Face Space's persistent storage is mounted

_LOCK = threading.RLock()
_ENGINES: dict[str, Engine] = {}
_SESSION_FACTORIES: dict[str, sessionmaker[Session]] = {}
_INITIALISED: set[str] = set()

P = ParamSpec("P")
T = TypeVar("T")


# --------------------------------------------------------------------------- URLs


def space_storage() -> Path | None:
    """:data:`SPACE_STORAGE` where this is a Hugging Face Space whose persistent storage is mounted there (and
    writable), else None. A Space's own disk is emptied when it restarts; that mount is kept
    (https://huggingface.co/docs/hub/spaces-storage)."""
    if not os.environ.get(SPACE_ENV) or not os.path.ismount(SPACE_STORAGE):
        return None
    return SPACE_STORAGE if os.access(SPACE_STORAGE, os.W_OK) else None


def data_dir() -> Path:
    """Directory for the default SQLite file (and uploads): ``$SPECSTEER_DATA_DIR``; else, on a Space with
    persistent storage, ``/data/specsteer``; else ``./data``."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured)
    persistent = space_storage()
    return persistent / "specsteer" if persistent is not None else Path("data")


def database_url() -> str:
    """``$DATABASE_URL`` if set, else a SQLite file in :func:`data_dir` (created here)."""
    configured = os.environ.get(DATABASE_URL_ENV, "").strip()
    if configured:
        return normalise_url(configured)
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(directory / DB_FILENAME).resolve()}"


def postgresql_driver() -> str | None:
    """The installed PostgreSQL driver SQLAlchemy should use: psycopg (3, requirements.txt), else psycopg2;
    None when neither is installed (found without importing it)."""
    for module, driver in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return driver
    return None


def normalise_url(url: str) -> str:
    """A URL as given (``DATABASE_URL``, ``--database``) -> one SQLAlchemy opens: a bare path is a SQLite
    file; ``postgres://`` and ``postgresql://`` name the installed driver (a URL naming one is kept)."""
    if "://" not in url:
        # A bare path ("data/grid.db") names a SQLite file, as people type it after --database.
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    scheme, rest = url.split("://", 1)
    # Hosting providers hand out "postgres://", which SQLAlchemy no longer accepts; plain "postgresql://"
    # means psycopg2 to SQLAlchemy, which requirements.txt does not install.
    if scheme in ("postgres", "postgresql"):
        driver = postgresql_driver()
        return f"postgresql+{driver}://{rest}" if driver else f"postgresql://{rest}"
    return url


def _is_memory_sqlite(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or (url.query.get("mode") == "memory")


def _is_read_only(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and (url.query.get("mode") == "ro" or "immutable" in url.query)


def _sqlite_file(url: URL) -> Path:
    # A URI filename ("file:/path?mode=ro", read_only_url) names its file percent-encoded after "file:".
    database = url.database or ""
    if database.startswith("file:"):
        return Path(unquote(database[len("file:") :]))
    return Path(database).expanduser()


def read_only_url(target: str | Path | None = None, *, immutable: bool = False) -> str:
    """The URL that opens ``target`` (a URL or a bare path; default :func:`database_url`) for reading only.

    A SQLite file opens in SQLite's read-only mode: nothing is created or changed (no journal mode, no
    table), and a write fails. ``immutable`` also promises SQLite that nobody changes the file, so it takes
    no lock and needs no ``-wal``/``-shm`` beside it: what a file on a read-only filesystem (an image, a
    Space) needs. Any other database's URL is returned as it is."""
    url = _engine_key(str(target) if target is not None else None)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or _is_memory_sqlite(parsed) or _is_read_only(parsed):
        return url
    query = {"mode": "ro", **({"immutable": "1"} if immutable else {}), "uri": "true"}
    # SQLite reads the name after "file:" percent-encoded; the URL encodes it once more for SQLAlchemy.
    database = "file:" + quote(str(_sqlite_file(parsed).resolve()))
    return URL.create("sqlite", database=database, query=query).render_as_string(hide_password=False)


def missing_sqlite_file(url: str | None = None) -> str | None:
    """The file a SQLite ``url`` (default :func:`database_url`) names when it is not there (a reader that
    connected would create it empty), or None: a read-only command refuses it instead."""
    parsed = make_url(_engine_key(url))
    if parsed.get_backend_name() != "sqlite" or _is_memory_sqlite(parsed):
        return None
    database = _sqlite_file(parsed)
    return None if database.is_file() else str(database)


# ------------------------------------------------------------------------ engines


def engine_options(url: str) -> dict[str, Any]:
    """Keyword arguments for ``create_engine`` (pure, so it can be tested without a driver)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # Server databases: drop connections the server closed while the app idled.
        return {"pool_pre_ping": True}
    options: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}
    if _is_memory_sqlite(parsed):
        # Each new connection to ":memory:" would be a new, empty database: share one.
        options["poolclass"] = StaticPool
    return options


def _apply_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first, so that switching to WAL waits for other processes.
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        # With WAL, NORMAL stays consistent after a crash and avoids an fsync per commit.
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    read_only = _is_read_only(parsed)
    if parsed.get_backend_name() == "sqlite" and not _is_memory_sqlite(parsed) and not read_only:
        _sqlite_file(parsed).resolve().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **engine_options(url))
    if parsed.get_backend_name() == "sqlite" and not read_only:  # a read-only file keeps its own settings
        event.listen(engine, "connect", _apply_sqlite_pragmas)
    return engine


def _engine_key(url: str | None) -> str:
    return normalise_url(url) if url else database_url()


def get_engine(url: str | None = None) -> Engine:
    """The process-wide engine for ``url`` (default :func:`database_url`), created once."""
    key = _engine_key(url)
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _create_engine(key)
            _ENGINES[key] = engine
            _SESSION_FACTORIES[key] = sessionmaker(bind=engine, expire_on_commit=False)
        return engine


def add_missing_columns(engine: Engine, metadata: MetaData) -> list[str]:
    """Add to existing tables the columns declared since they were made (``table.column`` for each added).

    ``create_all`` makes missing tables but never touches existing ones, so a database made by an earlier
    version would lack a column added since, and every query naming it would fail. Such a column must say what
    its old rows hold (nullable, or a server default). Two processes may both try: the one that loses finds
    the column there and goes on.
    """
    added = []
    existing = set(inspect(engine).get_table_names())
    for table in metadata.sorted_tables:
        if table.name not in existing:
            continue
        present = {column["name"] for column in inspect(engine).get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            if not column.nullable and column.server_default is None:
                raise RuntimeError(f"{table.name}.{column.name} was added without a value for existing rows")
            ddl = CreateColumn(column).compile(dialect=engine.dialect)
            try:
                with engine.begin() as connection:
                    connection.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {ddl}"))
            except DBAPIError:
                if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                    raise
            added.append(f"{table.name}.{column.name}")
    return added


def init_db(url: str | None = None) -> Engine:
    """Create every table that is missing, and the columns added since an existing one was made
    (idempotent, safe from several processes)."""
    from storage.models import Base  # here, not at import time: models never import db

    key = _engine_key(url)
    engine = get_engine(key)
    with _LOCK:
        if key in _INITIALISED or _is_read_only(make_url(key)):  # nothing is created in a read-only file
            return engine
        for attempt in range(5):
            try:
                Base.metadata.create_all(engine)
                break
            except OperationalError as error:
                # Two processes may both see a table missing; the loser sees "already exists".
                if attempt == 4 or not ("already exists" in str(error) or is_locked_error(error)):
                    raise
                time.sleep(0.05 * (attempt + 1))
        for column in add_missing_columns(engine, Base.metadata):
            log.info("database %s: added the column %s", engine.url.render_as_string(), column)
        _INITIALISED.add(key)
    return engine


def reset_engines() -> None:
    """Dispose every engine and forget them (tests; simulates an app restart)."""
    with _LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()
        _SESSION_FACTORIES.clear()
        _INITIALISED.clear()


def _forget_engines_after_fork() -> None:
    # A forked child must not reuse the parent's pooled SQLite connections; it
    # drops them without closing them (they still belong to the parent). The
    # lock is replaced because another parent thread may have held it at fork.
    global _LOCK
    _LOCK = threading.RLock()
    for engine in _ENGINES.values():
        engine.dispose(close=False)
    _ENGINES.clear()
    _SESSION_FACTORIES.clear()
    _INITIALISED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_engines_after_fork)


# ----------------------------------------------------------------------- sessions


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A short session: commit on success, roll back on error, always close.

    Tables are created on first use of a URL, so callers need not remember
    :func:`init_db`. Keep the body short: a SQLite write lock is held from the
    first write until the commit.
    """
    key = _engine_key(url)
    init_db(key)
    with _LOCK:
        factory = _SESSION_FACTORIES[key]
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def insert_unless_present(session: Session, model: Any, values: dict[str, Any], unique: tuple[str, ...]) -> bool:
    """Insert one row of ``model`` unless a row with the same ``unique`` columns (a unique constraint's) is
    there; True when it went in. Never fails on the duplicate and never ends the transaction, so that workers
    racing to store the same row store it once."""
    dialect = session.get_bind().dialect
    if dialect.name in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect.name == "sqlite" else postgresql.insert
        statement = insert(model).values(**values).on_conflict_do_nothing(index_elements=list(unique))
        if dialect.insert_returning:
            # The row it returns says whether it went in. The row count cannot: where SQLAlchemy adds
            # RETURNING by itself for the new id (PostgreSQL), it reads -1 whether the row went in or not.
            return session.execute(statement.returning(model.id)).first() is not None
        result = cast(CursorResult[Any], session.execute(statement))  # SQLite before 3.35: no RETURNING
        return result.rowcount == 1
    # Other databases: a savepoint lets the duplicate fail without ending the transaction.
    try:
        with session.begin_nested():
            session.add(model(**values))
        return True
    except IntegrityError:
        return False


# -------------------------------------------------------------------------- retry


def is_locked_error(error: BaseException) -> bool:
    """True for SQLite's transient "database is locked/busy" errors."""
    message = str(getattr(error, "orig", error)).lower()
    return "database is locked" in message or "database is busy" in message or "database table is locked" in message


def retry_on_locked(attempts: int = 3, base_delay: float = 0.05) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Re-run a whole unit of work when SQLite reports a lock it could not wait out.

    busy_timeout handles ordinary waiting; this covers the cases SQLite refuses to
    wait for (e.g. a read transaction that must be upgraded to a write). The
    decorated function must open its own session, so a retry starts afresh.
    """

    def decorate(function: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            for attempt in range(1, attempts + 1):
                try:
                    return function(*args, **kwargs)
                except OperationalError as error:
                    if attempt == attempts or not is_locked_error(error):
                        raise
                    delay = base_delay * 2 ** (attempt - 1) * (1 + random.random())
                    log.warning("%s: database locked, retry %d in %.2fs", function.__name__, attempt, delay)
                    time.sleep(delay)
            raise AssertionError("unreachable")

        return wrapper

    return decorate
