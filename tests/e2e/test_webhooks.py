"""Webhooks (docs/api.md § "Webhooks (admin)"), against a real receiver: a python http.server on
127.0.0.1 in a thread that answers 200, fails with 500, hangs past --webhook-timeout, answers
slowly or redirects.

Every delivery is checked against GET /v1/changes: each transition delivered, in commit order,
repeats only as whole batches sent again with the same Tally-Delivery-Id, and signed with the
secret (Tally-Signature: t=…,v1=HMAC-SHA256("<t>.<body>")). Also: the default allow list
(loopback refused: 400 for an address, refused-address for a name), redirects not followed, the
delivered position across a restart and across kill -9, secret rotation (two signatures), resume,
the expired state, the admin routes, the metrics; on PostgreSQL two nodes (one delivers, the
other takes over when it is killed).
"""

import hashlib
import hmac
import http.server
import json
import threading
import time

from harness import PG, SHARDS, SLOW, Server, one_shard, TallyTestCase, child_env, long_reals, pg_only, run_tallyd, uid

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
ALLOW = ["--webhook-allow", "127.0.0.0/8"]
QUICK = ["--webhook-timeout", "1s", "--webhook-backoff-min", "100ms", "--webhook-backoff-max", "400ms"]
WAIT_S = 15 * SLOW


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a connection tallyd dropped (its timeout, a kill -9) is no test failure


class Receiver:
    """A local HTTP receiver. mode (settable at any time): "ok", "fail" (500), "hang" (answers
    only after hang_s, past the webhook timeout), "slow" (200 after slow_s), "redirect" (302 to
    /followed). A list of plans (modes, one per request, then mode) can be queued. Records every
    request: (path, headers, body, the status it answered, monotonic time)."""

    def __init__(self, mode="ok", hang_s=2.5, slow_s=0.3):
        self.mode, self.hang_s, self.slow_s = mode, hang_s, slow_s
        self.plan = []
        self.lock = threading.Lock()
        self.requests = []
        self.arrivals = []  # the Tally-Delivery-Id of each request as it arrives
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with receiver.lock:
                    receiver.arrivals.append(self.headers.get("Tally-Delivery-Id"))
                    mode = receiver.plan.pop(0) if receiver.plan else receiver.mode
                status = {"ok": 200, "slow": 200, "fail": 500, "hang": 200, "redirect": 302}[mode]
                if mode == "hang":
                    time.sleep(receiver.hang_s)
                elif mode == "slow":
                    time.sleep(receiver.slow_s)
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers),
                                              "body": body, "status": status, "mode": mode,
                                              "at": time.monotonic()})
                try:
                    self.send_response(status)
                    if status == 302:
                        self.send_header("Location", "/followed")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"no")  # never shown by tallyd
                except OSError:
                    pass  # tallyd gave up (the hang)

            def log_message(self, *args):
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True)
        self.thread.start()

    def url(self, host="127.0.0.1", path="/hook"):
        return "http://%s:%d%s" % (host, self.port, path)

    def got(self):
        with self.lock:
            return list(self.requests)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def metric(srv, sample):
    """The value of one sample line (name with its labels) on GET /metrics; None if absent."""
    st, _, body = srv.request("GET", "/metrics")
    if st != 200:
        raise AssertionError("GET /metrics -> %s %r" % (st, body[:300]))
    for line in body.decode("utf-8").split("\n"):
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


def verify_signature(test, req, secrets):
    """The Tally-Signature of req carries one v1= per secret, in that order, each the HMAC of
    "<t>.<body>"."""
    header = req["headers"].get("Tally-Signature", "")
    parts = [p.split("=", 1) for p in header.split(",")]
    test.assertEqual(parts[0][0], "t", header)
    t = parts[0][1]
    test.assertLess(abs(int(t) - time.time()), 120, "t is the attempt's unix time")
    v1 = [v for k, v in parts[1:] if k == "v1"]
    want = [hmac.new(s.encode(), t.encode() + b"." + req["body"], hashlib.sha256).hexdigest()
            for s in secrets]
    test.assertEqual(v1, want, "signatures of %r" % header)


