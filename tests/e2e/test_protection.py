"""Protection, per docs/api.md (Limits) and the flags of `tallyd --help`: the per-user write rate
limit (--rate-limit), the per-address limit on reads without a user (--read-rate-limit), CORS
(--cors-origin, preflight), the connection limit (--max-connections) and the writer queue
limit (--queue-max).

Development mode throughout: the user is the X-User-Id header, `admin` is the admin."""

import collections
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest

from harness import (SLOW, Server, TallyTestCase, child_env, run_tallyd, secret as new_secret,
                     uid, metric)

ZERO = {"like": 0, "dislike": 0}
ADMIN = {"X-User-Id": "admin"}


def exit_of(flag, value):
    """(exit status, stderr) of tallyd started with one extra flag; it should not listen. Flags are
    checked before any store is opened, so an embedded directory serves whichever store is under
    test (a throwaway PostgreSQL database per start cost ~0.25 s each)."""
    tmp = tempfile.mkdtemp(prefix="tally-e2e-flag-")
    try:
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", os.path.join(tmp, "data"), flag, value])
        return rc, err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def retry_after(test, resp, msg=""):
    """Retry-After of a response: whole seconds, at least 1."""
    value = resp[1].get("retry-after")
    test.assertIsNotNone(value, "no Retry-After " + msg)
    test.assertRegex(value, r"^[0-9]+$", "Retry-After is whole seconds " + msg)
    test.assertGreaterEqual(int(value), 1, "Retry-After at least 1 " + msg)
    return int(value)


class RateCase(TallyTestCase):

    def assertRateLimited(self, resp, msg=""):
        self.assertProblem(resp, 429, "rate-limited", msg)
        return retry_after(self, resp, msg)

    def until_limited(self, send, burst, rate, bound, msg=""):
        """Calls send() (-> a Server.json tuple) until a 429, at most `bound` times. Checks that
        every answer before it is 200 and that their number fits a token bucket of `burst`
        refilled at `rate`/s over the time taken. Returns (successes, the 429 response)."""
        t0 = time.monotonic()
        ok = 0
        for _ in range(bound):
            resp = send()
            if resp[0] == 429:
                elapsed = time.monotonic() - t0
                self.assertRateLimited(resp, msg)
                self.assertGreaterEqual(ok, burst, "429 before the burst of %d was used (%s)"
                                        % (burst, msg))
                self.assertLessEqual(ok, burst + math.ceil(rate * elapsed) + 1,
                                     "%d requests passed in %.2fs: more than a bucket of %d at "
                                     "%d/s lets through (%s)" % (ok, elapsed, burst, rate, msg))
                return ok, resp
            self.assertEqual(resp[0], 200, "%s: %r" % (msg, resp[3][:300]))
            ok += 1
        self.fail("no 429 within %d requests (%d/s, burst %d) %s" % (bound, rate, burst, msg))


