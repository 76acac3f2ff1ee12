"""End-to-end test harness for tallyd: start/stop/kill a real server, talk HTTP to it.

Standard library only. All traffic goes to 127.0.0.1; every wait is bounded.

Environment:
  TALLYD                   path of the server binary (default: <repo>/build/tallyd)
  TALLY_E2E_START_TIMEOUT  seconds to wait for the "listening on" line (default 20)
  TALLY_E2E_KEEP           if set, temporary directories are kept (for post-mortems)
  TALLY_SANITIZED          if set, waits for counts to converge are 3x longer (ASan build)
  TALLY_STORE              "embedded" (default: --data DIR) or "pg": one throwaway PostgreSQL 15
                           cluster per run (tests/pg/pgcluster.py, started at the first server,
                           destroyed at exit), and every Server gets a fresh database and
                           --store <uri> instead of --data <dir>. Tests that only make sense on
                           the embedded store are marked @embedded_only(reason).
  TALLY_SHARDS             with TALLY_STORE=pg, the number of shards each Server gets by default
                           (default 1): that many fresh databases, one --store each.
"""

import http.client
import itertools
import json as _json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))  # tests/e2e -> tests -> repo root
TALLYD = os.environ.get("TALLYD") or os.path.join(REPO_ROOT, "build", "tallyd")
if not os.path.isabs(TALLYD):
    TALLYD = os.path.join(REPO_ROOT, TALLYD)

START_TIMEOUT_S = float(os.environ.get("TALLY_E2E_START_TIMEOUT", "20"))
# A sanitizer build is ~3x slower: stretch the waits for counts to converge (never the
# correctness checks themselves).
SLOW = 3.0 if os.environ.get("TALLY_SANITIZED") else 1.0
STOP_TIMEOUT_S = 20.0
HTTP_TIMEOUT_S = 30.0
# A whole-store recount answers when every item has been compared: on PostgreSQL a few queries per
# item (more with shards, where the users' lists on the other shard are checked too), ~1 ms per item
# on two shards here, several times that on a loaded machine or under the sanitizer.
RECOUNT_TIMEOUT_S = 180.0
KEEP_TMP = bool(os.environ.get("TALLY_E2E_KEEP"))

# The public listener's line (an --admin-listen line, "admin listening on …", comes first).
LISTEN_RE = re.compile(r"(?<!admin )listening on http://(\[[^\]]+\]|[^\s/:]+):(\d+)")
SANITIZER_RE = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|: runtime error: ")

DEFAULT_KINDS = ("like", "dislike")

# ---- which store the servers run on -----------------------------------------------------
STORE = os.environ.get("TALLY_STORE", "embedded").strip().lower() or "embedded"
SHARDS = int(os.environ.get("TALLY_SHARDS", "1") or "1")
if STORE in ("postgresql", "postgres"):
    STORE = "pg"
if STORE not in ("embedded", "pg"):
    raise SystemExit("TALLY_STORE=%r: want 'embedded' or 'pg'" % STORE)
PG = STORE == "pg"


def embedded_only(reason):
    """Decorator (test method or class): runs only on the embedded store (--data DIR); with
    TALLY_STORE=pg it is skipped, saying why."""
    return unittest.skipIf(PG, "embedded store only: " + reason)


def one_shard(reason):
    """Decorator (test method or class): a test of the one-database forms (decimal cursors and
    event ids, one writer's threads, shard 0 of 1); skipped when the PostgreSQL store runs with
    several shards (TALLY_SHARDS), saying why. Their forms with several shards are tested in
    test_shards*.py."""
    return unittest.skipIf(PG and SHARDS > 1, "one database only: " + reason)


def pg_only(reason="needs TALLY_STORE=pg"):
    """Decorator: runs only with TALLY_STORE=pg (multi-node, failover)."""
    return unittest.skipUnless(PG, reason)


_pg = None  # the run's cluster (a pgcluster.Cluster), started by pg_cluster()
_pg_lock = threading.Lock()


