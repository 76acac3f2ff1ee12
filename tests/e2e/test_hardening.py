"""Hardening of the HTTP layer: memory held by unauthenticated bodies, the admin
listener, running out of file descriptors, request smuggling, request targets, health checks at
the connection cap, reason phrases and development mode's Host check. All traffic goes to
127.0.0.1; every loop is bounded in count and time."""

import json
import os
import resource
import socket
import subprocess
import threading
import time

from harness import (REPO_ROOT, SLOW, TALLYD, Client, Server, TallyTestCase, child_env, metric,
                     run_tallyd, store_args, uid)

ADMIN = {"X-User-Id": "admin"}
BODY_BYTES = 15 * 1000 * 1000


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])


def hold_bodies(host, port, count=40, body=BODY_BYTES):
    """count connections, each sending a PUT head announcing body bytes and all of them but the
    last. Returns the sockets (the caller closes them)."""
    socks = []
    chunk = b"x" * (1 << 20)

    def one():
        s = socket.create_connection((host, port), timeout=5)
        socks.append(s)
        try:
            s.sendall(b"POST /v1/admin/import HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n" % body)
            left = body - 1
            while left > 0:
                n = s.send(chunk[:min(left, len(chunk))])
                left -= n
        except OSError:
            pass  # refused and closed by the server: what we want

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return socks


def ndjson_import(n):
    return "".join(json.dumps({"item": "imp-%d" % (i % 7), "user": "iu-%d" % i, "reaction": "like"}) + "\n"
                   for i in range(n)).encode()


class Http:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def json(self, method, path, body=None, headers=None):
        c = Client(self.host, self.port)
        try:
            h = dict(headers or {})
            status, hdrs, data = c.request(method, path, body=body, headers=h)
        finally:
            c.close()
        try:
            doc = json.loads(data.decode()) if data else None
        except ValueError:
            doc = None
        return status, hdrs, doc, data


def admin_address(srv):
    for line in srv.proc.stdout().splitlines():
        if "admin listening on http://" in line:
            hostport = line.split("http://", 1)[1].strip()
            host, port = hostport.rsplit(":", 1)
            return host, int(port)
    raise AssertionError("no admin listening line:\n" + srv.proc.stdout())


class MemoryTest(TallyTestCase):
    # measures the server's resident memory: run alone (run_e2e.py -j)
    serial = True

    def check_bodies_do_not_pile_up(self, srv, host, port):
        before = rss_bytes(srv.pid)
        socks = hold_bodies(host, port)
        try:
            time.sleep(0.5)
            peak = rss_bytes(srv.pid)
            self.assertLess(peak - before, 100 << 20, "RSS grew by %d MB" % ((peak - before) >> 20))
            self.assertEqual(srv.json("GET", "/healthz")[0], 200)
        finally:
            for s in socks:
                s.close()

    def test_unauthenticated_bodies_without_admin_listener(self):
        with Server(args=["--rate-limit", "off"]) as srv:
            self.check_bodies_do_not_pile_up(srv, srv.host, srv.port)
            body = ndjson_import(2000)
            self.assertGreater(len(body), 64 * 1024)
            doc = self.assertOk(srv.json("POST", "/v1/admin/import", body=body,
                                         headers={"X-User-Id": "admin", "Content-Type": "application/x-ndjson"}))
            self.assertEqual(doc["applied"], 2000)
            # An unauthenticated import of the same size is refused at h2o's small limit.
            st, _, _, _ = srv.json("POST", "/v1/admin/import", body=body,
                                   headers={"Content-Type": "application/x-ndjson"})
            self.assertEqual(st, 413)

    def test_unauthenticated_bodies_with_admin_listener(self):
        with Server(args=["--rate-limit", "off", "--admin-listen", "127.0.0.1:0"]) as srv:
            out = srv.proc.stdout()
            self.assertLess(out.index("admin listening on"), out.index("tallyd: listening on"))
            ahost, aport = admin_address(srv)
            self.check_bodies_do_not_pile_up(srv, srv.host, srv.port)
            self.check_bodies_do_not_pile_up(srv, ahost, aport)
            admin = Http(ahost, aport)
            body = ndjson_import(2000)
            h = {"X-User-Id": "admin", "Content-Type": "application/x-ndjson"}
            doc = self.assertOk(admin.json("POST", "/v1/admin/import", body=body, headers=h))
            self.assertEqual(doc["applied"], 2000)
            # The public listener: admin routes are not there, bodies over 8 KiB refused by h2o.
            self.assertProblem(srv.json("POST", "/v1/admin/import", body=b"{}\n", headers=h), 404, "not-found")
            self.assertProblem(srv.json("GET", "/v1/changes", headers=ADMIN), 404, "not-found")
            st, _, _, _ = srv.json("PUT", "/v1/items/x/reaction", body=b" " * 9000,
                                   headers={"X-User-Id": "u", "Content-Type": "application/json"})
            self.assertEqual(st, 413)
            # Health and metrics on both; items only on the public one.
            for path in ("/healthz", "/readyz", "/metrics"):
                self.assertEqual(srv.json("GET", path)[0], 200, path)
                self.assertEqual(admin.json("GET", path)[0], 200, path)
            self.assertOk(admin.json("GET", "/v1/changes?limit=1", headers=ADMIN))
            self.assertProblem(admin.json("GET", "/v1/items/x"), 404, "not-found")
            self.assertOk(srv.json("GET", "/v1/items/imp-1"))