# ============================================================================================
class WriteRateLimitTest(RateCase):

    def test_burst_then_429_then_retry(self):
        burst, rate = 5, 1
        with Server(args=["--rate-limit", "%d/s:%d" % (rate, burst)]) as s:
            item, other, alice, bob = uid("rl"), uid("rl-other"), uid("alice"), uid("bob")
            c = s.client()
            flips = iter(range(1000))

            def flip():
                return c.json("PUT", "/v1/items/%s/reaction" % item,
                              {"reaction": "like" if next(flips) % 2 == 0 else "dislike"},
                              user=alice)

            m0 = metric(s, "tally_rate_limited_total")
            self.assertIsNotNone(m0, "no tally_rate_limited_total on /metrics")
            ok, first = self.until_limited(flip, burst, rate, 40, "writes of one user")
            limited = 1
            self.assertEqual(s.reaction(item, alice)["version"], ok, "every 200 was one change")

            # nothing changes on a 429, whatever the route (a token may come back meanwhile:
            # then that write is applied normally)
            key = uid("key")
            toggle = ("POST", "/v1/items/%s/reaction:toggle" % other, {"reaction": "dislike"},
                      {"Idempotency-Key": key})
            attempts = [
                ("PUT", "/v1/items/%s/reaction" % item, {"reaction": "none"}, None),
                ("PUT", "/v1/items/%s/like" % other, None, None),
                toggle,
                ("DELETE", "/v1/items/%s/reaction" % item, None, None),
                ("DELETE", "/v1/items/%s/dislike" % item, None, None),
            ]
            toggle_limited = False

            def state():  # counts once the fold has caught up (PostgreSQL folds just after)
                return (s.reaction(item, alice), s.reaction(other, alice), s.stable_counts(item),
                        s.stable_counts(other))

            for method, path, body, headers in attempts:
                before = state()
                resp = c.json(method, path, body, user=alice, headers=headers)
                if resp[0] == 429:
                    self.assertRateLimited(resp, "%s %s" % (method, path))
                    limited += 1
                    self.assertEqual(state(), before, "a 429 (%s %s) changed something"
                                     % (method, path))
                    toggle_limited |= (method, path) == toggle[:2]
                else:
                    self.assertEqual(resp[0], 200, resp[3][:300])
            self.assertGreaterEqual(limited, 2, "a limited user got through again at once")

            # another user is not affected
            for r in ("like", "dislike", "none"):
                self.assertEqual(s.put(item, bob, r)[0], 200, "bob is limited by alice's writes")

            # the metric counted every 429
            m1 = metric(s, "tally_rate_limited_total")
            self.assertEqual(m1 - m0, limited, "tally_rate_limited_total moved by the 429s")

            # after Retry-After the user writes again; a 429 stored no Idempotency-Key answer
            wait = retry_after(self, first)
            time.sleep(wait + 0.05)
            if toggle_limited:
                resp = c.json(*toggle[:3], user=alice, headers=toggle[3])
                doc = self.assertOk(resp, "the toggle again after waiting Retry-After")
                self.assertTrue(doc["changed"], doc)
                self.assertNotIn("idempotent-replayed", resp[1], "a 429 answer was replayed")
                self.assertEqual(s.reaction(other, alice)["reaction"], "dislike")
            else:
                self.assertOk(flip(), "after waiting Retry-After")

    def test_burst_defaults_to_twice_the_rate(self):
        with Server(args=["--rate-limit", "3/s"]) as s:
            item, u = uid("rl"), uid("u")
            c = s.client()
            n = iter(range(1000))
            self.until_limited(
                lambda: c.json("PUT", "/v1/items/%s/reaction" % item,
                               {"reaction": ("like", "dislike")[next(n) % 2]}, user=u),
                6, 3, 60, "--rate-limit 3/s")

    def test_default_is_20_per_s_burst_40(self):
        with Server() as s:
            item, u = uid("rl"), uid("u")
            c = s.client()
            n = iter(range(10000))
            ok, _ = self.until_limited(
                lambda: c.json("PUT", "/v1/items/%s/reaction" % item,
                               {"reaction": ("like", "dislike")[next(n) % 2]}, user=u),
                40, 20, 600, "default rate limit")
            self.assertEqual(s.reaction(item, u)["version"], ok)

    def test_off_disables_it(self):
        with Server(args=["--rate-limit", "off"]) as s:
            item, u = uid("rl"), uid("u")
            c = s.client()
            for i in range(120):
                resp = c.json("PUT", "/v1/items/%s/reaction" % item,
                              {"reaction": ("like", "dislike")[i % 2]}, user=u)
                self.assertEqual(resp[0], 200, "write %d with --rate-limit off: %r"
                                 % (i, resp[3][:300]))
            self.assertEqual(s.reaction(item, u)["version"], 120)
            self.assertEqual(metric(s, "tally_rate_limited_total"), 0)

    def test_reads_of_a_user_do_not_use_write_tokens(self):
        with Server(args=["--rate-limit", "1/s:2"]) as s:
            item, u = uid("rl"), uid("u")
            c = s.client()
            for _ in range(20):
                self.assertEqual(c.json("GET", "/v1/items/%s/reaction" % item, user=u)[0], 200)
                self.assertEqual(c.json("GET", "/v1/items/" + item, user=u)[0], 200)
            self.assertEqual(s.put(item, u, "like")[0], 200, "reads used the write budget")
            self.assertEqual(s.put(item, u, "dislike")[0], 200, "reads used the write budget")

    def test_bad_flag_values_exit_2(self):
        for flag in ("--rate-limit", "--read-rate-limit"):
            for value in ("0/s", "abc", "5/m", "5", "/s", "-1/s", "5/s:0", "5/s:x", "5/s:",
                          "5/sec", "1.5/s", ""):
                with self.subTest(flag=flag, value=value):
                    rc, err = exit_of(flag, value)
                    self.assertEqual(rc, 2, "%s %r: exit %r\n%s" % (flag, value, rc, err))
                    self.assertIn(flag, err, "the message names the flag")