def pgcluster_module():
    """tests/pg/pgcluster.py, imported on first use (the embedded runs never load it)."""
    pg_dir = os.path.join(REPO_ROOT, "tests", "pg")
    if pg_dir not in sys.path:
        sys.path.insert(0, pg_dir)
    import pgcluster
    return pgcluster


def pg_cluster():
    """The run's throwaway PostgreSQL cluster (fsync off: functional tests), started on first
    use and destroyed at exit (pgcluster's atexit). A cluster that cannot start fails every
    test that needs it with the reason."""
    global _pg
    with _pg_lock:
        if _pg is None or _pg.destroyed:
            _pg = pgcluster_module().start_primary(name="e2e", fsync=False,
                                                   max_connections=300)
        return _pg


class PgDatabase:
    """One database of a cluster, for one Server (and the further nodes it starts)."""

    def __init__(self, cluster=None, name=None):
        self.cluster = cluster or pg_cluster()
        self.name = pgcluster_module().create_database(self.cluster, name)
        self.dropped = False

    def uri(self, **params):
        return self.cluster.uri(self.name, **params)

    def sql(self, statement, timeout=60):
        return self.cluster.sql(statement, db=self.name, timeout=timeout)

    def drop(self):
        """DROP DATABASE … WITH (FORCE). Never raises (the cluster goes at exit anyway)."""
        if self.dropped:
            return
        self.dropped = True
        try:
            if self.cluster.alive():
                pgcluster_module().drop_database(self.cluster, self.name)
        except Exception:
            pass

    def __repr__(self):
        return "<PgDatabase %s on %r>" % (self.name, self.cluster)


_ephemeral_dbs = {}  # uri -> PgDatabase made by store_args() for one run_tallyd()


def store_args(data_dir=None):
    """The store flags for a tallyd started by hand (run_tallyd): ["--data", data_dir] on the
    embedded store; with TALLY_STORE=pg, ["--store", <uri of a fresh database>] (data_dir is
    then unused; run_tallyd drops that database once the process is gone)."""
    if not PG:
        if data_dir is None:
            raise ValueError("store_args: the embedded store needs a data directory")
        return ["--data", data_dir]
    db = PgDatabase()
    uri = db.uri()
    _ephemeral_dbs[uri] = db
    return ["--store", uri]


class ServerExited(Exception):
    """The server exited (or never printed its listening line)."""

    def __init__(self, returncode, stdout, stderr, reason="exited before listening", argv=None):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        cmd = "\n--- command ---\n%s" % " ".join(argv) if argv else ""
        super().__init__("tallyd %s (exit status %r)%s\n--- stdout ---\n%s\n--- stderr ---\n%s"
                         % (reason, returncode, cmd, tail(stdout), tail(stderr)))


