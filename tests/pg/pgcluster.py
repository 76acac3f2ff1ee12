"""Throwaway PostgreSQL 15 clusters for tally's tests (Python 3 standard library only).

Every cluster lives in a fresh temporary directory owned by the `postgres` OS user (PostgreSQL
refuses to run as root, and the tests run as root): <tmp>/data, a unix socket directory
<tmp>/sock and the server log <tmp>/server.log. It listens on 127.0.0.1 only, on a free TCP
port, with trust authentication for the `postgres` role (a throwaway cluster on loopback).
The binaries come from /usr/lib/postgresql/15/bin (Debian's postgresql-15), not from PATH.

    c = start_primary(fsync=False)            # a functional-test cluster
    create_database(c, "t1")
    c.uri("t1")                               # postgresql://postgres@127.0.0.1:P/t1?connect_timeout=2
    s = start_sync_standby(c)                 # pg_basebackup -R, synchronous_standby_names
    two_host_uri([c, s], "t1")                # ...127.0.0.1:P1,127.0.0.1:P2/t1?target_session_attrs=read-write...
    kill9(c); promote(s)                      # failover
    destroy(s); destroy(c)                    # or nothing: atexit destroys whatever is left

Every wait is bounded; every process started here is stopped by its PID (from postmaster.pid)
in destroy(), which atexit also runs for clusters still alive when the interpreter exits.

Environment:
  TALLY_PG_BIN    directory of initdb, pg_ctl, postgres, psql... (default /usr/lib/postgresql/15/bin)
  TALLY_PG_KEEP   if set, destroy() stops the servers but keeps the directories (post-mortems)

Run as a script for a smoke test: python3 tests/pg/pgcluster.py
"""

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

PG_BIN = os.environ.get("TALLY_PG_BIN", "/usr/lib/postgresql/15/bin")
PG_USER = "postgres"  # the OS user that runs the servers, and the database role the tests use
KEEP = bool(os.environ.get("TALLY_PG_KEEP"))
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
SQL_TIMEOUT_S = 60


class PgError(Exception):
    """A cluster operation failed; the message carries the command's output and the log tail."""


def _as_postgres(argv):
    """argv run as the postgres user when we are root (runuser), as it is otherwise."""
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_USER, "--"] + list(argv)
    return list(argv)