# ============================================================================================
class ReadRateLimitTest(RateCase):

    ROUTES = (("item", "/v1/items/{id}"),
              ("batch", "/v1/items?ids={id},{id}b"),
              ("trending", "/v1/trending"))

    def test_reads_without_user_limited_per_address(self):
        burst, rate = 4, 2
        for name, template in self.ROUTES:
            with self.subTest(route=name):
                with Server(args=["--read-rate-limit", "%d/s:%d" % (rate, burst)]) as s:
                    path = template.format(id=uid("rr"))
                    c = s.client()
                    m0 = metric(s, "tally_rate_limited_total")
                    ok, _ = self.until_limited(lambda: c.json("GET", path), burst, rate, 40,
                                               "anonymous GET " + path)
                    # a read with a user is not limited by it
                    for i in range(10):
                        resp = c.json("GET", path, user=uid("reader"))
                        self.assertEqual(resp[0], 200, "GET %s with a user, #%d: %r"
                                         % (path, i, resp[3][:300]))
                    self.assertEqual(metric(s, "tally_rate_limited_total") - m0, 1,
                                     "the 429 is counted")
                    # writes are not read-limited either
                    self.assertEqual(s.put(uid("rr"), uid("w"), "like")[0], 200)

    def test_routes_share_the_address_budget_and_refill(self):
        with Server(args=["--read-rate-limit", "1/s:3"]) as s:
            c = s.client()
            item = uid("rr")
            self.until_limited(lambda: c.json("GET", "/v1/items/" + item), 3, 1, 20,
                               "anonymous item reads")
            for path in ("/v1/items?ids=" + item, "/v1/trending?window=1m"):
                resp = c.json("GET", path)
                self.assertRateLimited(resp, "GET %s after the item reads used the budget" % path)
            time.sleep(1.1)
            self.assertEqual(c.json("GET", "/v1/items/" + item)[0], 200, "refilled after 1 s")

    def test_default_read_limit_is_200_per_s_burst_400(self):
        with Server() as s:
            c = s.client()
            path = "/v1/items/" + uid("rr")
            self.until_limited(lambda: c.json("GET", path), 400, 200, 6000,
                               "default read rate limit")

    def test_off_disables_it(self):
        with Server(args=["--read-rate-limit", "off"]) as s:
            c = s.client()
            path = "/v1/items/" + uid("rr")
            for i in range(600):
                resp = c.json("GET", path)
                self.assertEqual(resp[0], 200, "read %d: %r" % (i, resp[3][:200]))


# ============================================================================================
APP = "https://app.example"
DEV = "http://localhost:3000"