class WebhookCase(TallyTestCase):

    def create(self, srv, url, secret=None, status=201):
        body = {"url": url}
        if secret is not None:
            body["secret"] = secret
        st, _, doc, raw = srv.json("POST", "/v1/admin/webhooks", body, headers=ADMIN)
        self.assertEqual(st, status, raw[:300])
        return doc

    def delivered_up_to(self, srv, hook_id, expected):
        """Whether the webhook has delivered every entry of `expected` (change-feed entries): its
        `delivered` is the last one's cursor with one shard; with several, each shard's delivered
        entry cursor (`delivered_shards`) is that shard's last one in `expected`."""
        w = self.listing(srv, hook_id)
        if w is None:
            return False
        if "delivered_shards" not in w:
            return w["delivered"] == expected[-1]["cursor"]
        last = {}
        for e in expected:
            last[int(e["cursor"].split(".")[0])] = e["cursor"]
        return all(w["delivered_shards"][k] == c for k, c in last.items())

    def listing(self, srv, hook_id=None):
        doc = self.assertOk(srv.json("GET", "/v1/admin/webhooks", headers=ADMIN))
        if hook_id is None:
            return doc["webhooks"]
        found = [w for w in doc["webhooks"] if w["id"] == hook_id]
        return found[0] if found else None

    def wait_for(self, what, cond, timeout=WAIT_S, interval=0.05):
        deadline = time.monotonic() + timeout
        while True:
            v = cond()
            if v:
                return v
            if time.monotonic() > deadline:
                self.fail("timed out waiting for " + what)
            time.sleep(interval)

    def feed(self, srv, after):
        """Every change after cursor `after` (a string), in order."""
        out = []
        for _ in range(1000):
            doc = self.assertOk(srv.json("GET", "/v1/changes?limit=1000&after=" + after, headers=ADMIN))
            out += doc["changes"]
            if not doc["changes"]:
                return out
            after = doc["next"]
        self.fail("the feed did not end")

    def newest(self, srv):
        doc = self.assertOk(srv.json("GET", "/v1/changes?limit=1000", headers=ADMIN))
        nxt = doc["next"]
        while doc["changes"]:
            doc = self.assertOk(srv.json("GET", "/v1/changes?limit=1000&after=" + nxt, headers=ADMIN))
            nxt = doc["next"]
        return nxt

    def writes(self, srv, n, items=3, users=5):
        """n transitions (toggles of a few items by a few users)."""
        its = [uid("wi") for _ in range(items)]
        us = [uid("wu") for _ in range(users)]
        c = srv.client()
        try:
            for i in range(n):
                st, _, raw = c.request("POST", "/v1/items/%s/reaction:toggle" % its[i % items],
                                       body=b'{"reaction":"like"}',
                                       headers={"X-User-Id": us[(i // items) % users],
                                                "Content-Type": "application/json",
                                                "Idempotency-Key": uid("k")})
                self.assertEqual(st, 200, raw[:200])
        finally:
            c.close()

    def check_deliveries(self, requests, expected, hook_id, secrets=None):
        """requests (the receiver's, 2xx or not) against expected (the feed's entries): every
        entry delivered, in order; a delivery id always carries the same transitions; a new
        batch is sent only after the one before it was answered 2xx; batches of at most 100.
        Returns the batches in order as (delivery id, cursors)."""
        batches, by_id, answered_ok = [], {}, set()
        for r in requests:
            self.assertEqual(r["path"], "/hook")
            h = r["headers"]
            self.assertEqual(h.get("Content-Type"), "application/json")
            self.assertEqual(h.get("Tally-Webhook-Id"), hook_id)
            did = h.get("Tally-Delivery-Id")
            self.assertTrue(did, "a Tally-Delivery-Id")
            if secrets:
                verify_signature(self, r, secrets)
            doc = json.loads(r["body"])
            self.assertEqual(set(doc), {"webhook", "mode", "transitions"})
            self.assertEqual((doc["webhook"], doc["mode"]), (hook_id, "one"))
            self.assertTrue(0 < len(doc["transitions"]) <= 100, len(doc["transitions"]))
            if did in by_id:
                self.assertEqual(doc["transitions"], by_id[did],
                                 "a retry of delivery %s carries the same transitions" % did)
            else:
                if batches:
                    self.assertIn(batches[-1][0], answered_ok,
                                  "batch %s sent before %s was delivered" % (did, batches[-1][0]))
                by_id[did] = doc["transitions"]
                batches.append((did, [e["cursor"] for e in doc["transitions"]]))
            if 200 <= r["status"] < 300:
                answered_ok.add(did)
        delivered = [e for did, _ in batches for e in by_id[did]]
        if SHARDS > 1:
            # one order per shard: between shards, the webhook's batches (taken as entries became
            # visible) and a later read of the feed may interleave them differently
            def per_shard(es):
                out = {}
                for e in es:
                    out.setdefault(e["cursor"].split(".")[0], []).append(e)
                return out
            self.assertEqual({k: [e["cursor"] for e in v] for k, v in per_shard(delivered).items()},
                             {k: [e["cursor"] for e in v] for k, v in per_shard(expected).items()},
                             "every transition, in each shard's order, each batch once")
            self.assertEqual(per_shard(delivered), per_shard(expected), "the entries are the change feed's")
        else:
            self.assertEqual([e["cursor"] for e in delivered], [e["cursor"] for e in expected],
                             "every transition, in order, each batch once")
            self.assertEqual(delivered, expected, "the entries are the change feed's")
        self.assertIn(batches[-1][0], answered_ok, "the last batch was delivered")
        return batches


class WebhookDeliveryTest(WebhookCase):

    def test_delivery_in_order_signed(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as s:
            self.writes(s, 3)
            start = self.newest(s)
            secret = "s3cret-" + "x" * 40
            doc = self.create(s, rc.url(), secret=secret)
            self.assertEqual(set(doc), {"id", "url", "secret", "created"})
            self.assertEqual((doc["url"], doc["secret"]), (rc.url(), secret))
            self.writes(s, 250)
            expected = self.feed(s, start)
            self.assertEqual(len(expected), 250)
            last = expected[-1]["cursor"]
            self.wait_for("every transition delivered",
                          lambda: self.delivered_up_to(s, doc["id"], expected))
            batches = self.check_deliveries(rc.got(), expected, doc["id"], [secret])
            self.assertGreaterEqual(len(batches), 3, "250 transitions need 3 batches at least")
            w = self.listing(s, doc["id"])
            self.assertEqual(set(w) - {"delivered_shards"}, {"id", "url", "created", "delivered", "lag_s",
                                                             "failing_since", "last_error", "state"})
            self.assertEqual("delivered_shards" in w, PG and SHARDS > 1, "each shard's cursor with several")
            self.assertEqual((w["state"], w["last_error"], w["failing_since"], w["lag_s"]),
                             ("active", None, None, 0))
            self.assertNotIn("secret", json.dumps(self.listing(s)))
            self.assertGreaterEqual(metric(s, 'tally_webhook_deliveries_total{webhook="%s"}' % doc["id"]),
                                    len(batches))
            self.assertEqual(metric(s, 'tally_webhook_oldest_undelivered_seconds{webhook="%s"}' % doc["id"]), 0)

    def test_voided_user_entries_carry_counted_and_fold_to_the_counts(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as s:
            start = self.newest(s)
            doc = self.create(s, rc.url())
            item, bot, u1 = uid("wv"), uid("bot"), uid("u")
            s.put(item, bot, "like")
            s.put(item, u1, "like")
            self.assertOk(s.json("POST", "/v1/admin/users/%s/void" % bot, headers=ADMIN))
            s.put(item, bot, "dislike")
            s.put(item, u1, "dislike")
            self.assertOk(s.json("POST", "/v1/admin/users/%s/restore" % bot, headers=ADMIN))
            expected = self.feed(s, start)
            last = expected[-1]["cursor"]
            self.wait_for("every transition delivered", lambda: self.delivered_up_to(s, doc["id"], expected))
            self.check_deliveries(rc.got(), expected, doc["id"])
            delivered = [e for r in rc.got() for e in json.loads(r["body"])["transitions"]]
            self.assertEqual([e.get("counted") for e in delivered],
                             [None, None, [True, False], [False, False], None, [False, True]])
            counts = {"like": 0, "dislike": 0}
            for e in delivered:  # the fold docs/api.md gives
                before, after = e.get("counted", [True, True])
                if before and e["from"] != "none":
                    counts[e["from"]] -= 1
                if after and e["to"] != "none":
                    counts[e["to"]] += 1
            self.assertEqual(counts, {"like": 0, "dislike": 2})
            self.assertCounts(s, item, counts)

    def test_generated_secret(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as s:
            doc = self.create(s, rc.url())
            self.assertGreaterEqual(len(doc["secret"]), 32)
            other = self.create(s, rc.url())
            self.assertNotEqual(doc["secret"], other["secret"])
            self.assertNotEqual(doc["id"], other["id"])
            st, _, _, _ = s.json("DELETE", "/v1/admin/webhooks/" + other["id"], headers=ADMIN)
            self.assertEqual(st, 204)
            start = self.newest(s)
            self.writes(s, 5)
            expected = self.feed(s, start)
            self.wait_for("delivered", lambda: self.delivered_up_to(s, doc["id"], expected))
            self.check_deliveries(rc.got(), expected, doc["id"], [doc["secret"]])

    def test_failures_retried_same_batch(self):
        """500s, a hang past the timeout, a slow answer: the same batch is sent again (same
        delivery id, same transitions) with backoff, nothing later before it; the listing says
        failing with the category, then active again."""
        with Receiver(mode="fail") as rc, Server(args=FAST + ALLOW + QUICK) as s:
            doc = self.create(s, rc.url())
            start = self.newest(s)
            self.writes(s, 30)
            self.wait_for("three failed attempts", lambda: len(rc.got()) >= 3)
            w = self.wait_for("failing", lambda: (lambda w: w if w["state"] == "failing" else None)(
                self.listing(s, doc["id"])))
            self.assertEqual(w["last_error"], "status-5xx")
            self.assertIsNotNone(w["failing_since"])
            self.assertGreater(w["lag_s"], 0)
            # a lag in milliseconds over 1000 prints as that decimal (not 2.0030000000000001)
            st, _, raw = s.request("GET", "/v1/admin/webhooks", headers=ADMIN)
            self.assertEqual((st, long_reals(raw)), (200, []), raw[:300])
            self.writes(s, 150)  # more arrives while it fails: none of it goes before the first batch
            with rc.lock:
                rc.mode = "hang"
            n = len(rc.got())
            self.wait_for("the timeout", lambda: self.listing(s, doc["id"])["last_error"] == "timeout",
                          timeout=10 * SLOW)
            with rc.lock:
                rc.mode = "slow"
            expected = self.feed(s, start)
            self.assertEqual(len(expected), 180)
            self.wait_for("every transition delivered",
                          lambda: self.delivered_up_to(s, doc["id"], expected))
            got = rc.got()
            self.assertGreater(len(got), n)
            batches = self.check_deliveries(got, expected, doc["id"], [doc["secret"]])
            first_id = batches[0][0]
            attempts = [r for r in got if r["headers"]["Tally-Delivery-Id"] == first_id]
            self.assertGreaterEqual(len(attempts), 4, "the first batch was tried again and again")
            gaps = [b["at"] - a["at"] for a, b in zip(attempts, attempts[1:]) if a["mode"] == "fail"]
            self.assertTrue(all(g >= 0.08 for g in gaps), "backoff between attempts: %r" % gaps)
            w = self.listing(s, doc["id"])
            self.assertEqual((w["state"], w["last_error"], w["failing_since"]), ("active", None, None))
            self.assertGreaterEqual(metric(s, 'tally_webhook_failures_total{webhook="%s"}' % doc["id"]), 3)

    def test_redirect_not_followed(self):
        with Receiver(mode="redirect") as rc, Server(args=FAST + ALLOW + QUICK) as s:
            doc = self.create(s, rc.url())
            self.writes(s, 2)
            self.wait_for("two attempts", lambda: len(rc.got()) >= 2)
            time.sleep(0.3)
            self.assertEqual({r["path"] for r in rc.got()}, {"/hook"}, "the redirect was followed")
            w = self.listing(s, doc["id"])
            self.assertEqual(w["state"], "failing")
            self.assertEqual(w["last_error"], "status-3xx")
            self.assertNotIn("no", json.dumps(w).replace("null", ""), "the receiver's text is never shown")


class WebhookSecurityTest(WebhookCase):

    def test_default_allow_list(self):
        with Receiver() as rc, Server(args=FAST + QUICK) as s:
            for url in (rc.url(), "http://127.1.2.3/", "http://[::1]:%d/" % rc.port,
                        "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/", "http://192.168.1.1/",
                        "http://172.16.0.1/", "http://[fd00::1]/", "http://[fe80::1]/", "http://0.0.0.0/",
                        "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/"):
                self.assertProblem(s.json("POST", "/v1/admin/webhooks", {"url": url}, headers=ADMIN),
                                   400, "invalid-parameter", url)
            self.assertEqual(self.listing(s), [], "nothing was created")
            doc = self.create(s, rc.url(host="localhost"))
            self.writes(s, 2)
            w = self.wait_for("refused-address", lambda: (lambda w: w if w["last_error"] else None)(
                self.listing(s, doc["id"])))
            self.assertEqual((w["last_error"], w["state"]), ("refused-address", "failing"))
            time.sleep(0.5)
            self.assertEqual(rc.got(), [], "the receiver on loopback was reached")

    def test_proxy_variables_ignored(self):
        """A proxy in the environment (a dead port here) is not used: deliveries go straight to
        the receiver."""
        dead = "http://127.0.0.1:9"
        env = child_env({"http_proxy": dead, "https_proxy": dead, "ALL_PROXY": dead, "all_proxy": dead,
                         "HTTPS_PROXY": dead, "no_proxy": ""})
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK, env=env) as s:
            doc = self.create(s, rc.url())
            start = self.newest(s)
            self.writes(s, 3)
            expected = self.feed(s, start)
            self.wait_for("delivered past the proxy variables",
                          lambda: self.delivered_up_to(s, doc["id"], expected))
            self.check_deliveries(rc.got(), expected, doc["id"], [doc["secret"]])

    def test_bad_definitions(self):
        with Server(args=FAST + QUICK) as s:
            for body in ({"url": "ftp://example.com/x"}, {"url": "example.com/x"}, {"url": 7}, {},
                         {"url": "https://example.com/" + "a" * 2048},
                         {"url": "https://example.com/", "secret": "short"},
                         {"url": "https://example.com/", "secret": 12},
                         {"url": "http://"}):
                self.assertProblem(s.json("POST", "/v1/admin/webhooks", body, headers=ADMIN),
                                   400, "invalid-parameter", repr(body)[:80])
            self.assertProblem(s.json("POST", "/v1/admin/webhooks", b"{nope",
                                      headers=dict(ADMIN, **{"Content-Type": "application/json"})),
                               400, "invalid-json")
            self.assertEqual(self.listing(s), [])
            ok = self.create(s, "https://example.com/" + "a" * (2048 - 20))
            self.assertEqual(len(ok["url"]), 2048)

    def test_bad_flags(self):
        for args, flag in ((["--webhook-allow", "10.0.0.0/33"], "--webhook-allow"),
                           (["--webhook-allow", "localhost"], "--webhook-allow"),
                           (["--webhook-timeout", "5ms"], "--webhook-timeout"),
                           (["--webhook-backoff-min", "10s", "--webhook-backoff-max", "1s"],
                            "--webhook-backoff-max")):
            rc, _, err = run_tallyd(["--data", "/nonexistent/never-created"] + args)
            self.assertEqual(rc, 2, err)
            self.assertIn(flag, err)

    def test_admin_only(self):
        with Server(args=FAST) as s:
            self.assertProblem(s.json("GET", "/v1/admin/webhooks"), 401, "unauthenticated")
            self.assertProblem(s.json("GET", "/v1/admin/webhooks", user="u1"), 403, "forbidden")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks", {"url": "https://example.com/"},
                                      user="u1"), 403, "forbidden")
            self.assertProblem(s.json("DELETE", "/v1/admin/webhooks/wh_x", user="u1"), 403, "forbidden")
            self.assertProblem(s.json("DELETE", "/v1/admin/webhooks/wh_nope", headers=ADMIN), 404, "not-found")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/wh_nope/resume", {}, headers=ADMIN),
                               404, "not-found")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/wh_nope/secret", {}, headers=ADMIN),
                               404, "not-found")
            self.assertProblem(s.json("PUT", "/v1/admin/webhooks", {}, headers=ADMIN), 405, "method-not-allowed")
            self.assertProblem(s.json("GET", "/v1/admin/webhooks/wh_x", headers=ADMIN), 405,
                               "method-not-allowed")