def _run(argv, timeout, what, env=None, check=True):
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise PgError("%s: no answer within %ss: %s\n%s" % (
            what, timeout, " ".join(argv), (e.stdout or b"").decode("utf-8", "replace")))
    out = r.stdout.decode("utf-8", "replace")
    if check and r.returncode != 0:
        raise PgError("%s failed (exit %d): %s\n%s" % (what, r.returncode, " ".join(argv), out))
    return r.returncode, out


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (start() retries on a clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_binaries():
    """Raises PgError naming what is missing (postgresql-15 not installed, not root...)."""
    for name in ("initdb", "pg_ctl", "postgres", "psql", "pg_basebackup"):
        if not os.access(os.path.join(PG_BIN, name), os.X_OK):
            raise PgError("%s/%s is missing: install postgresql-15 (make deps)" % (PG_BIN, name))
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(PG_USER)
        except KeyError:
            raise PgError("no %r OS user to run PostgreSQL as (install postgresql-15)" % PG_USER)


_live = []  # clusters not yet destroyed, for atexit
_live_lock = threading.Lock()


class Cluster:
    """One PostgreSQL server: its directory, port and (while running) postmaster PID."""

    def __init__(self, name="pg", fsync=False, settings=None, max_connections=200):
        check_binaries()
        self.name = name
        self.fsync = fsync
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self.tmp = tempfile.mkdtemp(prefix="tally-%s-" % name)
        os.chmod(self.tmp, 0o700)
        self.data = os.path.join(self.tmp, "data")
        self.sock = os.path.join(self.tmp, "sock")
        self.log = os.path.join(self.tmp, "server.log")
        os.mkdir(self.sock)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            for p in (self.tmp, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        self.port = None
        self.pid = None  # postmaster PID while we believe it runs
        self.children = []  # (pid, start time) of its children when it was killed
        self.destroyed = False
        with _live_lock:
            _live.append(self)

    # ---- addresses ----------------------------------------------------------------------
    def uri(self, db="postgres", **params):
        """libpq URI of this server (TCP on 127.0.0.1)."""
        return _uri([self], db, params)

    def psql_argv(self, db="postgres"):
        return [os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, "-d", db]

    def __repr__(self):
        return "<Cluster %s port=%s pid=%s %s>" % (self.name, self.port, self.pid, self.tmp)

    # ---- configuration ------------------------------------------------------------------
    def _conf_lines(self):
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "'%s'" % self.sock,
            "max_connections": str(self.max_connections),
            "shared_buffers": "'32MB'",
            "fsync": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "synchronous_commit": "on",
            "wal_level": "replica",
            "max_wal_senders": "10",
            "wal_keep_size": "'128MB'",
            "max_wal_size": "'256MB'",
            "checkpoint_timeout": "'5min'",
            "hot_standby": "on",
            "cluster_name": "'%s'" % self.name,
            "logging_collector": "off",
            "log_line_prefix": "'%m [%p] %q%a '",
            "log_min_messages": "warning",
            "log_min_error_statement": "error",
            "dynamic_shared_memory_type": "posix",
            "max_locks_per_transaction": "128",
        }
        for k, v in self.settings.items():
            conf[k] = v
        return ["%s = %s" % (k, v) for k, v in conf.items()]

    def _write_conf(self):
        path = os.path.join(self.data, "postgresql.conf")
        with open(path, "a") as f:
            f.write("\n# tally tests (pgcluster.py)\n" + "\n".join(self._conf_lines()) + "\n")

    def initdb(self):
        _run(_as_postgres([os.path.join(PG_BIN, "initdb"), "-D", self.data, "-A", "trust",
                           "-U", PG_USER, "-E", "UTF8", "--no-locale", "--no-sync"]),
             START_TIMEOUT_S, "initdb")

    # ---- process control ----------------------------------------------------------------
    def start(self, attempts=3):
        """Start on a free port (a fresh one per attempt: another process may take one between
        free_port() and the bind). Waits until it accepts connections."""
        last = None
        for _ in range(attempts):
            if self.port is None or last is not None:
                self.port = free_port()
                self._write_conf()  # a later line wins: the new port
            rc, out = _run(_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data,
                                         "-l", self.log, "-w", "-t", str(START_TIMEOUT_S),
                                         "start"]), START_TIMEOUT_S + 10, "pg_ctl start",
                           check=False)
            if rc == 0:
                self.pid = self.read_pid()
                self.wait_ready()
                return self
            last = "%s\n--- server log ---\n%s" % (out, self.log_tail())
            self._stop_if_running()
            if "could not bind" not in last and "already in use" not in last:
                break
        raise PgError("%s: pg_ctl start failed:\n%s" % (self.name, last))

    def read_pid(self):
        """The postmaster PID from postmaster.pid (None when absent)."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def alive(self):
        return self.pid is not None and _pid_alive(self.pid)

    def wait_ready(self, timeout=START_TIMEOUT_S):
        """Until a query answers (a standby answers read-only queries: hot_standby)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            rc, out = _run(self.psql_argv() + ["-c", "SELECT 1"], 10, "psql", check=False)
            if rc == 0:
                return
            last = out
            time.sleep(0.1)
        raise PgError("%s: no query answered within %ss: %s\n%s" % (self.name, timeout, last,
                                                                     self.log_tail()))

    def stop(self, mode="fast"):
        """pg_ctl stop (smart|fast|immediate); a server already gone is fine."""
        if self.pid is None or not _pid_alive(self.pid):
            self.pid = None
            return
        rc, out = _run(_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m", mode,
                                     "-w", "-t", str(STOP_TIMEOUT_S), "stop"]),
                       STOP_TIMEOUT_S + 10, "pg_ctl stop", check=False)
        if rc != 0 and _pid_alive(self.pid):
            _kill_tree(self.pid)
        self.pid = None

    def _stop_if_running(self):
        pid = self.read_pid()
        if pid is not None and _pid_alive(pid):
            self.pid = pid
            self.stop("immediate")

    def kill9(self, children_grace_s=5.0):
        """SIGKILL of the postmaster by the PID in postmaster.pid, as a crash would. Its
        backends notice the postmaster's death and exit by themselves; any still there after
        children_grace_s are SIGKILLed too (by their PIDs, recorded before the kill)."""
        pid = self.read_pid() or self.pid
        if pid is None or not _pid_alive(pid):
            raise PgError("%s: no running postmaster to kill" % self.name)
        kids = _children(pid)
        os.kill(pid, signal.SIGKILL)
        _wait_gone([(pid, _start_time(pid))], 10)
        _wait_gone(kids, children_grace_s)
        for kpid, st in kids:
            if _same_process(kpid, st):
                try:
                    os.kill(kpid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        _wait_gone(kids, 5)
        self.pid = None

    def log_tail(self, n=3000):
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "(no server log)"

    # ---- SQL ----------------------------------------------------------------------------
    def sql(self, statement, db="postgres", timeout=SQL_TIMEOUT_S):
        """Runs statement(s) with psql; returns the unaligned, tuples-only output (rows on
        lines, columns separated by |)."""
        rc, out = _run(self.psql_argv(db) + ["-c", statement], timeout,
                       "%s: psql %r" % (self.name, statement[:80]))
        return out.strip()

    def destroy(self):
        """Stops the server (immediate: a throwaway) and removes its directory. Never raises."""
        if self.destroyed:
            return
        self.destroyed = True
        try:
            if self.pid is None:
                self.pid = self.read_pid()
            if self.pid is not None and _pid_alive(self.pid):
                self.stop("immediate")
        except Exception:
            if self.pid is not None:
                _kill_tree(self.pid)
        for kpid, st in self.children:
            if _same_process(kpid, st):
                try:
                    os.kill(kpid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not KEEP:
            shutil.rmtree(self.tmp, ignore_errors=True)
        with _live_lock:
            if self in _live:
                _live.remove(self)


# ---- processes, by PID ------------------------------------------------------------------
def _start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _same_process(pid, start_time):
    st = _start_time(pid)
    if st is None or st != start_time:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def _pid_alive(pid):
    return _start_time(pid) is not None and _same_process(pid, _start_time(pid))


def _children(ppid):
    """(pid, start time) of the direct children of ppid."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == ppid:
            out.append((int(name), fields[19]))
    return out


def _wait_gone(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_same_process(p, st) for p, st in procs if st is not None):
            return True
        time.sleep(0.05)
    return False


def _kill_tree(pid):
    kids = _children(pid)
    for p in [pid] + [k for k, _ in kids]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _wait_gone([(pid, _start_time(pid))] + kids, 10)


# ---- the functions the tests call -------------------------------------------------------
def _uri(clusters, db, params):
    hosts = ",".join("127.0.0.1:%d" % c.port for c in clusters)
    q = {"connect_timeout": "2"}
    q.update({k: str(v) for k, v in params.items()})
    return "postgresql://%s@%s/%s?%s" % (PG_USER, hosts, db,
                                         "&".join("%s=%s" % kv for kv in q.items()))


def two_host_uri(clusters, db, **params):
    """postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=read-write&connect_timeout=2"""
    p = {"target_session_attrs": "read-write"}
    p.update(params)
    return _uri(clusters, db, p)


def start_primary(name="primary", fsync=False, settings=None, max_connections=200):
    """initdb + start. fsync=False for functional tests (fast, not crash-safe); fsync=True
    for durability and failover tests."""
    c = Cluster(name, fsync=fsync, settings=settings, max_connections=max_connections)
    try:
        c.initdb()
        c.start()
    except BaseException:
        c.destroy()
        raise
    return c


_db_counter = iter(range(1, 1 << 30))


def create_database(cluster, name=None):
    """CREATE DATABASE (a fresh name when none is given); returns the name."""
    if name is None:
        name = "t%d_%d" % (os.getpid(), next(_db_counter))
    cluster.sql('CREATE DATABASE "%s"' % name)
    return name


def drop_database(cluster, name):
    cluster.sql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)


def start_sync_standby(primary, name="standby", wait_sync_s=30):
    """A streaming-replication standby made with pg_basebackup -R, then named in the primary's
    synchronous_standby_names, so every commit on the primary waits for it. Returns it once
    pg_stat_replication shows it as sync."""
    s = Cluster(name, fsync=primary.fsync, settings=primary.settings,
                max_connections=primary.max_connections)
    try:
        conninfo = "host=127.0.0.1 port=%d user=%s application_name=%s" % (
            primary.port, PG_USER, name)
        _run(_as_postgres([os.path.join(PG_BIN, "pg_basebackup"), "-d", conninfo, "-D", s.data,
                           "-R", "-X", "stream", "-c", "fast", "--no-sync"]),
             START_TIMEOUT_S * 2, "pg_basebackup")
        s.start()
        primary.sql("""ALTER SYSTEM SET synchronous_standby_names = '"%s"'""" % name)
        primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + wait_sync_s
        while True:
            state = primary.sql("SELECT sync_state FROM pg_stat_replication "
                                "WHERE application_name = '%s'" % name)
            if state == "sync":
                break
            if time.monotonic() > deadline:
                raise PgError("%s: not a sync standby after %ss (state %r)\n%s" % (
                    name, wait_sync_s, state, s.log_tail()))
            time.sleep(0.1)
    except BaseException:
        s.destroy()
        raise
    return s


def promote(standby, reset_sync=True, timeout=START_TIMEOUT_S):
    """pg_ctl promote, wait until it accepts writes. A promoted standby keeps the
    synchronous_standby_names it inherited (its own commits would wait for a standby that
    does not exist): reset_sync clears it (ALTER SYSTEM RESET; pg_reload_conf())."""
    _run(_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", standby.data, "-w", "-t",
                       str(timeout), "promote"]), timeout + 10, "pg_ctl promote")
    deadline = time.monotonic() + timeout
    while standby.sql("SELECT pg_is_in_recovery()") != "f":
        if time.monotonic() > deadline:
            raise PgError("%s: still in recovery %ss after promote" % (standby.name, timeout))
        time.sleep(0.1)
    if reset_sync:
        standby.sql("ALTER SYSTEM RESET synchronous_standby_names")
        standby.sql("SELECT pg_reload_conf()")


def kill9(cluster):
    cluster.kill9()


def stop(cluster, mode="fast"):
    cluster.stop(mode)


def destroy(cluster):
    cluster.destroy()


def destroy_all():
    with _live_lock:
        clusters = list(_live)
    for c in reversed(clusters):  # standbys (made later) first
        c.destroy()


atexit.register(destroy_all)


# A SIGTERM (a CI timeout, `kill`) skips atexit: destroy the clusters, then die of it as
# before, unless the program installed its own handler.
def _sigterm(signum, frame):
    try:
        destroy_all()
    finally:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


if threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _sigterm)


if __name__ == "__main__":
    t0 = time.monotonic()
    p = start_primary(fsync=False)
    print("primary up in %.2fs: %r" % (time.monotonic() - t0, p))
    t1 = time.monotonic()
    db = create_database(p)
    print("CREATE DATABASE %s in %.3fs" % (db, time.monotonic() - t1))
    print("server_version:", p.sql("SHOW server_version", db), "fsync:", p.sql("SHOW fsync"))
    p.sql("CREATE TABLE t (k int primary key)", db)
    t2 = time.monotonic()
    s = start_sync_standby(p)
    print("sync standby up in %.2fs: %r" % (time.monotonic() - t2, s))
    p.sql("INSERT INTO t VALUES (1)", db)
    print("two-host uri:", two_host_uri([p, s], db))
    p.kill9()
    print("primary killed; alive:", p.alive())
    t3 = time.monotonic()
    promote(s)
    s.sql("INSERT INTO t VALUES (2)", db)  # would hang if synchronous_standby_names stayed
    print("promoted in %.2fs; rows on the new primary: %s" % (time.monotonic() - t3,
                                                              s.sql("SELECT count(*) FROM t", db)))
    destroy_all()
    print("destroyed; total %.2fs" % (time.monotonic() - t0))