class CorsTest(TallyTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server(args=["--cors-origin", APP, "--cors-origin", DEV, "--rate-limit", "off"])

    @classmethod
    def tearDownClass(cls):
        try:
            if cls.srv.running:
                cls.srv.stop()
        finally:
            cls.srv.close()
        super().tearDownClass()

    def assertNoCors(self, hdrs, msg=""):
        cors = {k: v for k, v in hdrs.items() if k.startswith("access-control-")}
        self.assertEqual(cors, {}, "CORS headers where there should be none " + msg)

    def assertCorsFor(self, hdrs, origin, msg=""):
        self.assertEqual(hdrs.get("access-control-allow-origin"), origin, msg)
        vary = [v.strip().lower() for v in hdrs.get("vary", "").split(",")]
        self.assertIn("origin", vary, "Vary: Origin with a specific allowed origin " + msg)
        expose = [v.strip().lower() for v in hdrs.get("access-control-expose-headers", "").split(",")]
        self.assertIn("etag", expose, "ETag exposed " + msg)
        self.assertNotIn("access-control-allow-credentials", hdrs, msg)

    def test_allowed_origins_on_reads_and_writes(self):
        s, item, u = self.srv, uid("cors"), uid("u")
        for origin in (APP, DEV):
            with self.subTest(origin=origin):
                h = {"Origin": origin}
                resp = s.json("GET", "/v1/items/" + item, headers=h)
                self.assertOk(resp)
                self.assertCorsFor(resp[1], origin, "GET item")
                resp = s.put(item, u, "like", headers=h)
                self.assertOk(resp)
                self.assertCorsFor(resp[1], origin, "PUT reaction")
                self.assertIn("etag", resp[1])
                resp = s.json("GET", "/v1/items/%s/reaction" % item, user=u, headers=h)
                self.assertCorsFor(resp[1], origin, "GET reaction")
                # errors are readable by the page too
                resp = s.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": "meh"},
                              user=u, headers=h)
                self.assertProblem(resp, 400, "invalid-reaction")
                self.assertCorsFor(resp[1], origin, "a 400")

    def test_other_origins_get_no_cors_headers(self):
        s, item, u = self.srv, uid("cors"), uid("u")
        for origin in ("https://evil.example", "https://app.example.evil", "http://app.example",
                       "https://app.example:443", "null", APP + "/"):
            with self.subTest(origin=origin):
                resp = s.json("GET", "/v1/items/" + item, headers={"Origin": origin})
                self.assertOk(resp)
                self.assertNoCors(resp[1], origin)
                resp = s.put(item, u, "like", headers={"Origin": origin})
                self.assertOk(resp)
                self.assertNoCors(resp[1], origin)
                st, hdrs, _ = s.request("OPTIONS", "/v1/items/%s/reaction" % item,
                                        headers={"Origin": origin,
                                                 "Access-Control-Request-Method": "PUT"})
                self.assertNoCors(hdrs, "preflight from " + origin)
        resp = s.json("GET", "/v1/items/" + item)
        self.assertNoCors(resp[1], "no Origin")

    def test_preflight(self):
        s, item = self.srv, uid("cors")
        for path in ("/v1/items/%s/reaction" % item, "/v1/items/%s/like" % item,
                     "/v1/items/%s/reaction:toggle" % item):
            with self.subTest(path=path):
                # the route's methods, as a 405 names them
                st, hdrs405, _ = s.request("PATCH", path, headers={"X-User-Id": "u1"})
                self.assertEqual(st, 405)
                route_methods = {m.strip() for m in hdrs405.get("allow", "").split(",")}
                self.assertTrue(route_methods)
                method = "POST" if path.endswith(":toggle") else "PUT"
                st, hdrs, body = s.request("OPTIONS", path, headers={
                    "Origin": APP, "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": "content-type, idempotency-key, if-match"})
                self.assertEqual(st, 204, body[:300])
                self.assertEqual(body, b"")
                self.assertCorsFor(hdrs, APP, "preflight")
                methods = {m.strip() for m in hdrs.get("access-control-allow-methods", "").split(",")}
                self.assertEqual(methods, route_methods, "Allow-Methods are the route's methods")
                self.assertIn(method, methods)
                allowed = {h.strip().lower() for h in
                           hdrs.get("access-control-allow-headers", "").split(",")}
                for name in ("authorization", "content-type", "idempotency-key", "if-match"):
                    self.assertIn(name, allowed, "Access-Control-Allow-Headers")
                self.assertRegex(hdrs.get("access-control-max-age", ""), r"^[1-9][0-9]*$")
                self.assertNotIn("access-control-allow-credentials", hdrs)

    def test_preflight_needs_no_user_and_changes_nothing(self):
        s, item = self.srv, uid("cors")
        st, hdrs, _ = s.request("OPTIONS", "/v1/items/%s/reaction" % item, headers={
            "Origin": DEV, "Access-Control-Request-Method": "DELETE"})
        self.assertEqual(st, 204)
        self.assertEqual(hdrs.get("access-control-allow-origin"), DEV)
        self.assertEqual(s.counts(item), ZERO)

    def test_options_unknown_route_404(self):
        s = self.srv
        for path in ("/v1/nope", "/v2/items/x", "/v1/items/x/reaction/extra"):
            with self.subTest(path=path):
                resp = s.json("OPTIONS", path, headers={
                    "Origin": APP, "Access-Control-Request-Method": "PUT"})
                self.assertProblem(resp, 404, "not-found")
                self.assertNotIn("access-control-allow-methods", resp[1])