def tail(text, n=4000):
    """The start and the end of a long log (start-up messages and the last words)."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) <= n:
        return text
    head = text[: n // 3]
    return head + "\n[... %d characters left out ...]\n" % (len(text) - n) + text[-(n - len(head)):]


def child_env(extra=None, drop_secret=True):
    env = dict(os.environ)
    if drop_secret:
        env.pop("TALLY_JWT_SECRET", None)
    if extra:
        env.update(extra)
    return env


_uid_counter = itertools.count(1)
_uid_salt = "%04x" % random.randrange(0x10000)


def run_threads(targets, timeout=60):
    """Run callables in threads; returns the exceptions they raised (bounded wait)."""
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # reported by the test
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = sum(t.is_alive() for t in threads)
    if alive:
        errors.append(AssertionError("%d threads still running after %ss" % (alive, timeout)))
    return errors


def uid(prefix="x"):
    """A fresh id in the item/user alphabet, unique within this test run."""
    return "%s-%s-%d" % (prefix, _uid_salt, next(_uid_counter))


def secret(prefix="secret"):
    """A fresh JWT secret: tallyd refuses one shorter than 32 bytes (RFC 7518 §3.2)."""
    s = "%s-%s-%032x" % (prefix, uid("k"), random.getrandbits(128))
    assert len(s) >= 32
    return s


class Proc:
    """A tallyd child process: stdout collected by a thread, stderr into a file."""

    def __init__(self, argv, env, stderr_path):
        self.argv = argv
        self.stderr_path = stderr_path
        self._stderr_file = open(stderr_path, "ab")
        self.stdout_lines = []
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._eof = threading.Event()
        self.host = None
        self.port = None
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=self._stderr_file, env=env, cwd=REPO_ROOT)
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self):
        try:
            for raw in iter(self.popen.stdout.readline, b""):
                line = raw.decode("utf-8", "replace")
                with self._lock:
                    self.stdout_lines.append(line)
                if not self._listening.is_set():
                    m = LISTEN_RE.search(line)
                    if m:
                        host = m.group(1)
                        if host.startswith("["):
                            host = host[1:-1]
                        self.host, self.port = host, int(m.group(2))
                        self._listening.set()
        finally:
            self._eof.set()

    def stdout(self):
        with self._lock:
            return "".join(self.stdout_lines)

    def stderr(self):
        try:
            if not self._stderr_file.closed:
                self._stderr_file.flush()
        except (OSError, ValueError):
            pass
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_listening_or_exit(self, timeout):
        """Returns 'listening', 'exited' or 'timeout'."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._listening.wait(0.05):
                return "listening"
            if self.popen.poll() is not None:
                self._eof.wait(2.0)  # let the reader drain what was printed
                return "listening" if self._listening.is_set() else "exited"
        return "timeout"

    def wait(self, timeout):
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._eof.wait(2.0)
        return rc

    def kill(self):
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
        rc = self.wait(STOP_TIMEOUT_S)
        self.close()
        return rc

    def close(self):
        try:
            self._stderr_file.close()
        except Exception:
            pass
        try:
            self.popen.stdout.close()
        except Exception:
            pass


def run_tallyd(args, env=None, timeout=START_TIMEOUT_S, workdir=None):
    """Run tallyd with exactly `args` and wait until it exits.

    Returns (returncode, stdout, stderr). If it prints its listening line instead of
    exiting, it is killed and returncode is the string 'listening' (a test failure for
    callers that expected an exit); if it does neither in time, 'timeout'.
    """
    own = workdir is None
    if own:
        workdir = tempfile.mkdtemp(prefix="tally-e2e-run-")
    try:
        p = Proc([TALLYD] + list(args), env if env is not None else child_env(),
                 os.path.join(workdir, "stderr-%d.log" % next(_uid_counter)))
        state = p.wait_listening_or_exit(timeout)
        if state == "exited":
            rc = p.wait(STOP_TIMEOUT_S)
        else:
            p.kill()
            rc = state
        out, err = p.stdout(), p.stderr()
        p.close()
        return rc, out, err
    finally:
        for a in args:
            db = _ephemeral_dbs.pop(a, None) if isinstance(a, str) else None
            if db is not None:
                db.drop()
        if own and not KEEP_TMP:
            shutil.rmtree(workdir, ignore_errors=True)


def _lower_headers(msg):
    out = {}
    for k, v in msg.items():
        k = k.lower()
        out[k] = v if k not in out else out[k] + ", " + v
    return out


def _encode_body(body):
    """dict/list -> compact JSON bytes; str -> UTF-8; anything else (bytes, an iterable of
    chunks, None) as it is."""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (dict, list)):
        return _json.dumps(body, separators=(",", ":")).encode("utf-8")
    return body


class Client:
    """One keep-alive connection (for one thread). Never retries a request by itself:
    after an error the next call opens a new connection."""

    def __init__(self, host, port, timeout=HTTP_TIMEOUT_S):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None, encode_chunked=False):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=_encode_body(body), headers=headers or {},
                              encode_chunked=encode_chunked)
            resp = self.conn.getresponse()
            data = resp.read()
            hdrs = _lower_headers(resp.msg)
            if resp.will_close:
                self.close()
            return resp.status, hdrs, data
        except BaseException:
            self.close()
            raise

    def json(self, method, path, body=None, headers=None, user=None):
        return _json_call(self.request, method, path, body, headers, user)

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


