"""A throwaway PostgreSQL server for the tests: a new cluster in a temporary directory, reachable only
through a unix socket in that directory, run by an unprivileged user, stopped by its process id.

CI (``.ci/run``) and a developer start one the same way; the tests find it in ``$SPECSTEER_TEST_POSTGRES_URL``::

    .venv/bin/python tests/postgres_for_tests.py installed             # exit status 1: not installed
    DIR=$(mktemp -d /tmp/specsteer-pg.XXXXXX)
    eval "$(.venv/bin/python tests/postgres_for_tests.py start "$DIR")"   # exports the URL, logs the version
    .venv/bin/python -m pytest tests/storage
    .venv/bin/python tests/postgres_for_tests.py stop "$DIR"              # by its pid; removes DIR

Without that variable, ``tests/conftest.py`` starts one itself for the session when the server's programs
are installed (Debian: ``apt-get install postgresql``). Standard library only: it runs before the tests'
environment is imported. initdb refuses to run as root, so root runs the server as the ``postgres`` user
(Debian's package creates it), or ``nobody``; the directory must be one that user can reach (``mktemp -d``
under /tmp is).
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "SPECSTEER_TEST_POSTGRES_URL"
# Set by CI: a missing server or driver fails the PostgreSQL tests instead of skipping them.
REQUIRED_ENV = "SPECSTEER_REQUIRE_POSTGRES"
SUPERUSER = "postgres"  # the cluster's superuser (a database role, whoever runs the server)
STOP_WAIT_S = 30.0
# A test server: durability costs time and protects nothing here.
SERVER_SETTINGS = ("listen_addresses=", "fsync=off", "synchronous_commit=off", "full_page_writes=off")


@dataclass(frozen=True)
class Server:
    """A running test server: its directory (socket, cluster, log), process id, URL and version."""

    directory: Path
    pid: int
    url: str
    version: str


def required() -> bool:
    return os.environ.get(REQUIRED_ENV, "").strip().lower() in ("1", "true", "yes")


def programs() -> Path | None:
    """The directory holding initdb, pg_ctl and psql: the one ``initdb`` on PATH comes from, else the newest
    of Debian's /usr/lib/postgresql/*/bin (Debian keeps them off PATH); None when not installed."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(Path(path).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def _server_user() -> str | None:
    """Who runs the server: None for the current user, or an unprivileged one when that is root."""
    if os.geteuid() != 0:
        return None
    for name in (SUPERUSER, "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists to run the server")


def _run(command: list[str], user: str | None) -> str:
    as_user = ["runuser", "-u", user, "--", *command] if user else command
    done = subprocess.run(as_user, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done.stdout


def new_directory() -> str:
    """A new temporary directory for a server: under /tmp when root runs it as another user, who must reach it
    (a $TMPDIR under /root would not do)."""
    return tempfile.mkdtemp(prefix="specsteer-pg.", dir="/tmp" if os.geteuid() == 0 else None)


def url_of(directory: Path) -> str:
    """The URL of the server whose socket is in ``directory`` (its maintenance database ``postgres``)."""
    return f"postgresql://{SUPERUSER}@/postgres?host={directory}"


def _pid(cluster: Path) -> int:
    # postmaster.pid's first line is the server's process id.
    return int((cluster / "postmaster.pid").read_text().splitlines()[0])


def start(directory: str | Path) -> Server:
    """initdb a cluster in ``directory``/cluster and start it on a socket in ``directory``; wait until it
    answers. The directory must exist and be empty except for what an earlier ``stop`` left."""
    bin_dir = programs()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin)")
    root = Path(directory).resolve()
    cluster, log = root / "cluster", root / "server.log"
    user = _server_user()
    if user:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    os.chmod(root, 0o700)
    _run(
        [str(bin_dir / "initdb"), "-D", str(cluster), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C"], user
    )
    options = " ".join(f"-c {setting}" for setting in SERVER_SETTINGS) + f" -k {shlex.quote(str(root))}"
    try:
        _run(
            [str(bin_dir / "pg_ctl"), "-D", str(cluster), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
            user,
        )
    except RuntimeError as error:
        said = log.read_text(errors="replace").strip().splitlines()[-5:] if log.is_file() else []
        raise RuntimeError("\n".join([str(error), *said])) from None
    version = _run(
        [str(bin_dir / "psql"), "-h", str(root), "-U", SUPERUSER, "-d", "postgres", "-Atc", "SELECT version()"], user
    )
    return Server(root, _pid(cluster), url_of(root), version.strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(directory: str | Path) -> int | None:
    """Stop the server of ``directory`` by its process id (SIGINT: PostgreSQL's fast shutdown, which ends
    open sessions), wait for it to exit, and remove the directory; the pid, or None if none was running."""
    root = Path(directory).resolve()
    pid_file = root / "cluster" / "postmaster.pid"
    pid = _pid(pid_file.parent) if pid_file.is_file() else None
    if pid is not None:
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_WAIT_S

        def running() -> bool:  # the server removes its pid file as it exits (it may stay a zombie a while)
            return pid_file.exists() and _alive(pid)

        while running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if running():
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown: a test server has nothing to keep
    shutil.rmtree(root, ignore_errors=True)
    return pid


def main(argv: list[str]) -> int:
    if argv == ["installed"]:
        found = programs()
        print(f"PostgreSQL's programs: {found or 'not installed'}", file=sys.stderr)
        return 0 if found else 1
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(f"usage: {Path(__file__).name} installed | start DIRECTORY | stop DIRECTORY", file=sys.stderr)
        return 2
    command, directory = argv
    if command == "stop":
        pid = stop(directory)
        print(
            f"PostgreSQL for the tests: stopped pid {pid}" if pid else "PostgreSQL for the tests: none was running",
            file=sys.stderr,
        )
        return 0
    server = start(directory)
    print(
        f"PostgreSQL for the tests: {server.version}; pid {server.pid}, socket in {server.directory}", file=sys.stderr
    )
    print(f"export {URL_ENV}={shlex.quote(server.url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
