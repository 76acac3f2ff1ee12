"""tallyd behind a real nginx running dist/nginx/tally.conf (the shipped file itself; only its
upstream address and its listen address are changed): the clients behind nginx keep their own
read-limit buckets and live-stream caps, live events pass unbuffered, writes and their retries
work, a client cannot pick its address through X-Forwarded-For, and the operators' routes stay
off the public side. Clients connect from distinct loopback addresses (127.0.0.N: Linux routes
all of 127/8 to lo), nginx from 127.0.0.1, the one proxy tallyd trusts."""

import base64
import hashlib
import hmac
import http.client
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import REPO_ROOT, SLOW, TALLYD, Server, TallyTestCase, child_env, metric, uid
from nginx_front import HAVE_NGINX, NO_NGINX, Nginx
from test_live import SSEClient

SITE = os.path.join(REPO_ROOT, "dist", "nginx", "tally.conf")
SECRET = "proxy-test-secret-0123456789abcdefghij"
BURST = 10
LIVE_PER_CLIENT = 2
FLOOD = 256 << 20  # far more than the sockets between the stand-in and the client hold

_hosts = itertools.count(2)


def client_addr():
    """A loopback address of its own for each simulated client (127.0.0.2, .3, …)."""
    n = next(_hosts)
    return "127.0.%d.%d" % (n // 250, 2 + n % 250)


def site(upstream):
    """dist/nginx/tally.conf as it is, but for its upstream (tallyd's address) and its listen
    address (loopback, the port nginx_front picked): each must be found exactly once."""
    with open(SITE) as f:
        text = f.read()

    def one(pattern, repl, t):
        t, n = re.subn(pattern, repl, t, flags=re.M)
        if n != 1:
            raise AssertionError("%s: %r matched %d times, not once" % (SITE, pattern, n))
        return t

    def make(_dir, port):
        t = one(r"^(\s*server\s+)127\.0\.0\.1:8080;", r"\g<1>%s;" % upstream, text)
        t = one(r"^(\s*listen\s+)80;", r"\g<1>127.0.0.1:%d;" % port, t)
        return one(r"^\s*listen\s+\[::\]:80;\n", "", t)
    return make


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def bearer(user, admin=False, pad=0):
    claims = {"sub": user, "exp": int(time.time()) + 3600}
    if admin:
        claims["role"] = "admin"
    if pad:
        claims["pad"] = "x" * pad
    h = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    p = b64url(json.dumps(claims).encode())
    sig = hmac.new(SECRET.encode(), (h + "." + p).encode(), hashlib.sha256).digest()
    return {"Authorization": "Bearer " + h + "." + p + "." + b64url(sig)}


def raw_exchange(host, port, data, source=None, timeout=5.0):
    """Sends raw bytes and reads until the peer closes, the timeout, or one whole answer with a
    Content-Length arrived."""
    s = socket.create_connection((host, port), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    out = b""
    try:
        s.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            out += b
            head, sep, body = out.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if sep and m and len(body) >= int(m.group(1)):
                break
    finally:
        s.close()
    return out


def nginx_page(body):
    """Whether an answer is one of nginx's own error pages (tallyd's are problem+json)."""
    return b"<center>nginx</center>" in body


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None


@unittest.skipUnless(HAVE_NGINX, NO_NGINX)
class NginxFrontTest(TallyTestCase):
    """One tallyd (trusting only 127.0.0.1) behind nginx with the shipped site configuration."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="tally-proxy-")
        cls.log = os.path.join(cls.tmp, "access.log")
        cls.srv = Server(args=["--trusted-proxies", "127.0.0.1/32",
                               "--read-rate-limit", "1/s:%d" % BURST,
                               "--max-live-streams-per-client", str(LIVE_PER_CLIENT),
                               "--live-keepalive", "1s", "--access-log", cls.log],
                         env=child_env({"TALLY_JWT_SECRET": SECRET}))
        try:
            cls.nginx = Nginx(site("127.0.0.1:%d" % cls.srv.port))
        except BaseException:
            cls.srv.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.nginx.close()
        finally:
            cls.srv.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    # ---- helpers ---------------------------------------------------------------------------
    def via(self, path, source, headers=None, method="GET", body=None):
        return self.nginx.request(path, headers=headers, method=method, body=body, source=source)

    def direct(self, path, source, headers=None):
        conn = http.client.HTTPConnection(
            self.srv.host, self.srv.port, timeout=10, source_address=(source, 0))
        try:
            conn.request("GET", path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def logged(self, target, wait=True):
        """tallyd's access-log lines for target (waiting briefly for the first, when asked)."""
        deadline = time.monotonic() + (2 * SLOW if wait else 0)
        while True:
            with open(self.log) as f:
                lines = [ln for ln in f if ln.rstrip().endswith('target="%s"' % target)]
            if lines or time.monotonic() >= deadline:
                return lines
            time.sleep(0.05)

    def field(self, line, name):
        m = re.search(r" %s=(\S+)" % name, line)
        return m.group(1) if m else None

    def drain(self, source, headers=None):
        """Anonymous reads from source through nginx until one is refused with 429; returns how
        many were answered 200 before it."""
        ok = 0
        for _ in range(4 * BURST):
            st, hdrs, body = self.via("/v1/items/" + uid("r"), source, headers)
            if st == 429:
                self.assertIn("retry-after", hdrs)
                return ok
            self.assertEqual(st, 200, body[:300])
            ok += 1
        self.fail("%d anonymous reads from %s, never a 429" % (4 * BURST, source))

    # ---- the client's address --------------------------------------------------------------
    def test_two_clients_behind_nginx_have_their_own_read_buckets(self):
        a, b = client_addr(), client_addr()
        self.assertGreaterEqual(self.drain(a), BURST - 2)
        # b was never charged for a's reads: it has its whole burst
        st, _, body = self.via("/v1/items/" + uid("r"), b)
        self.assertEqual(st, 200, body[:300])
        # a cannot escape its empty bucket by naming another address: refused again within a
        # token or two (one per second comes back), where a fresh bucket would take BURST reads
        self.assertLessEqual(self.drain(a, {"X-Forwarded-For": "198.51.100.7"}), 2)
        self.assertLessEqual(self.drain(a, {"X-Forwarded-For": b}), 2)
        # and naming a does not charge a's bucket: c still has its own
        c = client_addr()
        self.assertGreaterEqual(self.drain(c, {"X-Forwarded-For": a}), BURST - 2)

    def test_the_access_log_names_the_client_whatever_it_wrote(self):
        a = client_addr()
        named, invalid = (metric(self.srv, "tally_forwarded_total"),
                          metric(self.srv, "tally_forwarded_invalid_total"))
        for sent in ("203.0.113.9", "203.0.113.9, 10.0.0.1", "garbage!!, unknown", None):
            target = "/v1/items/" + uid("log")
            headers = {"X-Forwarded-For": sent} if sent else {}
            headers.update(bearer(uid("u")))  # a user's read: no read-limit token spent
            st, _, body = self.via(target, a, headers)
            self.assertEqual(st, 200, body[:300])
            lines = self.logged(target)
            self.assertEqual(len(lines), 1, lines)
            self.assertEqual(self.field(lines[0], "peer"), a, (sent, lines[0]))
            self.assertEqual(self.field(lines[0], "proxy"), "127.0.0.1", lines[0])
        # what the client wrote is never read, so never found malformed either
        self.assertEqual(metric(self.srv, "tally_forwarded_invalid_total"), invalid)
        self.assertGreaterEqual(metric(self.srv, "tally_forwarded_total"), named + 4)

    def test_a_spoofed_header_sent_to_tallyd_directly_is_ignored(self):
        target = "/v1/items/" + uid("direct")
        untrusted = client_addr()
        st, body = self.direct(target, untrusted, {"X-Forwarded-For": "203.0.113.5"})
        self.assertEqual(st, 200, body[:300])
        line, = self.logged(target)
        self.assertEqual(self.field(line, "peer"), untrusted, line)
        self.assertIsNone(self.field(line, "proxy"), line)
        # the same header from the trusted proxy's address names the client (the rule works)
        target = "/v1/items/" + uid("direct")
        st, body = self.direct(target, "127.0.0.1", {"X-Forwarded-For": "203.0.113.5"})
        self.assertEqual(st, 200, body[:300])
        line, = self.logged(target)
        self.assertEqual((self.field(line, "peer"), self.field(line, "proxy")),
                         ("203.0.113.5", "127.0.0.1"), line)

    # ---- live counts -----------------------------------------------------------------------
    def test_two_clients_behind_nginx_have_their_own_live_stream_caps(self):
        a, b = client_addr(), client_addr()
        # signed in, so that opening streams spends none of the anonymous read tokens
        auth = "Authorization: %s\r\n" % bearer(uid("u"))["Authorization"]
        streams = []
        try:
            for _ in range(LIVE_PER_CLIENT):
                streams.append(SSEClient(self.nginx, [uid("l")], source=a, headers=auth))
                self.assertEqual(streams[-1].status, 200)
            over = SSEClient(self.nginx, [uid("l")], source=a, headers=auth)
            streams.append(over)
            self.assertEqual(over.status, 503, over.raw)
            self.assertEqual(json.loads(over.body)["type"], "urn:tally:error:overloaded")
            other = SSEClient(self.nginx, [uid("l")], source=b, headers=auth)
            streams.append(other)
            self.assertEqual(other.status, 200)
        finally:
            for s in streams:
                s.close()
        # closed through nginx, the streams free a's slots in tallyd
        deadline = time.monotonic() + 5 * SLOW
        while True:
            s = SSEClient(self.nginx, [uid("l")], source=a, headers=auth)
            s.close()
            if s.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(s.status, 200, "a's streams never freed their slots")

    def test_a_live_stream_through_nginx_gets_its_events_at_once(self):
        item, user = uid("live"), uid("u")
        s = SSEClient(self.nginx, [item], source=client_addr())
        try:
            self.assertEqual(s.status, 200)
            self.assertEqual(s.headers.get("content-type"), "text/event-stream")
            first = s.wait_for(lambda e: e.get("event") == "counts", 3)
            self.assertIsNotNone(first, "no initial event through nginx")
            self.assertEqual(first["data"]["counts"], {"like": 0, "dislike": 0})
            t0 = time.monotonic()
            st, _, body = self.via("/v1/items/%s/reaction" % item, client_addr(),
                                   dict(bearer(user), **{"Content-Type": "application/json"}),
                                   "PUT", b'{"reaction":"like"}')
            self.assertEqual(st, 200, body[:300])
            ev = s.wait_for(lambda e: e.get("event") == "counts" and
                            e["data"]["counts"]["like"] == 1, 3)
            self.assertIsNotNone(ev, "the write's event never came through nginx")
            # the live interval (250 ms) and the fold's lag, not a buffer's fill or a timeout
            self.assertLess(ev["at"] - t0, 1.5 * SLOW)
            # and the keep-alive comments (every second here) pass one by one
            ka = s.wait_for(lambda e: "keep-alive" in e["comments"] and e["at"] > ev["at"], 3)
            self.assertIsNotNone(ka, "no keep-alive comment through nginx within 3 s")
        finally:
            s.close()

    def test_the_live_read_timeout_is_above_tallyds_keepalive(self):
        """proxy_read_timeout of /v1/live in the file exceeds tallyd's default --live-keepalive
        (from its --help), so an idle stream is never cut by nginx."""
        out = subprocess.run([TALLYD, "--help"], capture_output=True, text=True, timeout=10)
        m = re.search(r"--live-keepalive DUR[^\n]*(?:\n\s+[^-\s][^\n]*)*?\(default (\d+)s\)",
                      out.stdout + out.stderr)
        self.assertIsNotNone(m, "no --live-keepalive default in tallyd --help")
        with open(SITE) as f:
            text = f.read()
        live = re.search(r"location = /v1/live \{(.*?)\}", text, re.S)
        self.assertIsNotNone(live, "no location = /v1/live in " + SITE)
        body = live.group(1)
        self.assertRegex(body, r"(?m)^\s*proxy_buffering off;")
        self.assertRegex(body, r"(?m)^\s*proxy_cache off;")
        t = re.search(r"(?m)^\s*proxy_read_timeout (\d+)s;", body)
        self.assertIsNotNone(t, "no proxy_read_timeout in the /v1/live location")
        self.assertGreater(int(t.group(1)), int(m.group(1)))

    # ---- writes ----------------------------------------------------------------------------
    def test_a_write_through_nginx_and_its_retry(self):
        item, user, src = uid("w"), uid("u"), client_addr()
        headers = dict(bearer(user), **{"Content-Type": "application/json",
                                        "Idempotency-Key": uid("key")})
        path = "/v1/items/%s/reaction" % item
        st, hdrs, body = self.via(path, src, headers, "PUT", b'{"reaction":"like"}')
        self.assertEqual(st, 200, body[:300])
        first = json.loads(body)
        self.assertNotIn("idempotent-replayed", hdrs)
        # the client did not see the answer and sends the same request again: the stored answer
        st, hdrs, body = self.via(path, src, headers, "PUT", b'{"reaction":"like"}')
        self.assertEqual(st, 200, body[:300])
        self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        self.assertEqual(json.loads(body), first)
        deadline = time.monotonic() + 3 * SLOW
        while True:
            st, _, body = self.via("/v1/items/" + item, src, bearer(user))
            doc = json.loads(body)
            if doc["counts"]["like"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(doc["counts"], {"like": 1, "dislike": 0})
        self.assertEqual(doc["viewer"]["reaction"], "like")
        # a token at tallyd's 8 KiB limit passes nginx's header buffers (its line is longer
        # than nginx's default 8k buffer)
        user = uid("u")
        big = next(b for b in (bearer(user, pad=n) for n in range(6000, 6200))
                   if 8192 - 8 <= len(b["Authorization"]) - len("Bearer ") <= 8192)
        st, _, body = self.via(path, src, dict(big, **{"Content-Type": "application/json"}),
                               "PUT", b'{"reaction":"dislike"}')
        self.assertEqual(st, 200, body[:300])

    def test_nginx_refuses_conflicting_framing_before_tallyd(self):
        src = client_addr()
        cases = [
            (b"1.1", b"Content-Length: 19\r\nTransfer-Encoding: chunked\r\n", 400),
            (b"1.1", b"Content-Length: 19\r\nContent-Length: 5\r\n", 400),
            (b"1.1", b"Transfer-Encoding: gzip, chunked\r\n", 501),
            (b"1.0", b"Transfer-Encoding: chunked\r\n", 400),
        ]
        for version, head, want in cases:
            with self.subTest(version=version, head=head):
                target = "/v1/items/%s/reaction" % uid("smug")
                raw = (b"PUT " + target.encode() + b" HTTP/" + version + b"\r\nHost: tally\r\n" + head +
                       b"Content-Type: application/json\r\n\r\n"
                       b"13\r\n{\"reaction\":\"like\"}\r\n0\r\n\r\n")
                got = raw_exchange(self.nginx.host, self.nginx.port, raw, source=src)
                self.assertEqual(status_of(got), want, got[:300])
                self.assertTrue(nginx_page(got), got[:300])
                self.assertEqual(self.logged(target, wait=False), [], "tallyd saw it")
        # and a body over tallyd's limits stops at nginx
        target = "/v1/items/%s/reaction" % uid("big")
        st, _, body = self.via(target, src, dict(bearer(uid("u")), **{
            "Content-Type": "application/json"}), "PUT", b" " * 9000)
        self.assertEqual(st, 413)
        self.assertTrue(nginx_page(body), body[:300])
        self.assertEqual(self.logged(target, wait=False), [], "tallyd saw the big body")

    # ---- the operators' routes -------------------------------------------------------------
    def test_the_operators_routes_are_not_reachable_through_nginx(self):
        admin = bearer("root", admin=True)
        src = client_addr()
        # tallyd itself serves them here (no --admin-listen): it is nginx that keeps them away
        for path in ("/metrics", "/v1/admin/webhooks", "/v1/changes"):
            st, body = self.direct(path, "127.0.0.1", admin)
            self.assertEqual(st, 200, (path, body[:300]))
        before = self.logged_count()
        passed_on = ("/V1/ADMIN/webhooks", "/METRICS")  # not tallyd's routes either
        for path in ("/metrics", "/metrics?x=1", "/metrics/", "//metrics", "/./metrics",
                     "/%6detrics", "/v1/admin/webhooks", "/v1/admin/hot", "/v1//admin/hot",
                     "/v1/%61dmin/webhooks", "/v1/admin%2Fwebhooks", "/v1/x/../admin/hot",
                     "/v1/changes", "/v1/changes?wait=1", "/ui/admin", "/ui/admin.js") + passed_on:
            with self.subTest(path=path):
                st, _, body = self.via(path, src, admin)
                self.assertEqual(st, 404, (path, body[:300]))
                self.assertEqual(nginx_page(body), path not in passed_on, (path, body[:300]))
        # absolute-form targets are routed on their path by both
        raw = (b"GET http://tally.example/v1/admin/webhooks HTTP/1.1\r\nHost: x\r\n"
               b"Authorization: " + admin["Authorization"].encode() + b"\r\n"
               b"Connection: close\r\n\r\n")
        got = raw_exchange(self.nginx.host, self.nginx.port, raw, src)
        self.assertEqual(status_of(got), 404, got[:300])
        self.assertTrue(nginx_page(got), got[:300])
        # whatever reached tallyd through nginx was answered 404 by tallyd's own router
        with open(self.log) as f:
            seen = [ln for ln in f.readlines()[before:] if " proxy=" in ln]
        self.assertEqual([ln for ln in seen if " status=404 " not in ln], [])

    def logged_count(self):
        with open(self.log) as f:
            return len(f.readlines())


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # nginx closing its idle upstream connections as it stops


class EchoUpstream:
    """A stand-in for tallyd on loopback: answers every request with what it received (its HTTP
    version, its headers, the upstream connection's port), and /v1/live with an event stream
    that sends one event, then a second only when told to (release)."""

    def __init__(self):
        self.release = threading.Event()
        self.flooded = queue.Queue()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/v1/live?ids=flood":
                    self.flood()
                    return
                if self.path.startswith("/v1/live"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.chunk(b"retry: 2000\n\nevent: counts\ndata: {}\n\n")
                    outer.release.wait(10)
                    self.chunk(b"event: counts\ndata: {}\n\n")
                    self.chunk(b"")
                    return
                body = json.dumps({"version": self.request_version,
                                   "port": self.client_address[1],
                                   "headers": [[k.lower(), v] for k, v in self.headers.items()]}
                                  ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def flood(self):
                """Events as fast as they can be written, until FLOOD bytes or a write is
                blocked for a second: how much was written is put in outer.flooded."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                event = b"event: counts\ndata: %s\n\n" % (b"x" * 65000)
                sent = 0
                self.connection.settimeout(1.0)
                try:
                    while sent < FLOOD:
                        self.chunk(event)
                        sent += len(event)
                except OSError:
                    pass
                outer.flooded.put(sent)
                self.close_connection = True

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@unittest.skipUnless(HAVE_NGINX, NO_NGINX)
class NginxRequestTest(unittest.TestCase):
    """What the shipped configuration sends upstream, seen by a stand-in that echoes it."""

    @classmethod
    def setUpClass(cls):
        cls.up = EchoUpstream()
        try:
            cls.nginx = Nginx(site("127.0.0.1:%d" % cls.up.port))
        except BaseException:
            cls.up.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.nginx.close()
        finally:
            cls.up.close()

    def echo(self, headers, source):
        st, _, body = self.nginx.request("/v1/items/x", headers=headers, source=source)
        self.assertEqual(st, 200, body[:300])
        doc = json.loads(body)
        got = {}
        for k, v in doc["headers"]:
            got.setdefault(k, []).append(v)
        return doc, got

    def test_the_request_tallyd_gets(self):
        src = client_addr()
        doc, got = self.echo({"Host": "reactions.example.com",
                              "X-Forwarded-For": "203.0.113.1",
                              "Forwarded": "for=203.0.113.2",
                              "X_Forwarded_For": "203.0.113.3",
                              "Connection": "keep-alive"}, src)
        self.assertEqual(doc["version"], "HTTP/1.1")
        # the client's own address appended, as one line: the right-most is the client
        self.assertEqual(got.get("x-forwarded-for"), ["203.0.113.1, " + src])
        # the header tallyd reads with --real-ip-header forwarded is never the client's
        self.assertNotIn("forwarded", got)
        # a name with an underscore is dropped, never passed on for a back end to confuse
        self.assertNotIn("x_forwarded_for", got)
        # no "Connection: close": the upstream connection stays open for the next request
        self.assertNotIn("connection", got)
        self.assertEqual(got.get("host"), ["reactions.example.com"])

    def test_the_upstream_connection_is_kept_alive(self):
        ports = {self.echo({}, client_addr())[0]["port"] for _ in range(5)}
        self.assertEqual(len(ports), 1, "a new upstream connection per request: %s" % ports)

    def test_live_events_are_not_held_in_a_buffer(self):
        """The stand-in sends no X-Accel-Buffering (tallyd does): the file's own settings
        must pass the first event on while the stream stays open."""
        self.up.release.clear()
        s = SSEClient(self.nginx, ["x"], source=client_addr())
        try:
            self.assertEqual(s.status, 200)
            ev = s.wait_for(lambda e: e.get("event") == "counts", 3)
            self.assertIsNotNone(ev, "the first event was held back by nginx")
            self.assertFalse(s.ended)
        finally:
            self.up.release.set()
            s.close()

    def test_a_client_that_stops_reading_holds_back_the_stream(self):
        """nginx stores none of a live stream: a client that stops reading stops the upstream's
        writes too (tallyd then drops the stream once 64 KiB wait), where a buffering proxy
        would take it all, into memory and temporary files."""
        s = SSEClient(self.nginx, ["flood"], source=client_addr(), rcvbuf=4096)
        try:
            self.assertEqual(s.status, 200)
            sent = self.up.flooded.get(timeout=60)
            self.assertLess(sent, FLOOD // 4, "nginx took %d bytes the client never read" % sent)
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