class CorsConfigTest(TallyTestCase):

    def test_star_allows_any_origin_without_credentials(self):
        with Server(args=["--cors-origin", "*"]) as s:
            item = uid("cors")
            for origin in ("https://a.example", "http://localhost:8080", "null"):
                with self.subTest(origin=origin):
                    resp = s.json("GET", "/v1/items/" + item, headers={"Origin": origin})
                    self.assertOk(resp)
                    self.assertEqual(resp[1].get("access-control-allow-origin"), "*")
                    self.assertNotIn("access-control-allow-credentials", resp[1])
                    expose = resp[1].get("access-control-expose-headers", "").lower()
                    self.assertIn("etag", [v.strip() for v in expose.split(",")])
            st, hdrs, _ = s.request("OPTIONS", "/v1/items/%s/reaction" % item, headers={
                "Origin": "https://b.example", "Access-Control-Request-Method": "PUT"})
            self.assertEqual(st, 204)
            self.assertEqual(hdrs.get("access-control-allow-origin"), "*")
            self.assertIn("PUT", hdrs.get("access-control-allow-methods", ""))
            self.assertNotIn("access-control-allow-credentials", hdrs)

    def test_default_no_cors(self):
        with Server() as s:
            resp = s.json("GET", "/v1/items/x", headers={"Origin": "https://a.example"})
            self.assertOk(resp)
            self.assertFalse([k for k in resp[1] if k.startswith("access-control-")], resp[1])

    def test_preflight_in_jwt_mode_needs_no_token(self):
        env = child_env({"TALLY_JWT_SECRET": new_secret("e2e-cors")})
        with Server(args=["--cors-origin", APP], env=env) as s:
            st, hdrs, body = s.request("OPTIONS", "/v1/items/x/reaction", headers={
                "Origin": APP, "Access-Control-Request-Method": "PUT",
                "Access-Control-Request-Headers": "authorization, content-type"})
            self.assertEqual(st, 204, "a browser's preflight carries no Authorization: %r"
                             % body[:300])
            self.assertEqual(hdrs.get("access-control-allow-origin"), APP)
            # a 401 is still readable by the page
            resp = s.put("x", None, "like", headers={"Origin": APP})
            self.assertProblem(resp, 401, "unauthenticated")
            self.assertEqual(resp[1].get("access-control-allow-origin"), APP)

    def test_bad_origin_values_exit_2(self):
        for value in ("app.example", "ftp://app.example", "", "**", "localhost:3000",
                      "HTTPS//x"):
            with self.subTest(value=value):
                rc, err = exit_of("--cors-origin", value)
                self.assertEqual(rc, 2, "--cors-origin %r: exit %r\n%s" % (value, rc, err))
                self.assertIn("--cors-origin", err)