def _json_call(request, method, path, body, headers, user):
    h = dict(headers or {})
    if user is not None:
        h["X-User-Id"] = user
    if isinstance(body, (dict, list)) and not any(k.lower() == "content-type" for k in h):
        h["Content-Type"] = "application/json"
    status, hdrs, data = request(method, path, body=body, headers=h)
    try:
        doc = _json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        doc = None
    return status, hdrs, doc, data


def server_without_rate_limit(args=(), **kw):
    """A Server with --rate-limit off; if this tallyd does not know the flag at all (it has
    no rate limit yet, docs/api.md § Limits and protection), the same server without the flag."""
    try:
        return Server(args=["--rate-limit", "off"] + list(args), **kw)
    except ServerExited as e:
        if e.returncode == 2 and "--rate-limit" in (e.stderr or "") and \
                re.search(r"(?i)unknown|unrecogni[sz]ed", e.stderr or ""):
            return Server(args=args, **kw)
        raise


class Server:
    """A running tallyd on 127.0.0.1:<free port> with its own data directory.

    Server(args=[...]) starts it at construction unless start=False. The data directory
    survives stop()/kill9()/restart() and is removed by close() (or the with-block).

    With TALLY_STORE=pg it has its own fresh database instead (self.db, a PgDatabase; dropped
    by close()) and runs with --store <uri>; data_dir is None. Server(store=db) (or
    srv.node()) starts another node on the same database, which it does not drop; store_uri
    overrides the URI (a two-host URI for failover)."""

    def __init__(self, args=(), data_dir=None, env=None, start=True, listen="127.0.0.1:0",
                 store=None, store_uri=None, shards=None, shard_dbs=None):
        """shards (PostgreSQL): the number of shards, each a fresh database (default
        TALLY_SHARDS); shard_dbs: the databases of shards 1.. of another node (node())."""
        self.args = list(args)
        self.shard_dbs = list(shard_dbs or [])
        self.owns_shard_dbs = False
        self.listen = listen
        self.env = env if env is not None else child_env()
        self.tmp = tempfile.mkdtemp(prefix="tally-e2e-")
        self.db = None
        self.owns_db = False
        self.store_uri = store_uri
        if PG or store is not None or store_uri is not None:
            if data_dir is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise AssertionError("Server(data_dir=...) on the PostgreSQL store: mark the "
                                     "test @embedded_only")
            self.data_dir = None
            if store is None and store_uri is None:
                try:
                    store = PgDatabase()
                except BaseException:
                    shutil.rmtree(self.tmp, ignore_errors=True)
                    raise
                self.owns_db = True
            self.db = store
            nshards = shards if shards is not None else (SHARDS if PG else 1)
            if not self.shard_dbs and nshards > 1:
                self.shard_dbs = [PgDatabase() for _ in range(nshards - 1)]
                self.owns_shard_dbs = True
        else:
            self.data_dir = data_dir or os.path.join(self.tmp, "data")
        self.proc = None
        self.host = self.port = None
        self.starts = 0
        self.logs = []  # stderr of earlier runs, for diagnostics
        if start:
            try:
                self.start()
            except BaseException:
                self.close()
                raise

    # ---- process control -------------------------------------------------------------
    def store_args(self):
        """["--data", dir] or ["--store", uri]: the store of this server, for run_tallyd."""
        if self.data_dir is not None:
            return ["--data", self.data_dir]
        more = []
        for db in self.shard_dbs:
            more += ["--store", db.uri()]
        return ["--store", self.store_uri or self.db.uri()] + more

    def argv(self, args=None):
        return [TALLYD, "--listen", self.listen] + self.store_args() + list(
            self.args if args is None else args)

    def node(self, args=None, **kw):
        """Another tallyd on this server's database (PostgreSQL only): a second node. Its
        args default to this server's; the caller closes it (before this one)."""
        if self.db is None and self.store_uri is None:
            raise AssertionError("a second node needs the PostgreSQL store (TALLY_STORE=pg)")
        kw.setdefault("env", self.env)
        return Server(args=self.args if args is None else args, store=self.db,
                      store_uri=self.store_uri, shard_dbs=self.shard_dbs, **kw)

    def start(self, args=None, timeout=START_TIMEOUT_S):
        """Start (again) on the same data dir. `args` replaces the extra args if given.
        Raises ServerExited if the server exits or does not listen in time."""
        assert self.proc is None or self.proc.popen.poll() is not None, "already running"
        if args is not None:
            self.args = list(args)
        self.starts += 1
        p = Proc(self.argv(), self.env, os.path.join(self.tmp, "stderr-%d.log" % self.starts))
        state = p.wait_listening_or_exit(timeout)
        if state != "listening":
            if state == "timeout":
                p.kill()
                rc = "timeout"
            else:
                rc = p.wait(STOP_TIMEOUT_S)
            out, err = p.stdout(), p.stderr()
            p.close()
            self.logs.append(err)
            raise ServerExited(rc, out, err, "did not print its listening line within %ss"
                               % timeout if state == "timeout" else "exited before listening",
                               argv=p.argv)
        self.proc = p
        self.host, self.port = p.host, p.port
        return self

    @property
    def running(self):
        return self.proc is not None and self.proc.popen.poll() is None

    @property
    def pid(self):
        return self.proc.popen.pid

    def stderr(self):
        return self.proc.stderr() if self.proc else ""

    def _retire(self):
        err = self.proc.stderr()
        self.proc.close()
        self.logs.append(err)
        self.proc = None
        return err

    def signal_and_wait(self, sig, timeout=STOP_TIMEOUT_S):
        """Send `sig`, wait for exit; returns (returncode or None on timeout, stderr)."""
        assert self.proc is not None, "not started"
        if self.proc.popen.poll() is None:
            self.proc.popen.send_signal(sig)
        rc = self.proc.wait(timeout)
        if rc is None:
            self.proc.kill()
        err = self._retire()
        return rc, err

    def stop(self, sig=signal.SIGTERM):
        """Graceful stop; asserts exit status 0 and no sanitizer report."""
        if self.proc is None:
            return
        already = self.proc.popen.poll()
        rc, err = self.signal_and_wait(sig)
        if already is not None:
            raise AssertionError("tallyd had already exited (status %r) before stop()\n%s"
                                 % (already, tail(err)))
        if rc != 0:
            raise AssertionError("tallyd exited with status %r after %s (want 0)\n--- stderr ---\n%s"
                                 % (rc, signal.Signals(sig).name, tail(err)))
        check_sanitizer(err)

    def kill9(self):
        """SIGKILL. Asserts the server was still running (one that died by itself is a bug
        the kill must not hide) and left no sanitizer report."""
        if self.proc is None:
            return
        already = self.proc.popen.poll()
        self.proc.kill()
        err = self._retire()
        if already is not None:
            raise AssertionError("tallyd had already exited (status %r) before kill -9\n%s"
                                 % (already, tail(err)))
        check_sanitizer(err)

    def restart(self, args=None):
        if self.running:
            self.stop()
        elif self.proc is not None:
            self._retire()
        return self.start(args)

    def close(self):
        """Stop (kill if needed) and remove the temporary directory. Never raises."""
        try:
            if self.proc is not None:
                self.proc.kill()
                self._retire()
        except Exception:
            pass
        if self.owns_db and self.db is not None and not KEEP_TMP:
            self.db.drop()
        if self.owns_shard_dbs and not KEEP_TMP:
            for db in self.shard_dbs:
                db.drop()
        if not KEEP_TMP:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and self.running:
                self.stop()  # a clean test also checks the clean shutdown
        finally:
            self.close()
        return False

    # ---- HTTP --------------------------------------------------------------------------
    def client(self, timeout=HTTP_TIMEOUT_S):
        return Client(self.host, self.port, timeout)

    def request(self, method, path, body=None, headers=None, encode_chunked=False):
        """One request on a fresh connection: (status, lowercased headers, body bytes)."""
        slow = path.startswith("/v1/admin/recount")
        c = Client(self.host, self.port, RECOUNT_TIMEOUT_S if slow else HTTP_TIMEOUT_S)
        try:
            return c.request(method, path, body=body, headers=headers,
                             encode_chunked=encode_chunked)
        except (ConnectionError, http.client.HTTPException) as e:
            self._raise_if_dead(e)
            raise
        finally:
            c.close()

    def _raise_if_dead(self, err):
        """After a connection error: if the server process is gone, say so, with its stderr."""
        if self.proc is None:
            return
        try:
            rc = self.proc.popen.wait(0.5)
        except subprocess.TimeoutExpired:
            return
        raise AssertionError("tallyd is not running any more (exit status %r; %r)\n"
                             "--- stderr ---\n%s" % (rc, err, tail(self.proc.stderr()))) from err

    def json(self, method, path, body=None, headers=None, user=None):
        """Like request(); dict bodies are JSON-encoded (Content-Type: application/json
        added unless given). Returns (status, headers, parsed JSON or None, raw bytes)."""
        return _json_call(self.request, method, path, body, headers, user)

    def raw(self, data, timeout=10.0, read_limit=1 << 20):
        """Send raw bytes on a new socket, read until the server closes or timeout."""
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        chunks = []
        try:
            s.sendall(data)
            deadline = time.monotonic() + timeout
            total = 0
            while time.monotonic() < deadline and total < read_limit:
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    break
                if not b:
                    break
                chunks.append(b)
                total += len(b)
                if _complete_response(b"".join(chunks)):
                    break
        finally:
            s.close()
        return b"".join(chunks)

    def exchange(self, method, target, headers=None, timeout=10.0):
        """One request with Connection: close on a new socket, read as the wire has it:
        (status, [(lowercased name, value)...] in order, body bytes). A HEAD answer is read to the
        connection's end, so any byte after its head shows up in body; an event stream's GET stops
        after the head (its body does not end)."""
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1", "Connection: close"]
        lines += ["%s: %s" % kv for kv in (headers or {}).items()]
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        buf, status, fields, length = b"", None, None, None
        try:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if fields is None and b"\r\n\r\n" in buf:
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    first, *rest = head.decode("latin-1").split("\r\n")
                    status = int(first.split(" ")[1])
                    fields = [(n.strip().lower(), v.strip()) for n, v in (r.split(":", 1) for r in rest)]
                    got = dict(fields)
                    if method != "HEAD" and got.get("content-type") == "text/event-stream":
                        break
                    if method != "HEAD" and "content-length" in got:
                        length = int(got["content-length"])
                if length is not None and len(buf) >= length:
                    break
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    break
                if not b:
                    break
                buf += b
        finally:
            s.close()
        if fields is None:
            raise AssertionError("%s %s: no complete answer head in %r" % (method, target, buf[:300]))
        return status, fields, buf

    # ---- domain helpers ----------------------------------------------------------------
    def item(self, item, user=None, headers=None):
        return self.json("GET", "/v1/items/" + item, user=user, headers=headers)

    def counts(self, item):
        status, _, doc, raw = self.json("GET", "/v1/items/" + item)
        if status != 200 or not isinstance(doc, dict):
            raise AssertionError("GET /v1/items/%s -> %s %r" % (item, status, raw[:300]))
        return doc.get("counts")

    def reaction(self, item, user):
        status, hdrs, doc, raw = self.json("GET", "/v1/items/%s/reaction" % item, user=user)
        if status != 200 or not isinstance(doc, dict):
            raise AssertionError("GET reaction %s/%s -> %s %r" % (item, user, status, raw[:300]))
        return doc

    def put(self, item, user, reaction, headers=None):
        return self.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": reaction},
                         user=user, headers=headers)

    def stable_counts(self, item, timeout=2.0):
        """An item's counts once the fold has caught up with the writes made before the call: the
        same on two reads 50 ms apart (on PostgreSQL the fold commits a few ms after a write's
        answer). For a test that compares counts before and after something that must not change
        them."""
        deadline = time.monotonic() + timeout * SLOW
        last = self.counts(item)
        while True:
            time.sleep(0.05)
            now = self.counts(item)
            if now == last or time.monotonic() >= deadline:
                return now
            last = now

    def wait_counts(self, item, expected, timeout=2.0):
        """Poll GET item until counts == expected (dict). Returns the last counts seen."""
        deadline = time.monotonic() + timeout * SLOW
        last = None
        while True:
            last = self.counts(item)
            if last == expected or time.monotonic() >= deadline:
                return last
            time.sleep(0.05)


