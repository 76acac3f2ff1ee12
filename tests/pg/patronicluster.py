"""PostgreSQL under Patroni for tally's tests: one etcd, and per cluster (per shard) a primary
and a synchronous standby, each under its own `patroni` (Python 3 standard library only).

Everything comes from Debian's packages: /usr/bin/etcd (etcd-server 3.4, the v3 API: Patroni's
`etcd3:` section), /usr/bin/patroni (run by Debian's /usr/bin/python3, whatever python3 runs the
tests) and PostgreSQL 15 (/usr/lib/postgresql/15/bin). Everything listens on 127.0.0.1 only,
on free TCP ports, and lives in fresh temporary directories. PostgreSQL refuses to run as root,
so when the tests run as root Patroni (and the PostgreSQL it starts) runs as the `postgres` OS
user, and the members' directories are chowned to it.

    etcd = start_etcd()
    c = start_cluster("shard0", etcd)        # leader + synchronous standby, fsync on
    c.create_database("t1")
    c.uri("t1")   # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/t1?target_session_attrs=read-write&...
    old = c.leader()
    old.kill9()                              # its patroni AND its postmaster: a machine lost
    new = c.wait_leader(exclude=old)         # Patroni promotes the synchronous standby
    c.destroy(); etcd.destroy()              # or nothing: atexit destroys whatever is left

start_cluster() can be called once per shard on one etcd (each cluster is its own Patroni
`scope`). The configuration it writes is the one docs/postgresql.md explains; the dynamic part
(bootstrap.dcs) by default: ttl 10, loop_wait 1, retry_timeout 4, synchronous_mode true,
primary_start_timeout 300 (Patroni's default: a postmaster that dies alone is restarted in
place, so a test that wants a failover kills the member's patroni with it, Member.kill9()).

Every wait is bounded; every process started here is stopped by its PID (the patroni and
etcd processes by the PIDs we started, the postmasters by postmaster.pid: Patroni starts them
detached) in destroy(), which atexit (and SIGTERM) also runs for whatever is still alive.

Environment:
  TALLY_PG_BIN        PostgreSQL's binaries (default /usr/lib/postgresql/15/bin)
  TALLY_PATRONI_BIN   the patroni script (default /usr/bin/patroni), run by TALLY_PATRONI_PYTHON
  TALLY_PATRONI_PYTHON  default /usr/bin/python3 (Debian's: Patroni's modules are there)
  TALLY_ETCD_BIN      default /usr/bin/etcd
  TALLY_PG_KEEP       if set, destroy() stops the processes but keeps the directories

Run as a script for a smoke test (a failover without tally): python3 tests/pg/patronicluster.py [N]
(N clusters on one etcd, the first one's primary killed while the others take writes).
"""

import atexit
import base64
import http.client
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pgcluster
from pgcluster import (PG_BIN, PG_USER, PgError, _children, _pid_alive, _same_process,
                       _start_time, _wait_gone, free_port)

PATRONI = os.environ.get("TALLY_PATRONI_BIN", "/usr/bin/patroni")
PATRONI_PYTHON = os.environ.get("TALLY_PATRONI_PYTHON", "/usr/bin/python3")
ETCD = os.environ.get("TALLY_ETCD_BIN", "/usr/bin/etcd")
KEEP = bool(os.environ.get("TALLY_PG_KEEP"))
ETCD_START_TIMEOUT_S = 30
CLUSTER_START_TIMEOUT_S = 120  # initdb, the leader, pg_basebackup, the standby streaming in sync
STOP_TIMEOUT_S = 20
REPLICATION_USER = "replicator"


class PortClash(PgError):
    """A member's port was taken between free_port() and its bind (start_cluster retries)."""


def check_binaries():
    """Raises PgError naming what is missing (make test-deps installs patroni and etcd-server)."""
    pgcluster.check_binaries()
    for path, pkg in ((PATRONI, "patroni"), (PATRONI_PYTHON, "python3"), (ETCD, "etcd-server")):
        if not os.access(path, os.X_OK):
            raise PgError("%s is missing: install %s (make test-deps)" % (path, pkg))


def _yaml_str(s):
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(str(s))


def _log_tail(path, n=4000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log at %s)" % path


def _signal(pid, start_time, sig):
    """Sends sig to pid if it is still the process that had start_time (never a reused PID)."""
    if pid is None or not _same_process(pid, start_time):
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _descendants(pid):
    """(pid, start time) of every process below pid (children, their children...)."""
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out.extend(kids)
        todo.extend(k for k, _ in kids)
    return out


