"""Hostile input over raw sockets: the server keeps answering /healthz, and nothing changes in
the store (the stop at the end is graceful with exit 0 and, under the sanitizer build, no
report). Every loop here is bounded in count and time."""

import json
import socket
import threading
import time

from harness import SharedServerTestCase, SLOW


class HostileInputTest(SharedServerTestCase):

    server_args = ("--rate-limit", "off", "--request-timeout", "1s")

    def setUp(self):
        super().setUp()
        # A known row and counts that no hostile request may change.
        st, _, doc, _ = self.srv.put("h-item", "h-user", "like")
        self.assertEqual(st, 200)
        self.before = (self.srv.reaction("h-item", "h-user"), self.srv.stable_counts("h-item"))

    def tearDown(self):
        st, _, doc, _ = self.srv.json("GET", "/healthz")
        self.assertEqual(st, 200, "the server stopped answering /healthz")
        after = (self.srv.reaction("h-item", "h-user"), self.srv.stable_counts("h-item"))
        self.assertEqual(after, self.before, "hostile input changed the store")
        m = self.srv.json("GET", "/metrics")[3].decode()
        line = [l for l in m.splitlines() if l.startswith("tally_transitions_total ")]
        self.assertTrue(line)
        super().tearDown()

    def raw(self, data, timeout=3.0):
        return self.srv.raw(data, timeout=timeout)

    def test_garbage_bytes(self):
        for blob in (b"\x00" * 64, bytes(range(256)) * 4, b"\xff\xfe\r\n\r\n", b"GARBAGE\r\n\r\n",
                     b"\r\n" * 100, b"GET\r\n\r\n"):
            out = self.raw(blob)
            self.assertTrue(out == b"" or out.startswith(b"HTTP/1.1 4"), out[:200])

    def test_broken_request_lines(self):
        for line in (b"GET / HTTP/9.9\r\n\r\n", b"GET /v1/items/x\r\n\r\n", b"PUT  HTTP/1.1\r\n\r\n",
                     b"GET /v1/items/x HTTP/1.1\r\nHost x\r\n\r\n",
                     b"GET /v1/items/x HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                     b"PUT /v1/items/h-item/like HTTP/1.1\r\nX-User-Id: h-user\r\n"
                     b"Content-Length: 99999999999999999999\r\n\r\n"):
            out = self.raw(line)
            self.assertFalse(out.startswith(b"HTTP/1.1 2"), (line, out[:200]))

    def test_huge_headers(self):
        big = b"X-Junk: " + b"a" * (64 * 1024) + b"\r\n"
        out = self.raw(b"GET /v1/items/x HTTP/1.1\r\nHost: localhost\r\n" + big + b"\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:200])
        self.assertIn(b"urn:tally:error:headers-too-large", out)
        out = self.raw(b"PUT /v1/items/h-item/dislike HTTP/1.1\r\nHost: localhost\r\nX-User-Id: h-user\r\n" + big + b"\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:200])
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(2000))
        out = self.raw(b"GET /v1/items/x HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n")
        self.assertFalse(out.startswith(b"HTTP/1.1 5"), out[:200])

    def test_half_requests_then_close(self):
        for part in (b"PUT /v1/items/h-item/reaction HTTP/1.1\r\nX-User-Id: h-user\r\n",
                     b"PUT /v1/items/h-item/reaction HTTP/1.1\r\nX-User-Id: h-user\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"reaction\":\"dis"):
            for _ in range(20):
                s = socket.create_connection((self.srv.host, self.srv.port), timeout=2)
                s.sendall(part)
                s.close()

    def test_slow_clients_are_closed(self):
        socks = []
        try:
            for _ in range(20):
                s = socket.create_connection((self.srv.host, self.srv.port), timeout=5)
                s.sendall(b"GET /v1/items/x HTTP/1.1\r\nHo")
                socks.append(s)
            # Meanwhile others are served.
            self.assertEqual(self.srv.json("GET", "/healthz")[0], 200)
            time.sleep(1.5 * SLOW + 0.5)  # past --request-timeout 1s
            closed = 0
            for s in socks:
                s.settimeout(2)
                try:
                    closed += s.recv(100) == b""
                except (ConnectionResetError, socket.timeout):
                    closed += 1
            self.assertEqual(closed, len(socks), "slow clients were not closed by the request timeout")
        finally:
            for s in socks:
                s.close()

    def test_pipelining_answers_in_order(self):
        reqs = b"".join(b"GET /v1/items/p%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % i for i in range(10))
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=5)
        try:
            s.sendall(reqs + b"GET /v1/items/last HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            deadline = time.monotonic() + 5 * SLOW
            while time.monotonic() < deadline:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        finally:
            s.close()
        items = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["item"]
                 for part in data.split(b"HTTP/1.1 200 OK")[1:]]
        self.assertEqual(items, ["p%d" % i for i in range(10)] + ["last"])

    def test_invalid_bodies_and_ids(self):
        cases = [
            ("PUT", "/v1/items/h-item/reaction", b'{"reaction":"\xff\xfe"}', 400),       # invalid UTF-8
            ("PUT", "/v1/items/h-item/reaction", b"[" * 5000 + b"]" * 5000, 413),         # deep nesting, too long
            ("PUT", "/v1/items/h-item/reaction", b"[" * 2000 + b"]" * 2000, 400),         # deep nesting
            ("PUT", "/v1/items/h-item/reaction", b'{"reaction":"like","x":1e999999}', 400),  # huge number
            ("PUT", "/v1/items/h-item/reaction", b'{"reaction":"li\\u0000ke"}', 400),      # NUL in a string
            ("PUT", "/v1/items/h-item/reaction", b'{"reaction":"dislike","reaction":"like"}', 400),
            ("PUT", "/v1/items/h-item%00/reaction", b'{"reaction":"dislike"}', 400),       # NUL in an id
            ("PUT", "/v1/items/h-item\xc3\xa9/reaction", b'{"reaction":"dislike"}', 400),
            ("DELETE", "/v1/items/h-item/reaction?x=" + "y" * 3000, b"", None),          # query ignored: changes
        ]
        for method, path, body, want in cases[:-1]:
            req = (b"%s %s HTTP/1.1\r\nHost: localhost\r\nX-User-Id: h-user\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (method.encode(), path.encode(
                       "latin-1") if isinstance(path, str) else path, len(body))) + body
            out = self.raw(req)
            self.assertTrue(out.startswith(b"HTTP/1.1 %d" % want), (path, body[:40], out[:300]))

    def test_concurrent_garbage_storm(self):
        stop = time.monotonic() + 2.0
        errors = []

        def storm(n):
            i = 0
            while time.monotonic() < stop and i < 200:
                i += 1
                try:
                    s = socket.create_connection((self.srv.host, self.srv.port), timeout=2)
                    s.sendall(bytes((n * 31 + i * 7 + k) % 256 for k in range(300)))
                    s.close()
                except OSError as e:
                    errors.append(e)

        threads = [threading.Thread(target=storm, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(self.srv.json("GET", "/healthz")[0], 200)