def _complete_response(buf):
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    if m:
        return len(body) >= int(m.group(1))
    return False


METRIC_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def metric(srv, name):
    """The value of an unlabelled sample on GET /metrics (None if absent)."""
    st, _, body = srv.request("GET", "/metrics")
    if st != 200:
        raise AssertionError("GET /metrics -> %s %r" % (st, body[:300]))
    for line in body.decode("utf-8").split("\n"):
        m = METRIC_SAMPLE_RE.match(line)
        if m and m.group(1) == name and not m.group(2):
            return float(m.group(3))
    return None


def strip_counts(doc):
    """A write answer without its "counts" (and "reactors") members, which every write answer
    carries (docs/api.md, "Write"; checked exactly by test_answer_counts.py): a counts member that is
    not an object of whole numbers >= 0, nor null, is kept, so that comparing the answer fails."""
    if not isinstance(doc, dict) or "counts" not in doc:
        return doc
    counts = doc["counts"]
    ok = counts is None or (isinstance(counts, dict) and counts and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()))
    reactors = doc.get("reactors", 0)
    ok = ok and (reactors is None or (isinstance(reactors, int) and reactors >= 0))
    if not ok:
        return doc
    return {k: v for k, v in doc.items() if k not in ("counts", "reactors")}


NUMBER_RE = re.compile(rb'(?<![\w."])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w."])')