class FileDescriptorTest(TallyTestCase):

    @staticmethod
    def low_limit(n):
        def set_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        return set_limit

    def tmpdir(self):
        import shutil
        import tempfile
        tmp = tempfile.mkdtemp(prefix="tally-e2e-fd-")
        self.addCleanup(shutil.rmtree, tmp, True)
        return tmp

    def start_limited(self, args, n, tmp):
        p = subprocess.Popen([TALLYD, "--listen", "127.0.0.1:0"] + store_args(os.path.join(tmp, "data")) + args,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), cwd=REPO_ROOT,
                             preexec_fn=self.low_limit(n))
        return p

    def test_explicit_max_connections_over_the_limit_is_refused(self):
        tmp = self.tmpdir()
        p = self.start_limited(["--max-connections", "2000"], 1024, tmp)
        try:
            out, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 2, err)
        self.assertIn(b"--max-connections", err)
        self.assertIn(b"RLIMIT_NOFILE", err)

    def test_default_max_connections_is_lowered_to_fit(self):
        tmp = self.tmpdir()
        p = self.start_limited([], 1024, tmp)
        socks = []
        try:
            line = p.stdout.readline().decode()
            self.assertIn("listening on", line)
            host, port = line.rsplit("http://", 1)[1].strip().rsplit(":", 1)
            port = int(port)
            # The case: 1100 idle connections under ulimit -n 1024. Past the (lowered) cap
            # they are refused, health checks are still answered, nothing spins.
            for _ in range(1100):
                try:
                    socks.append(socket.create_connection((host, port), timeout=5))
                except OSError:
                    break
            time.sleep(1.5)  # the refused ones without a health check get their 503 after 1 s
            before = cpu_ticks(p.pid)
            time.sleep(1)
            self.assertLess(cpu_ticks(p.pid) - before, 0.3 * os.sysconf("SC_CLK_TCK"), "tallyd spins")
            probe = Http(host, port)
            self.assertEqual(probe.json("GET", "/healthz")[0], 200)
            for s in socks:
                s.close()
            socks = []
            st, _, _, body = probe.json("GET", "/metrics")
            refused = [l for l in body.decode().splitlines() if l.startswith("tally_http_connections_refused_total ")]
            self.assertGreater(float(refused[0].split()[1]), 0)
        finally:
            for s in socks:
                s.close()
            p.terminate()
            _, err = p.communicate(timeout=20)
        self.assertIn(b"event=max-connections-lowered", err)
        self.assertNotIn(b"event=accept-failed", err)
        # the limits in force, fitted to the descriptors: 1024 - 16 health slots - 128 others; the
        # live streams' default cap, not below it any more, becomes half, and both say so
        self.assertIn(b"level=warn event=max-live-streams-lowered max_live_streams=440 ", err)
        self.assertIn(b"level=info event=limits max_connections=880 health_connections=16 admin_connections=0 "
                      b"max_live_streams=440 max_live_streams_per_client=16 rlimit_nofile=1024\n", err)

    def test_out_of_descriptors_does_not_spin(self):
        with Server(args=["--max-connections", "500"]) as srv:
            pid = srv.pid
            used = len(os.listdir("/proc/%d/fd" % pid))
            limit = used + 20
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
            socks = []
            try:
                for _ in range(60):
                    socks.append(socket.create_connection((srv.host, srv.port), timeout=5))
                time.sleep(0.5)
                before = cpu_ticks(pid)
                time.sleep(2)
                ticks = cpu_ticks(pid) - before
                self.assertLess(ticks, 0.3 * 2 * os.sysconf("SC_CLK_TCK"), "tallyd spins without descriptors")
            finally:
                for s in socks:
                    s.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            deadline = time.monotonic() + 5 * SLOW
            while time.monotonic() < deadline:
                try:
                    if srv.json("GET", "/healthz")[0] == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            self.assertEqual(srv.json("GET", "/healthz")[0], 200)
            self.assertGreater(metric(srv, "tally_http_accept_errors_total"), 0)
            self.assertEqual(srv.stderr().count("event=accept-failed"), 1)