class WebhookLifecycleTest(WebhookCase):

    def test_delete_stops_delivery(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as s:
            doc = self.create(s, rc.url())
            self.writes(s, 2)
            self.wait_for("a delivery", lambda: rc.got())
            st, _, _, _ = s.json("DELETE", "/v1/admin/webhooks/" + doc["id"], headers=ADMIN)
            self.assertEqual(st, 204)
            self.assertProblem(s.json("DELETE", "/v1/admin/webhooks/" + doc["id"], headers=ADMIN), 404,
                               "not-found")
            self.assertEqual(self.listing(s), [])
            time.sleep(0.8)  # the delivery thread sees the deletion
            n = len(rc.got())
            self.writes(s, 3)
            time.sleep(1.0)
            self.assertEqual(len(rc.got()), n, "a deleted webhook still delivers")
            s.restart()
            self.assertEqual(self.listing(s), [], "a deleted webhook came back")

    def test_restart_keeps_position_and_pending_batch(self):
        """A batch fixed before a stop is the batch sent after the start (same delivery id, same
        transitions), even when its first attempt never got an answer; nothing delivered before
        the stop is sent again, nothing skipped."""
        args = FAST + ALLOW + ["--webhook-timeout", "2500ms", "--webhook-backoff-min", "100ms"]
        with Receiver(mode="hang", hang_s=3) as rc, Server(args=args) as s:
            doc = self.create(s, rc.url())
            start = self.newest(s)
            self.writes(s, 120)
            self.wait_for("the first attempt", lambda: rc.arrivals)
            before = rc.arrivals[0]
            s.stop()  # while the first attempt waits for its answer: nothing recorded but the batch
            with rc.lock:
                rc.mode = "ok"
            s.start()
            self.writes(s, 10)
            expected = self.feed(s, start)
            self.wait_for("all delivered", lambda: self.delivered_up_to(s, doc["id"], expected))
            self.assertEqual(rc.arrivals[1], before, "the pending batch kept its delivery id across the restart")
            time.sleep(3.5)  # the hung first attempt ends (answered after tallyd gave up on it)
            self.check_deliveries(rc.got(), expected, doc["id"], [doc["secret"]])
            # and the position itself survives: a restart sends nothing again
            n = len(rc.got())
            s.restart()
            time.sleep(1.0)
            self.assertEqual(len(rc.got()), n, "delivered batches sent again after a restart")

    def test_kill9_mid_delivery_skips_nothing(self):
        with Receiver(mode="slow", slow_s=0.3) as rc, Server(args=FAST + ALLOW + QUICK) as s:
            doc = self.create(s, rc.url())
            start = self.newest(s)
            self.writes(s, 400, items=7, users=11)
            self.wait_for("the second batch on its way", lambda: len(rc.arrivals) >= 2)
            s.kill9()  # the second batch is waiting for its answer
            time.sleep(0.4)
            sent = sum(len(json.loads(r["body"])["transitions"]) for r in rc.got())
            self.assertLess(sent, 400, "killed after every delivery, not in the middle")
            s.start()
            self.writes(s, 50)
            expected = self.feed(s, start)
            self.assertEqual(len(expected), 450)
            self.wait_for("all delivered", lambda: self.delivered_up_to(s, doc["id"], expected),
                          timeout=30 * SLOW)
            self.check_deliveries(rc.got(), expected, doc["id"], [doc["secret"]])

    def test_secret_rotation(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK + ["--webhook-secret-overlap", "3s"]) as s:
            old = "old-secret-" + "o" * 30
            doc = self.create(s, rc.url(), secret=old)
            self.writes(s, 1)
            self.wait_for("first", lambda: len(rc.got()) == 1)
            verify_signature(self, rc.got()[0], [old])
            rot = self.assertOk(s.json("POST", "/v1/admin/webhooks/%s/secret" % doc["id"], {}, headers=ADMIN))
            new = rot["secret"]
            self.assertNotEqual(new, old)
            self.assertGreaterEqual(len(new), 32)
            time.sleep(0.8)  # the delivery thread reads the definitions twice a second
            self.writes(s, 1)
            self.wait_for("second", lambda: len(rc.got()) == 2)
            verify_signature(self, rc.got()[1], [new, old])
            time.sleep(3.5)
            self.writes(s, 1)
            self.wait_for("third", lambda: len(rc.got()) == 3)
            verify_signature(self, rc.got()[2], [new])
            given = "given-secret-" + "g" * 30
            rot = self.assertOk(s.json("POST", "/v1/admin/webhooks/%s/secret" % doc["id"], {"secret": given},
                                       headers=ADMIN))
            self.assertEqual(rot["secret"], given)
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/%s/secret" % doc["id"], {"secret": "x"},
                                      headers=ADMIN), 400, "invalid-parameter")

    def test_rotations_keep_every_promised_secret(self):
        """Each rotation promises the secret it replaces until previous_valid_until: a second
        rotation inside that time keeps it too; at most 4 secrets are alive at once."""
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK + ["--webhook-secret-overlap", "4s"]) as s:
            secrets = ["secret-zero-" + "0" * 30]
            doc = self.create(s, rc.url(), secret=secrets[0])
            path = "/v1/admin/webhooks/%s/secret" % doc["id"]
            for _ in range(3):
                rot = self.assertOk(s.json("POST", path, {}, headers=ADMIN))
                secrets.insert(0, rot["secret"])
            # a fourth previous secret would make five alive: refused, nothing changed
            too_many = self.assertProblem(s.json("POST", path, {}, headers=ADMIN), 409, "too-many-secrets")
            self.assertIn("4", too_many["detail"])
            time.sleep(0.8)  # the delivery thread reads the definitions twice a second
            self.writes(s, 1)
            self.wait_for("first", lambda: len(rc.got()) == 1)
            verify_signature(self, rc.got()[0], secrets)  # newest first, every promise kept
            time.sleep(4.5)  # every previous secret's time is over
            rot = self.assertOk(s.json("POST", path, {}, headers=ADMIN))
            time.sleep(0.8)
            self.writes(s, 1)
            self.wait_for("second", lambda: len(rc.got()) == 2)
            verify_signature(self, rc.got()[1], [rot["secret"], secrets[0]])

    def test_url_with_userinfo_refused(self):
        with Server(args=FAST + QUICK) as s:
            for url in ("http://user:pass@example.com/hook", "https://user@example.com/hook",
                        "https://:pass@example.com/", "https://@example.com/",
                        "HTTPS://u%40x:p@example.com:8443/x?y=1"):
                doc = self.assertProblem(s.json("POST", "/v1/admin/webhooks", {"url": url}, headers=ADMIN),
                                         400, "invalid-parameter", url)
                self.assertIn("user", doc["detail"])
            self.assertEqual(self.listing(s), [])
            ok = self.create(s, "https://example.com/a@b?c=d@e#f@g")  # an @ past the host is no userinfo
            self.assertEqual(ok["url"], "https://example.com/a@b?c=d@e#f@g")

    @one_shard("a resume after a decimal position (S.P with several shards: test_shards_feed.py)")
    def test_resume_and_expired(self):
        args = FAST + ALLOW + QUICK + ["--log-retention", "1s"]
        with Receiver(mode="fail") as rc, Server(args=args) as s:
            doc = self.create(s, rc.url())
            self.writes(s, 3)
            w = self.wait_for("expired", lambda: (lambda w: w if w["state"] == "expired" else None)(
                self.listing(s, doc["id"])), timeout=20 * SLOW)
            self.assertEqual(metric(s, 'tally_webhook_expired{webhook="%s"}' % doc["id"]), 1)
            n = len(rc.got())
            time.sleep(1.0)
            self.assertLessEqual(len(rc.got()), n + 1, "an expired webhook keeps delivering")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"], {}, headers=ADMIN),
                               410, "cursor-expired")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"], {"after": "0"},
                                      headers=ADMIN), 410, "cursor-expired")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"], {"after": "x"},
                                      headers=ADMIN), 400, "invalid-parameter")
            self.assertProblem(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"],
                                      {"after": "99999999"}, headers=ADMIN), 400, "invalid-parameter")
            # The resume is checked with the default retention: with 1 s, a loaded machine can prune
            # the writes below before they are delivered or read back, and the webhook expires again.
            # The expired state is kept across the restart. On PostgreSQL the retention is a setting
            # of the database that every node must agree with: changed there as docs/postgresql.md says.
            s.stop()
            if PG:
                for db in [s.db] + list(s.shard_dbs or []):
                    db.sql("UPDATE tally_meta SET value = '86400000' WHERE name = 'log_retention_ms'")
            s.start(args=FAST + ALLOW + QUICK)
            self.assertEqual(self.listing(s, doc["id"])["state"], "expired")
            newest = self.newest(s)
            self.assertEqual(self.assertOk(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"],
                                                  {"after": newest}, headers=ADMIN))["after"], newest)
            with rc.lock:
                rc.mode = "ok"
                rc.requests.clear()
            self.wait_for("active again", lambda: self.listing(s, doc["id"])["state"] == "active")
            self.writes(s, 2)
            expected = self.feed(s, newest)
            self.assertEqual(len(expected), 2)
            self.wait_for("delivered after the resume", lambda: self.delivered_up_to(s, doc["id"], expected))
            self.check_deliveries(rc.got(), expected, doc["id"], [doc["secret"]])
            self.assertEqual(metric(s, 'tally_webhook_expired{webhook="%s"}' % doc["id"]), 0)

    def test_resume_from_cursor_resends(self):
        """Resume to an earlier retained cursor: the transitions after it are delivered again."""
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as s:
            start = self.newest(s)
            doc = self.create(s, rc.url())
            self.writes(s, 5)
            expected = self.feed(s, start)
            self.wait_for("delivered", lambda: self.delivered_up_to(s, doc["id"], expected))
            with rc.lock:
                rc.requests.clear()
            mid = expected[1]["cursor"]
            self.assertOk(s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"], {"after": mid},
                                 headers=ADMIN))
            self.wait_for("sent again", lambda: rc.got())
            self.wait_for("delivered again",
                          lambda: self.delivered_up_to(s, doc["id"], expected))
            again = expected[2:]
            if "." in mid:  # several shards: the resume moves mid's shard only
                again = [e for e in again if e["cursor"].split(".")[0] == mid.split(".")[0]]
            self.check_deliveries(rc.got(), again, doc["id"], [doc["secret"]])