# ============================================================================================
def read_until_close(sock, timeout):
    """Everything the peer sends until it closes (or timeout). Returns (data, closed)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    chunks = []
    while time.monotonic() < deadline:
        try:
            b = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return b"".join(chunks), True
        if not b:
            return b"".join(chunks), True
        chunks.append(b)
    return b"".join(chunks), False


class OverloadTest(TallyTestCase):
    # fills the server's connection slots under a deadline: run alone (run_e2e.py -j)
    serial = True

    def assertRefused(self, data, closed):
        self.assertTrue(closed, "the refused connection was not closed: %r" % data[:300])
        head, sep, body = data.partition(b"\r\n\r\n")
        self.assertTrue(sep, "no HTTP answer on the refused connection: %r" % data[:300])
        lines = head.decode("latin-1").split("\r\n")
        self.assertRegex(lines[0], r"^HTTP/1\.[01] 503 ", lines[0])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        self.assertEqual(hdrs.get("retry-after"), "1")
        if "content-length" in hdrs:
            self.assertEqual(int(hdrs["content-length"]), len(body), "Content-Length")
        if hdrs.get("content-type", "").startswith("application/problem+json"):
            doc = json.loads(body.decode("utf-8"))
            self.assertEqual(doc.get("status"), 503)
            self.assertEqual(doc.get("type"), "urn:tally:error:overloaded")

    def healthz_ok(self, s, timeout, path="/healthz"):
        deadline = time.monotonic() + timeout * SLOW
        last = None
        while time.monotonic() < deadline:
            try:
                st, _, body = s.request("GET", path)
                if st == 200:
                    return True
                last = (st, body[:200])
            except OSError as e:
                last = e
            time.sleep(0.05)
        self.fail("GET %s not served within %ss: %r" % (path, timeout, last))

    @staticmethod
    def answered(sock):
        """True when the server wrote to sock or closed it (a refusal), False while it waits."""
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            pass
        finally:
            sock.settimeout(5)
        return True

    def fill(self, s, sockets, n):
        """Opens plain connections (sending nothing) until `sockets` holds n that the server
        accepted. A connection the server refuses (its count of open connections may lag a
        close by a moment) is answered at once; such a one is dropped and tried again. A full
        house is looked at again once a health check's reserve slot would have been refused
        (1 s without a request, server.c RESERVE_HEAD_MS): a connection that came while the count
        still held a closed one took that slot and looked accepted, and the count, caught up,
        then lets in the one the test means to be refused."""
        for _ in range(50):
            if len(sockets) >= n:
                time.sleep(1.0 + 0.5 * SLOW)
                refused = [sock for sock in sockets if self.answered(sock)]
                if not refused:
                    return
                for sock in refused:
                    sockets.remove(sock)
                    sock.close()
                continue
            sock = socket.create_connection((s.host, s.port), timeout=5)
            time.sleep(0.1 * SLOW)
            if not self.answered(sock):
                sockets.append(sock)  # accepted: waiting for a request
                continue
            sock.close()  # refused (data or EOF): the count had not caught up yet
            time.sleep(0.1 * SLOW)
        self.fail("could not open %d connections" % n)

    def refused(self, s, send=b""):
        extra = socket.create_connection((s.host, s.port), timeout=5)
        try:
            if send:
                extra.sendall(send)
            data, closed = read_until_close(extra, 5 * SLOW)
        finally:
            extra.close()
        self.assertRefused(data, closed)

    def test_max_connections(self):
        n = 4
        with Server(args=["--max-connections", str(n), "--threads", "2",
                          "--request-timeout", "60s"]) as s:
            idle = []
            try:
                self.fill(s, idle, n)
                self.refused(s)
                self.refused(s)
                # a request on a new connection is refused too, unless it is a health check
                self.refused(s, b"GET /v1/items/x HTTP/1.1\r\nHost: localhost\r\n\r\n")
                self.assertEqual(s.request("GET", "/healthz")[0], 200)
                # close two: new connections are served again
                for sock in idle[:2]:
                    sock.close()
                del idle[:2]
                self.healthz_ok(s, 5)
                # and a full house again refuses again
                self.fill(s, idle, n)
                self.refused(s)
            finally:
                for sock in idle:
                    sock.close()
            # /healthz is served even at the limit; /metrics only once the server has seen the
            # closes (later under the sanitizer's slowness)
            self.healthz_ok(s, 5, "/metrics")
            refused = metric(s, "tally_http_connections_refused_total")
            if refused is not None:
                self.assertGreaterEqual(refused, 4)

    def test_bad_max_connections_exit_2(self):
        for value in ("0", "abc", "-1", ""):
            with self.subTest(value=value):
                rc, err = exit_of("--max-connections", value)
                self.assertEqual(rc, 2, "exit %r\n%s" % (rc, err))
                self.assertIn("--max-connections", err)

    def test_queue_max_overloaded_changes_nothing(self):
        # --queue-max 1 with 32 concurrent writers: the writer queue is full most of the time
        # (each commit is fsync'd), so 503s come reliably; whatever the split, every answer is
        # 200 or 503 overloaded, and the rows and counts follow exactly the 200s.
        nthreads, per = 32, 12
        items = [uid("q") for _ in range(3)]
        with Server(args=["--queue-max", "1", "--batch-max", "1", "--rate-limit", "off"]) as s:
            lock = threading.Lock()
            statuses = collections.Counter()
            last_ok = {}  # (item, user) -> reaction of the last 200
            errors = []

            def worker(n):
                user = "qu%d-%s" % (n, uid("x"))
                c = s.client()
                try:
                    for i in range(per):
                        item = items[i % len(items)]
                        r = ("like", "dislike", "none")[(i + n) % 3]
                        resp = c.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": r},
                                      user=user)
                        with lock:
                            statuses[resp[0]] += 1
                        if resp[0] == 200:
                            last_ok[(item, user)] = r
                        elif resp[0] == 503:
                            self.assertProblem(resp, 503, "overloaded")
                            self.assertEqual(resp[1].get("retry-after"), "1")
                        else:
                            raise AssertionError("status %s: %r" % (resp[0], resp[3][:300]))
                except BaseException as e:  # reported by the main thread
                    errors.append(e)
                finally:
                    c.close()

            threads = [threading.Thread(target=worker, args=(n,), daemon=True)
                       for n in range(nthreads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60 * SLOW)
            self.assertFalse([t for t in threads if t.is_alive()], "writers did not finish")
            if errors:
                raise errors[0]
            self.assertEqual(sum(statuses.values()), nthreads * per)
            self.assertGreater(statuses[503], 0, "no 503 with --queue-max 1: %r" % statuses)
            self.assertGreater(statuses[200], 0, "nothing accepted: %r" % statuses)
            for (item, user), r in list(last_ok.items())[:40]:
                self.assertEqual(s.reaction(item, user)["reaction"], r, (item, user))
            for item in items:
                want = {"like": 0, "dislike": 0}
                for (it, _), r in last_ok.items():
                    if it == item and r != "none":
                        want[r] += 1
                self.assertCounts(s, item, want)
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
            self.assertEqual(doc["drift"], [])

    def test_bad_queue_max_exit_2(self):
        for value in ("0", "abc", ""):
            with self.subTest(value=value):
                rc, err = exit_of("--queue-max", value)
                self.assertEqual(rc, 2, "exit %r\n%s" % (rc, err))
                self.assertIn("--queue-max", err)


if __name__ == "__main__":
    unittest.main()