def read_all(s, timeout):
    s.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            b = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not b:
            return data, True
        data += b
    return data, False


class SmugglingAndTargetTest(TallyTestCase):

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(args=["--rate-limit", "off"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.srv.close()

    def exchange(self, data, timeout=3.0):
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=timeout)
        try:
            s.sendall(data)
            return read_all(s, timeout)
        finally:
            s.close()

    def test_two_content_lengths_are_refused_and_close(self):
        user = uid("sm")
        second = b"PUT /v1/items/smuggled/like HTTP/1.1\r\nHost: localhost\r\nX-User-Id: %s\r\n\r\n" % user.encode()
        body = second
        data, closed = self.exchange(
            b"GET /v1/items/x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Length: %d\r\n\r\n"
            % len(body) + body)
        self.assertTrue(data.startswith(b"HTTP/1.1 400"), data[:200])
        self.assertIn(b"urn:tally:error:invalid-framing", data)
        self.assertEqual(data.count(b"HTTP/1.1 "), 1, data)
        self.assertTrue(closed, "the connection stayed open")
        self.assertEqual(self.srv.reaction("smuggled", user)["version"], 0, "the smuggled request ran")

    def test_content_length_with_chunked_is_refused_and_closes(self):
        data, closed = self.exchange(
            b"PUT /v1/items/x/like HTTP/1.1\r\nHost: localhost\r\nX-User-Id: u\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 400"), data[:200])
        self.assertTrue(closed)

    def test_pipelined_requests_with_bodies_still_work(self):
        one = (b"PUT /v1/items/%s/reaction HTTP/1.1\r\nHost: localhost\r\nX-User-Id: %s\r\n"
               b"Content-Type: application/json\r\nContent-Length: 19\r\n\r\n{\"reaction\":\"like\"}")
        users = [uid("pl") for _ in range(5)]
        data, _ = self.exchange(b"".join(one % (b"pipe", u.encode()) for u in users) +
                                b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 5)
        self.assertEqual(data.count(b"HTTP/1.1 200 OK"), 6, data[:2000])
        for u in users:
            self.assertEqual(self.srv.reaction("pipe", u)["reaction"], "like")

    def test_absolute_form_target(self):
        data, _ = self.exchange(b"GET http://localhost/healthz HTTP/1.1\r\nHost: localhost\r\n"
                                b"Connection: close\r\n\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        data, _ = self.exchange(b"GET HTTP://127.0.0.1:1/v1/items/abs?x=1 HTTP/1.1\r\nHost: localhost\r\n"
                                b"Connection: close\r\n\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertIn(b'"item":"abs"', data)

    def test_long_target_is_414(self):
        data, _ = self.exchange(b"GET /v1/items/x?q=" + b"a" * 300000 + b" HTTP/1.1\r\nHost: localhost\r\n"
                                b"Connection: close\r\n\r\n", 5)
        self.assertTrue(data.startswith(b"HTTP/1.1 414 URI Too Long"), data[:200])
        self.assertIn(b"urn:tally:error:uri-too-long", data)

    def test_repeated_query_parameter(self):
        self.assertProblem(self.srv.json("GET", "/v1/items?ids=a&ids=b"), 400, "invalid-parameter")
        self.assertProblem(self.srv.json("GET", "/v1/trending?limit=1&limit=2"), 400, "invalid-parameter")
        self.assertOk(self.srv.json("GET", "/v1/items?ids=a,b"))

    def test_reason_phrases(self):
        big = b"X-Junk: " + b"a" * (20 * 1024) + b"\r\n"
        data, _ = self.exchange(b"GET /v1/items/x HTTP/1.1\r\nHost: localhost\r\n" + big + b"\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), data[:100])
        data, _ = self.exchange(b"OPTIONS /v1/items/x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        self.assertTrue(data.startswith(b"HTTP/1.1 204 No Content\r\n"), data[:100])

    def test_development_mode_refuses_other_hosts(self):
        for host in ("evil.example", "evil.example:80", "10.0.0.1", "127.0.0.1.evil.example", "[::2]"):
            self.assertProblem(self.srv.json("GET", "/v1/items/x", headers={"Host": host}), 403, "forbidden",
                               host)
        for host in ("localhost", "LOCALHOST:8080", "127.0.0.1", "127.9.9.9:1", "[::1]", "[::1]:8080"):
            self.assertOk(self.srv.json("GET", "/v1/items/x", headers={"Host": host}), host)


class ConnectionCapTest(TallyTestCase):

    def test_health_answers_at_the_connection_cap(self):
        with Server(args=["--max-connections", "20"]) as srv:
            socks = []
            try:
                for _ in range(20):
                    socks.append(socket.create_connection((srv.host, srv.port), timeout=5))
                time.sleep(0.3)
                self.assertEqual(srv.json("GET", "/healthz")[0], 200)
                self.assertEqual(srv.json("GET", "/readyz")[0], 200)
                st, _, doc, _ = srv.json("GET", "/v1/items/x")
                self.assertEqual((st, doc["type"]), (503, "urn:tally:error:overloaded"))
            finally:
                for s in socks:
                    s.close()
            # the server frees a slot once its event loop has seen the close: within moments
            deadline = time.monotonic() + 3
            while srv.json("GET", "/v1/items/x")[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertOk(srv.json("GET", "/v1/items/x"))
            self.assertGreater(metric(srv, "tally_http_connections_refused_total"), 0)


class ShutdownTest(TallyTestCase):

    def test_writes_refused_during_shutdown_say_so(self):
        """A write on a kept-alive connection after SIGTERM (the loops answer for a moment more)
        is refused with 503 naming the shutdown, not "too many writes"."""
        import signal
        got = None
        for attempt in range(3):
            with Server(args=["--rate-limit", "off"]) as srv:
                c = srv.client()
                try:
                    self.assertEqual(c.json("GET", "/healthz")[0], 200)
                    srv.proc.popen.send_signal(signal.SIGTERM)
                    time.sleep(0.03)
                    try:
                        got = c.json("PUT", "/v1/items/sd/like", headers={"X-User-Id": "u"})
                    except OSError:
                        got = None  # missed the moment: the connection was already closed
                finally:
                    c.close()
                srv.proc.wait(20)
                srv._retire()
            if got is not None and got[0] == 503:
                break
        self.assertIsNotNone(got, "no answer on the kept-alive connection after SIGTERM")
        self.assertProblem(got, 503, "unavailable")
        self.assertIn("shutting down", got[2]["detail"])