@pg_only("several nodes share one database")
class WebhookNodesTest(WebhookCase):

    def test_two_nodes_one_delivers_and_takes_over(self):
        with Receiver() as rc, Server(args=FAST + ALLOW + QUICK) as a:
            b = a.node()
            try:
                start = self.newest(a)
                doc = self.create(a, rc.url())
                self.writes(a, 60)
                self.writes(b, 60)
                expected = self.feed(a, start)
                self.wait_for("delivered", lambda: self.delivered_up_to(b, doc["id"], expected))
                got = rc.got()
                batches = self.check_deliveries(got, expected, doc["id"], [doc["secret"]])
                self.assertEqual(len(got), len(batches), "a batch delivered twice (two nodes?)")
                key = 'tally_webhook_deliveries_total{webhook="%s"}' % doc["id"]
                counts = {a: metric(a, key) or 0, b: metric(b, key) or 0}
                self.assertEqual(sorted(counts.values())[0], 0, "both nodes delivered: %r" % counts)
                leader = a if counts[a] else b
                other = b if leader is a else a
                leader.kill9()
                start2 = self.newest(other)  # where expected ends (a page token with several shards)
                self.writes(other, 40)
                expected2 = self.feed(other, start2)
                self.wait_for("the other node took over",
                              lambda: self.delivered_up_to(other, doc["id"], expected2),
                              timeout=30 * SLOW)
                self.check_deliveries(rc.got(), expected + expected2, doc["id"], [doc["secret"]])
                self.assertGreater(metric(other, key), 0)
            finally:
                b.close()