def significant_digits(text):
    """The digits of a decimal number's text from its first non-zero one to its last: "0.050" 1,
    "1.25e-05" 3, "100" 1."""
    mantissa = re.split(r"[eE]", text.lstrip("+-"))[0].replace(".", "")
    return len(mantissa.strip("0")) or 1


def long_reals(raw):
    """The reals of a JSON text (bytes) printed with more than 15 significant digits, as jansson's
    default %.17g prints 0.05 (0.050000000000000003); integers are left alone."""
    return [t.decode() for t in NUMBER_RE.findall(raw)
            if re.search(rb"[.eE]", t) and significant_digits(t.decode()) > 15]


DECIMAL_CURSOR_RE = re.compile(r"^(?P<pos>[0-9]+)$")
SHARD_CURSOR_RE = re.compile(r"^(0|[1-9][0-9]*)\.(?P<pos>[1-9][0-9]*)$")


def split_cursor(doc):
    """A write answer without its "cursor" member, and the cursor (an int, or None when absent).
    docs/api.md § Live counts: an answer that changed something carries its transition's cursor (a
    decimal string with one shard; "S.P" with several, of which the position P is returned); one
    that changed nothing carries none. A malformed cursor is kept in the answer, so that comparing
    it with the expected one fails."""
    doc = strip_counts(doc)
    if not isinstance(doc, dict) or "cursor" not in doc:
        return doc, None
    rest = dict(doc)
    cursor = rest.pop("cursor")
    form = SHARD_CURSOR_RE if PG and SHARDS > 1 else DECIMAL_CURSOR_RE
    m = form.match(cursor) if isinstance(cursor, str) else None
    if not (m and doc.get("changed") is True):
        return doc, None
    return rest, int(m.group("pos"))