_live = []  # etcds and clusters not yet destroyed, for atexit
_live_lock = threading.Lock()


def _register(obj):
    with _live_lock:
        _live.append(obj)


def _unregister(obj):
    with _live_lock:
        if obj in _live:
            _live.remove(obj)


# ---- etcd -------------------------------------------------------------------------------
class Etcd:
    """One etcd member (a cluster of one) on 127.0.0.1: client_port serves the v3 API."""

    def __init__(self, name="etcd"):
        check_binaries()
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="tally-%s-" % name)
        os.chmod(self.tmp, 0o700)
        self.data = os.path.join(self.tmp, "data")
        self.log = os.path.join(self.tmp, "etcd.log")
        self.client_port = self.peer_port = None
        self.proc = None
        self.start_time = None
        self.destroyed = False
        _register(self)

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def hosts(self):
        """host:port for Patroni's etcd3.hosts."""
        return "127.0.0.1:%d" % self.client_port

    def start(self, attempts=3):
        last = ""
        for _ in range(attempts):
            self.client_port, self.peer_port = free_port(), free_port()
            peer = "http://127.0.0.1:%d" % self.peer_port
            client = "http://127.0.0.1:%d" % self.client_port
            argv = [ETCD, "--name", self.name, "--data-dir", self.data,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", "%s=%s" % (self.name, peer),
                    "--initial-cluster-state", "new", "--initial-cluster-token", os.path.basename(self.tmp),
                    "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"]
            with open(self.log, "ab") as logf:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            self.start_time = _start_time(self.proc.pid)
            deadline = time.monotonic() + ETCD_START_TIMEOUT_S
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._healthy():
                    return self
                time.sleep(0.1)
            last = _log_tail(self.log)
            self.stop()
            shutil.rmtree(self.data, ignore_errors=True)
            if "address already in use" not in last:
                break
        raise PgError("etcd did not start within %ss:\n%s" % (ETCD_START_TIMEOUT_S, last))

    def _healthy(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=2)
            try:
                c.request("GET", "/health")
                r = c.getresponse()
                body = r.read()
            finally:
                c.close()
            return r.status == 200 and json.loads(body).get("health") == "true"
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def delete_prefix(self, prefix):
        """Deletes every key under prefix (the v3 API's JSON gateway); returns how many."""
        key = prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1])
        body = json.dumps({"key": base64.b64encode(key).decode(),
                           "range_end": base64.b64encode(end).decode()})
        c = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=5)
        try:
            c.request("POST", "/v3/kv/deleterange", body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            doc = json.loads(r.read() or b"{}")
        finally:
            c.close()
        if r.status != 200:
            raise PgError("etcd deleterange %s: %s %r" % (prefix, r.status, doc))
        return int(doc.get("deleted", 0))

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; by the PID we started."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def destroy(self):
        if self.destroyed:
            return
        self.destroyed = True
        try:
            self.stop()
        finally:
            if not KEEP:
                shutil.rmtree(self.tmp, ignore_errors=True)
            _unregister(self)


def start_etcd(name="etcd"):
    e = Etcd(name)
    try:
        e.start()
    except BaseException:
        e.destroy()
        raise
    return e


# ---- one PostgreSQL server under one patroni ---------------------------------------------
class Member:
    """One Patroni member: its patroni process (ours), the postmaster Patroni started (detached:
    found by postmaster.pid), its PostgreSQL port and its REST API port."""

    def __init__(self, cluster, name, port, api_port):
        self.cluster = cluster
        self.name = name
        self.port = port  # PostgreSQL (pgcluster's URI helpers take any object with .port)
        self.api_port = api_port
        self.tmp = tempfile.mkdtemp(prefix="tally-%s-" % name)
        os.chmod(self.tmp, 0o700)
        self.data = os.path.join(self.tmp, "data")
        self.sock = os.path.join(self.tmp, "sock")
        self.config = os.path.join(self.tmp, "patroni.yml")
        self.log = os.path.join(self.tmp, "patroni.log")  # patroni's and PostgreSQL's stderr
        os.mkdir(self.sock)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            for p in (self.tmp, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        self.proc = None  # the patroni process
        self.start_time = None
        self.killed = []  # (pid, start time) of processes left by kill9(), for destroy()

    def __repr__(self):
        return "<Member %s pg=%s api=%s patroni=%s postmaster=%s %s>" % (
            self.name, self.port, self.api_port, self.patroni_pid, self.postmaster_pid(), self.tmp)

    # ---- configuration --------------------------------------------------------------------
    def write_config(self, etcd_hosts, dcs):
        """patroni.yml: the local part (addresses, directories, credentials) and the bootstrap
        part (`dcs`, the cluster-wide settings Patroni writes into etcd at the first start)."""
        c = self.cluster
        lines = [
            "scope: %s" % _yaml_str(c.name),
            "namespace: %s" % _yaml_str(c.namespace),
            "name: %s" % _yaml_str(self.name),
            "log:",
            "  level: INFO",
            "restapi:",
            "  listen: 127.0.0.1:%d" % self.api_port,
            "  connect_address: 127.0.0.1:%d" % self.api_port,
            "etcd3:",
            "  hosts: %s" % _yaml_str(etcd_hosts),
            "watchdog:",
            "  mode: 'off'",
            "bootstrap:",
            "  dcs:",
        ]
        for k, v in dcs.items():
            if k != "parameters":
                lines.append("    %s: %s" % (k, json.dumps(v)))
        lines += ["    postgresql:", "      use_pg_rewind: false", "      parameters:"]
        for k, v in dcs["parameters"].items():
            lines.append("        %s: %s" % (k, _yaml_str(v)))
        lines += [
            "  initdb:",
            "    - encoding: UTF8",
            "    - no-locale",
            "    - auth: trust",
            "postgresql:",
            "  listen: 127.0.0.1:%d" % self.port,
            "  connect_address: 127.0.0.1:%d" % self.port,
            "  data_dir: %s" % _yaml_str(self.data),
            "  bin_dir: %s" % _yaml_str(PG_BIN),
            "  pgpass: %s" % _yaml_str(os.path.join(self.tmp, "pgpass")),
            "  authentication:",
            "    superuser:",
            "      username: %s" % PG_USER,
            "    replication:",
            "      username: %s" % REPLICATION_USER,
            "  pg_hba:",
            "    - local all all trust",
            "    - host all all 127.0.0.1/32 trust",
            "    - host replication %s 127.0.0.1/32 trust" % REPLICATION_USER,
            "  basebackup:",
            "    - checkpoint: fast",
            "  parameters:",
            "    unix_socket_directories: %s" % _yaml_str(self.sock),
            "    logging_collector: 'off'",
            "    log_min_messages: warning",
            "    log_line_prefix: '%m [%p] %q%a '",
        ]
        with open(self.config, "w") as f:
            f.write("# tally tests (tests/pg/patronicluster.py)\n" + "\n".join(lines) + "\n")
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            os.chown(self.config, pw.pw_uid, pw.pw_gid)

    # ---- processes -------------------------------------------------------------------------
    @property
    def patroni_pid(self):
        return self.proc.pid if self.proc is not None else None

    def start(self):
        """Starts patroni (as the postgres user when we are root); returns at once (the
        cluster waits for roles)."""
        kw = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        env = {"PATH": "/usr/bin:/bin", "HOME": self.tmp, "LANG": "C.UTF-8", "TZ": "UTC"}
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([PATRONI_PYTHON, PATRONI, self.config], cwd=self.tmp, env=env,
                                         stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, start_new_session=True, **kw)
        self.start_time = _start_time(self.proc.pid)

    def patroni_alive(self):
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def kill9(self, children_grace_s=5.0):
        """The member's machine lost: SIGKILL of its patroni, then of its postmaster (a
        postmaster killed alone is restarted in place by Patroni, no failover, until
        primary_start_timeout). Its backends notice the postmaster's death and exit; any still
        there after children_grace_s are SIGKILLed (by their recorded PIDs)."""
        if not self.patroni_alive():
            raise PgError("%s: no running patroni to kill" % self.name)
        patroni_kids = _descendants(self.proc.pid)
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None
        pm = self.postmaster_pid()
        pm_kids = []
        if pm is not None:
            pm_st = _start_time(pm)
            pm_kids = _children(pm)
            _signal(pm, pm_st, signal.SIGKILL)
            _wait_gone([(pm, pm_st)], 10)
        left = patroni_kids + pm_kids
        _wait_gone(left, children_grace_s)
        for pid, st in left:
            _signal(pid, st, signal.SIGKILL)
        _wait_gone(left, 5)
        self.killed.extend(left)

    def kill9_postmaster(self, children_grace_s=5.0):
        """SIGKILL of the postmaster alone (its patroni lives on and, within
        primary_start_timeout, starts it again in place). Returns the killed PID."""
        pm = self.postmaster_pid()
        if pm is None:
            raise PgError("%s: no running postmaster to kill" % self.name)
        pm_st = _start_time(pm)
        kids = _children(pm)
        _signal(pm, pm_st, signal.SIGKILL)
        _wait_gone([(pm, pm_st)], 10)
        _wait_gone(kids, children_grace_s)
        for pid, st in kids:
            _signal(pid, st, signal.SIGKILL)
        _wait_gone(kids, 5)
        return pm

    def stop(self):
        """SIGTERM to patroni (it stops PostgreSQL, fast mode, and gives up its leader key);
        after STOP_TIMEOUT_S, SIGKILL. Then whatever is left of the postmaster: SIGQUIT
        (immediate shutdown), SIGKILL after STOP_TIMEOUT_S. Never raises."""
        try:
            pm = self.postmaster_pid()
            pm_st = _start_time(pm) if pm is not None else None
            if self.patroni_alive():
                kids = _descendants(self.proc.pid)
                self.proc.terminate()
                try:
                    self.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
                self.killed.extend(kids)
            self.proc = None
            if pm is None:
                pm = self.postmaster_pid()
                pm_st = _start_time(pm) if pm is not None else None
            if pm is not None and _same_process(pm, pm_st):
                kids = _children(pm)
                _signal(pm, pm_st, signal.SIGQUIT)
                if not _wait_gone([(pm, pm_st)], STOP_TIMEOUT_S):
                    _signal(pm, pm_st, signal.SIGKILL)
                    _wait_gone([(pm, pm_st)], 10)
                self.killed.extend(kids)
            _wait_gone(self.killed, 5)
            for pid, st in self.killed:
                _signal(pid, st, signal.SIGKILL)
            self.killed = []
        except Exception:
            pass

    # ---- asking it -------------------------------------------------------------------------
    def api(self, path, timeout=3):
        """GET on its REST API: (status, parsed JSON or None); (None, None) if unreachable."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=timeout)
            try:
                c.request("GET", path)
                r = c.getresponse()
                body = r.read()
            finally:
                c.close()
        except (OSError, http.client.HTTPException):
            return None, None
        try:
            return r.status, json.loads(body) if body else None
        except ValueError:
            return r.status, None

    def psql_argv(self, db="postgres"):
        return [os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, "-d", db]

    def sql(self, statement, db="postgres", timeout=60):
        rc, out = pgcluster._run(self.psql_argv(db) + ["-c", statement], timeout,
                                 "%s: psql %r" % (self.name, statement[:80]))
        return out.strip()

    def try_sql(self, statement, db="postgres", timeout=10):
        """Like sql(), but None when the server does not answer (starting, gone)."""
        rc, out = pgcluster._run(self.psql_argv(db) + ["-c", statement], timeout, "psql",
                                 check=False)
        return out.strip() if rc == 0 else None

    def log_tail(self, n=4000):
        return _log_tail(self.log, n)


# ---- a cluster: one leader and one synchronous standby ----------------------------------
DEFAULT_DCS = {
    # The leader key lives ttl seconds in etcd unless its patroni renews it (every loop_wait):
    # a lost primary is replaced after at most ~ttl + loop_wait seconds.
    "ttl": 10,
    "loop_wait": 1,
    "retry_timeout": 4,
    # A commit on the leader waits for the standby named in synchronous_standby_names, which
    # Patroni sets to the member recorded in etcd's /sync key; only that member may be
    # promoted, so an acknowledged commit is never lost in a failover.
    "synchronous_mode": True,
    # Patroni's default: a postmaster that dies while its patroni lives is restarted in place
    # for this long before a failover is considered.
    "primary_start_timeout": 300,
    "maximum_lag_on_failover": 1048576,
    "parameters": {
        "fsync": "on",
        "full_page_writes": "on",
        "synchronous_commit": "on",
        "wal_level": "replica",
        "hot_standby": "on",
        "max_connections": "100",
        "max_wal_senders": "10",
        "max_replication_slots": "10",
        "wal_keep_size": "128MB",
        "max_wal_size": "256MB",
        "shared_buffers": "32MB",
        "max_locks_per_transaction": "128",
    },
}


class PatroniCluster:
    """A Patroni cluster (a `scope`): a leader and its synchronous standby."""

    def __init__(self, name, etcd, members=2, pg_ports=None, api_ports=None, dcs=None):
        check_binaries()
        self.name = name
        self.etcd = etcd
        self.namespace = "/tally/"
        self.dcs = dict(DEFAULT_DCS)
        self.dcs["parameters"] = dict(DEFAULT_DCS["parameters"])
        for k, v in (dcs or {}).items():
            if k == "parameters":
                self.dcs["parameters"].update(v)
            else:
                self.dcs[k] = v
        pg_ports = list(pg_ports or [])
        api_ports = list(api_ports or [])
        self.members = []
        self.destroyed = False
        _register(self)
        for i in range(members):
            port = pg_ports[i] if i < len(pg_ports) and pg_ports[i] else free_port()
            api = api_ports[i] if i < len(api_ports) and api_ports[i] else free_port()
            self.members.append(Member(self, "%s_%d" % (name, i), port, api))

    def __repr__(self):
        return "<PatroniCluster %s %r>" % (self.name, self.members)

    def start(self, timeout=CLUSTER_START_TIMEOUT_S):
        """Starts the first member alone (it bootstraps: initdb, becomes the leader), then the
        others (pg_basebackup from the leader); returns when one member leads and every other
        is its synchronous standby, streaming."""
        for m in self.members:
            m.write_config(self.etcd.hosts(), self.dcs)
        first = self.members[0]
        first.start()
        self.wait_leader(timeout=timeout)
        for m in self.members[1:]:
            m.start()
        self.wait_sync(timeout=timeout)
        return self

    def roles(self):
        """{member name: (role, state)} as Patroni's /cluster says it, asked of the first
        member whose REST API answers ({} when none does)."""
        for m in self.members:
            if not m.patroni_alive():
                continue
            st, doc = m.api("/cluster")
            if st == 200 and doc:
                return {x["name"]: (x.get("role"), x.get("state")) for x in doc.get("members", [])}
        return {}

    def member(self, name):
        return next(m for m in self.members if m.name == name)

    def leader(self):
        """The member Patroni names leader and that is running, with a live patroni (None
        when there is none)."""
        for name, (role, state) in self.roles().items():
            if role in ("leader", "master", "primary") and state == "running":
                m = self.member(name)
                if m.patroni_alive():
                    return m
        return None

    def wait_leader(self, exclude=None, timeout=60):
        """Until a member other than `exclude` leads and accepts writes (pg_is_in_recovery()
        false on it); returns it."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            m = self.leader()
            last = self.roles()
            if m is not None and m is not exclude and m.try_sql("SELECT pg_is_in_recovery()") == "f":
                return m
            self._check_ports()
            for x in self.members:
                if x is not exclude and x.proc is not None and x.proc.poll() is not None:
                    raise PgError("%s: patroni exited (status %s)\n%s" % (
                        x.name, x.proc.returncode, x.log_tail()))
            time.sleep(0.2)
        raise PgError("%s: no leader accepting writes within %ss (roles %r)\n%s" % (
            self.name, timeout, last, self._logs()))

    def wait_sync(self, timeout=60):
        """Until the leader's pg_stat_replication shows every other running member as its
        synchronous standby ('sync') and Patroni names one sync_standby."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            lead = self.leader()
            others = [m for m in self.members if m is not lead and m.patroni_alive()]
            if lead is not None and others:
                roles = self.roles()
                rc, out = pgcluster._run(lead.psql_argv() + [
                    "-c", "SELECT application_name, state, sync_state FROM pg_stat_replication"],
                    10, "psql", check=False)
                rows = {ln.split("|")[0]: ln.split("|")[1:] for ln in out.split() if "|" in ln} \
                    if rc == 0 else {}
                last = (roles, rows)
                if all(rows.get(m.name) == ["streaming", "sync"] for m in others[:1]) and \
                        any(r == "sync_standby" for r, _ in roles.values()):
                    return lead
            self._check_ports()
            time.sleep(0.2)
        raise PgError("%s: no synchronous standby within %ss (%r)\n%s" % (
            self.name, timeout, last, self._logs()))

    def _check_ports(self):
        for m in self.members:
            if "Address already in use" in m.log_tail(20000):
                raise PortClash("%s: a port of %s was taken meanwhile\n%s" % (
                    self.name, m.name, m.log_tail()))

    def _logs(self):
        return "\n".join("--- %s (%s) ---\n%s" % (m.name, m.log, m.log_tail()) for m in self.members)

    # ---- for tally -----------------------------------------------------------------------
    def uri(self, db="postgres", **params):
        """The multi-host URI listing every member, target_session_attrs=read-write: libpq
        tries the hosts in order and keeps the first that accepts writes (the leader)."""
        return pgcluster.two_host_uri(self.members, db, **params)

    def create_database(self, name):
        self.wait_leader().sql('CREATE DATABASE "%s"' % name)
        return name

    def destroy(self):
        """Stops every member (standbys first: a leader stopped first would hand over to
        them) and removes the directories. Never raises."""
        if self.destroyed:
            return
        self.destroyed = True
        lead = None
        try:
            lead = self.leader()
        except Exception:
            pass
        for m in sorted(self.members, key=lambda x: x is lead):
            m.stop()
        if not KEEP:
            for m in self.members:
                shutil.rmtree(m.tmp, ignore_errors=True)
        _unregister(self)


def start_cluster(name, etcd, pg_ports=None, api_ports=None, members=2, dcs=None,
                  timeout=CLUSTER_START_TIMEOUT_S):
    """A leader and a synchronous standby under Patroni, registered in `etcd` as scope `name`
    (call once per shard, with a different name, on the same etcd). pg_ports / api_ports:
    PostgreSQL's and the REST API's port of each member (free ones when not given). dcs:
    overrides of DEFAULT_DCS (e.g. {"primary_start_timeout": 0}). Returns once the standby
    is synchronous. A port taken meanwhile is retried with fresh ones (when none were given)."""
    for attempt in range(3):
        c = PatroniCluster(name, etcd, members=members, pg_ports=pg_ports, api_ports=api_ports,
                           dcs=dcs)
        try:
            return c.start(timeout=timeout)
        except PortClash:
            c.destroy()
            if pg_ports or api_ports or attempt == 2:
                raise
            _wipe_scope(etcd, c)
        except BaseException:
            c.destroy()
            raise


def _wipe_scope(etcd, cluster):
    """Forgets a cluster that failed to start (its keys in etcd), so that a new one of the same
    name bootstraps afresh."""
    etcd.delete_prefix("%s%s/" % (cluster.namespace, cluster.name))


def destroy_all():
    with _live_lock:
        objs = list(_live)
    for o in reversed(objs):  # clusters (made after their etcd) first
        try:
            o.destroy()
        except Exception:
            pass


atexit.register(destroy_all)

_previous_sigterm = None


def _sigterm(signum, frame):
    destroy_all()
    prev = _previous_sigterm
    if callable(prev):
        prev(signum, frame)  # pgcluster's: its clusters, then death by SIGTERM
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


if threading.current_thread() is threading.main_thread():
    _previous_sigterm = signal.getsignal(signal.SIGTERM)
    if _previous_sigterm in (signal.SIG_DFL, None) or _previous_sigterm is pgcluster._sigterm:
        signal.signal(signal.SIGTERM, _sigterm)


if __name__ == "__main__":
    import sys

    shards = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    t0 = time.monotonic()
    etcd = start_etcd()
    print("etcd up in %.2fs on %s" % (time.monotonic() - t0, etcd.hosts()))
    clusters = []
    for k in range(shards):
        t1 = time.monotonic()
        clusters.append(start_cluster("smoke%d" % k, etcd))
        print("cluster up in %.2fs: %r" % (time.monotonic() - t1, clusters[-1]))
    for c in clusters:
        c.create_database("smoke")
        c.leader().sql("CREATE TABLE t (k int primary key); INSERT INTO t VALUES (1)", "smoke")
    c = clusters[0]
    lead = c.leader()
    print("roles:", c.roles())
    print("fsync:", lead.sql("SHOW fsync"), "synchronous_standby_names:",
          lead.sql("SHOW synchronous_standby_names"))
    print("uri:", c.uri("smoke"))
    t2 = time.monotonic()
    lead.kill9()
    for other in clusters[1:]:  # the other clusters go on meanwhile
        other.leader().sql("INSERT INTO t VALUES (2)", "smoke")
    new = c.wait_leader(exclude=lead)
    print("failover in %.2fs: new leader %s" % (time.monotonic() - t2, new.name))
    new.sql("INSERT INTO t VALUES (2)", "smoke")  # would hang if it waited for a lost standby
    for x in clusters:
        print("%s: rows on the leader: %s" % (x.name, x.leader().sql("SELECT count(*) FROM t", "smoke")))
    destroy_all()
    print("destroyed; total %.2fs" % (time.monotonic() - t0))