def check_sanitizer(stderr_text):
    m = SANITIZER_RE.search(stderr_text or "")
    if m:
        start = max(0, m.start() - 200)
        raise AssertionError("sanitizer report in tallyd stderr:\n" + stderr_text[start:start + 4000])


class TallyTestCase(unittest.TestCase):
    """Assertions shared by the suites."""

    maxDiff = None

    def assertProblem(self, resp, status, code, msg=None):
        """resp: a tuple from Server.json(); checks an RFC 9457 problem answer."""
        st, hdrs, doc, raw = resp
        ctx = "%s\n  got %s %s %r" % (msg or "", st, hdrs.get("content-type"), raw[:400])
        self.assertEqual(st, status, "status" + ctx)
        ctype = hdrs.get("content-type", "")
        self.assertEqual(ctype.split(";")[0].strip().lower(), "application/problem+json",
                         "content-type" + ctx)
        self.assertIsInstance(doc, dict, "body is not a JSON object" + ctx)
        self.assertEqual(doc.get("type"), "urn:tally:error:" + code, "problem type" + ctx)
        self.assertEqual(doc.get("status"), status, "problem status member" + ctx)
        self.assertIsInstance(doc.get("title"), str, "problem title" + ctx)
        self.assertTrue(doc.get("title"), "empty problem title" + ctx)
        self.assertIsInstance(doc.get("detail"), str, "problem detail" + ctx)
        return doc

    def assertOk(self, resp, msg=None):
        st, hdrs, doc, raw = resp
        ctx = "%s\n  got %s %s %r" % (msg or "", st, hdrs.get("content-type"), raw[:400])
        self.assertEqual(st, 200, ctx)
        self.assertEqual(hdrs.get("content-type", "").split(";")[0].strip().lower(),
                         "application/json", "content-type" + ctx)
        self.assertIsInstance(doc, dict, "body is not a JSON object" + ctx)
        return doc

    def assertWrite(self, resp, item, reaction, previous, version, changed, msg=None):
        doc = self.assertOk(resp, msg)
        self.assertIn("counts", doc, "a write answer carries the item's counts: %r" % doc)
        rest, cursor = split_cursor(doc)
        self.assertEqual(rest, {"item": item, "reaction": reaction, "previous": previous,
                                "version": version, "changed": changed},
                         msg or "write answer")
        self.assertEqual(cursor is not None, changed,
                         "a write answer carries a cursor exactly when it changed something: %r" % doc)
        self.assertEqual(resp[1].get("etag"), '"%d"' % version, "ETag of the write")
        return doc

    def assertCounts(self, server, item, expected, timeout=2.0, msg=None):
        got = server.wait_counts(item, expected, timeout)
        self.assertEqual(got, expected, msg or "counts of %s (after polling %ss)" % (item, timeout))
        return got


class SharedServerTestCase(TallyTestCase):
    """One server for the whole class (tests keep apart by using fresh ids from uid())."""

    server_args = ()
    srv = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server(args=cls.server_args)

    @classmethod
    def tearDownClass(cls):
        srv, cls.srv = cls.srv, None
        try:
            if srv is not None and srv.running:
                srv.stop()
        finally:
            if srv is not None:
                srv.close()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        if self.srv is None or not self.srv.running:
            raise AssertionError("shared tallyd is not running\n" +
                                 tail(self.srv.stderr() if self.srv else ""))

    def tearDown(self):
        # a server that died during a test is that test's failure, not the next one's
        if self.srv is not None and self.srv.proc is not None and not self.srv.running:
            rc = self.srv.proc.popen.returncode
            err = self.srv.stderr()
            self.srv.close()
            type(self).srv = None
            raise AssertionError("tallyd died during this test (status %r)\n%s" % (rc, tail(err)))
        super().tearDown()
