"""Webhook admin writes that race (docs/api.md § "Webhooks (admin)"): the decision of each change (the
limit of 64 webhooks, the webhook still existing, the secret in force) is made by the writer in
its transaction, so concurrent requests never decide from the same stale view. On PostgreSQL the
same with the requests split over two nodes of one database. Also /metrics while a receiver hangs
(the delivery thread's figures are read from memory, never behind its store reads or transfers).
"""

import hashlib
import hmac
import socket
import threading
import time

from harness import SLOW, PgDatabase, Server, TallyTestCase, pg_only, uid
from test_webhooks import Receiver

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0", "--webhook-allow", "127.0.0.0/8"]
MAX_HOOKS = 64
URL = "http://127.0.0.1:9/hook"  # nothing listens: deliveries fail, which these tests ignore


def together(n, fn):
    """Runs fn(i) for i in range(n) on n threads released at once; returns the results in order."""
    out = [None] * n
    gate = threading.Barrier(n)

    def run(i):
        try:
            gate.wait(10)
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 (reported as the result)
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


class WebhookRaceCase(TallyTestCase):

    def call(self, srv, method, path, body=None):
        c = srv.client()
        try:
            st, _, doc, raw = c.json(method, path, body, headers=ADMIN)
            return st, doc, raw
        finally:
            c.close()

    def listing(self, srv):
        st, doc, raw = self.call(srv, "GET", "/v1/admin/webhooks")
        self.assertEqual(st, 200, raw[:300])
        return doc["webhooks"]

    def creates_stop_at_the_limit(self, nodes):
        extra = 16
        results = together(MAX_HOOKS + extra,
                           lambda i: self.call(nodes[i % len(nodes)], "POST", "/v1/admin/webhooks",
                                               {"url": URL}))
        statuses = [r[0] if isinstance(r, tuple) else repr(r) for r in results]
        self.assertEqual(statuses.count(201), MAX_HOOKS, statuses)
        self.assertEqual(statuses.count(400), extra, statuses)
        for st, doc, raw in results:
            if st == 400:
                self.assertEqual(doc["type"], "urn:tally:error:invalid-parameter", raw[:300])
        created = {doc["id"] for st, doc, _ in results if st == 201}
        for srv in nodes:
            self.assertEqual({w["id"] for w in self.listing(srv)}, created)
        # one deleted: exactly one more fits
        st, _, raw = self.call(nodes[0], "DELETE", "/v1/admin/webhooks/" + sorted(created)[0])
        self.assertEqual(st, 204, raw[:300])
        results = together(4, lambda i: self.call(nodes[i % len(nodes)], "POST", "/v1/admin/webhooks",
                                                  {"url": URL}))
        self.assertEqual(sorted(r[0] for r in results), [201, 400, 400, 400], results)
        self.assertEqual(len(self.listing(nodes[-1])), MAX_HOOKS)

    def delete_racing_rotation(self, nodes, rounds=12):
        """Each round: a webhook deleted and its secret rotated at the same moment (several
        rotations). A delete answered 204 is final: the webhook never comes back; a rotation
        answers 200 (before the delete) or 404 (after), never resurrecting it."""
        for r in range(rounds):
            st, doc, raw = self.call(nodes[0], "POST", "/v1/admin/webhooks", {"url": URL})
            self.assertEqual(st, 201, raw[:300])
            hook = doc["id"]

            def one(i, hook=hook):
                srv = nodes[i % len(nodes)]
                if i == 0:
                    return self.call(srv, "DELETE", "/v1/admin/webhooks/" + hook)
                return self.call(srv, "POST", "/v1/admin/webhooks/%s/secret" % hook, {})

            results = together(4, one)
            self.assertEqual(results[0][0], 204, results[0])
            for st, _, raw in results[1:]:
                self.assertIn(st, (200, 404), raw[:300])
            for srv in nodes:
                self.assertNotIn(hook, {w["id"] for w in self.listing(srv)},
                                 "round %d: a rotation resurrected a deleted webhook" % r)
                st, _, raw = self.call(srv, "POST", "/v1/admin/webhooks/%s/secret" % hook, {})
                self.assertEqual(st, 404, raw[:300])

    def rotations_chain(self, nodes):
        """Concurrent rotations of one webhook: each takes the secrets alive at its commit, so
        exactly three of eight succeed (4 secrets alive at most: 409 too-many-secrets for the
        rest), and after them a delivery is signed with the three given by those rotations, the
        last first, and the original (a rotation decided from a stale view would lose some)."""
        with Receiver() as rx:
            original = "original-" + "o" * 40
            st, doc, raw = self.call(nodes[0], "POST", "/v1/admin/webhooks", {"url": rx.url(), "secret": original})
            self.assertEqual(st, 201, raw[:300])
            hook = doc["id"]
            secrets = ["s%02d-" % i + "x" * 40 for i in range(8)]
            results = together(len(secrets), lambda i: self.call(
                nodes[i % len(nodes)], "POST", "/v1/admin/webhooks/%s/secret" % hook, {"secret": secrets[i]}))
            self.assertEqual(sorted(r[0] for r in results), [200] * 3 + [409] * 5, results)
            for st, doc, raw in results:
                if st == 409:
                    self.assertEqual(doc["type"], "urn:tally:error:too-many-secrets", raw[:300])
            taken = {secrets[i] for i, r in enumerate(results) if r[0] == 200}
            time.sleep(0.8)  # the delivery thread reads the definitions twice a second
            c = nodes[0].client()
            try:
                st, _, raw = c.request("POST", "/v1/items/%s/reaction:toggle" % uid("r"), body=b'{"reaction":"like"}',
                                       headers={"X-User-Id": "u1", "Content-Type": "application/json",
                                                "Idempotency-Key": uid("k")})
                self.assertEqual(st, 200, raw[:200])
            finally:
                c.close()
            deadline = time.monotonic() + 10 * SLOW
            while not rx.got() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(rx.got(), "a delivery")
            req = rx.got()[0]
            parts = [p.split("=", 1) for p in req["headers"]["Tally-Signature"].split(",")]
            t = parts[0][1]
            v1 = [v for k, v in parts[1:] if k == "v1"]
            signed = [next((x for x in secrets + [original]
                            if hmac.new(x.encode(), t.encode() + b"." + req["body"], hashlib.sha256).hexdigest()
                            == v), None) for v in v1]
            self.assertEqual(len(signed), 4, signed)
            self.assertEqual(set(signed[:3]), taken, "signed with every secret the rotations gave")
            self.assertEqual(signed[3], original, "and with the original, still alive")


class WebhookRaceTest(WebhookRaceCase):
    def test_concurrent_creates_stop_at_64(self):
        with Server(args=FAST) as srv:
            self.creates_stop_at_the_limit([srv])
            srv.stop()

    def test_delete_racing_rotation_never_resurrects(self):
        with Server(args=FAST) as srv:
            self.delete_racing_rotation([srv])
            srv.stop()

    def test_concurrent_rotations_chain(self):
        with Server(args=FAST) as srv:
            self.rotations_chain([srv])
            srv.stop()


@pg_only("two nodes on one database")
class WebhookRaceNodesTest(WebhookRaceCase):
    def test_two_nodes_concurrent_creates_and_deletes(self):
        with Server(args=FAST) as a:
            b = a.node()
            try:
                self.creates_stop_at_the_limit([a, b])
                st, doc, raw = self.call(a, "GET", "/v1/admin/webhooks")
                for w in doc["webhooks"]:  # room for the next rounds
                    self.assertEqual(self.call(b, "DELETE", "/v1/admin/webhooks/" + w["id"])[0], 204)
                self.delete_racing_rotation([a, b], rounds=6)
                self.rotations_chain([a, b])
                b.stop()
            finally:
                b.close()
            a.stop()

    def test_decisions_hold_when_the_database_defaults_to_repeatable_read(self):
        # An operator's default_transaction_isolation must not weaken the writer's decisions: each
        # statement after the advisory lock has to see the other node's commit (READ COMMITTED is
        # asked for explicitly). Failed before: 80 of 80 creates succeeded; a deleted webhook came back.
        db = PgDatabase()
        db.sql("ALTER DATABASE \"%s\" SET default_transaction_isolation = 'repeatable read'" % db.name)
        with Server(args=FAST, store=db) as a:
            b = a.node()
            try:
                self.creates_stop_at_the_limit([a, b])
                st, doc, raw = self.call(a, "GET", "/v1/admin/webhooks")
                for w in doc["webhooks"]:
                    self.assertEqual(self.call(b, "DELETE", "/v1/admin/webhooks/" + w["id"])[0], 204)
                self.delete_racing_rotation([a, b], rounds=10)
                b.stop()
            finally:
                b.close()
            a.stop()


class HangingReceiver:
    """Accepts connections and never answers (a receiver that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


class WebhookMetricsTest(WebhookRaceCase):
    def test_metrics_prompt_while_receiver_hangs(self):
        rx = HangingReceiver()
        try:
            with Server(args=FAST + ["--webhook-timeout", "60s"]) as srv:
                url = "http://127.0.0.1:%d/hook" % rx.port
                hooks = [self.call(srv, "POST", "/v1/admin/webhooks", {"url": url})[1]["id"]
                         for _ in range(4)]
                c = srv.client()
                try:
                    for i in range(5):
                        st, _, raw = c.request("POST", "/v1/items/%s/reaction:toggle" % uid("m"),
                                               body=b'{"reaction":"like"}',
                                               headers={"X-User-Id": "u1", "Content-Type": "application/json",
                                                        "Idempotency-Key": uid("k")})
                        self.assertEqual(st, 200, raw[:200])
                finally:
                    c.close()
                deadline = time.monotonic() + 10 * SLOW
                while len(rx.conns) < len(hooks) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertGreaterEqual(len(rx.conns), 1, "the deliveries reached the hanging receiver")
                worst = 0.0
                for _ in range(10):
                    t0 = time.monotonic()
                    st, _, body = srv.request("GET", "/metrics")
                    worst = max(worst, time.monotonic() - t0)
                    self.assertEqual(st, 200)
                    time.sleep(0.02)
                self.assertLess(worst, 0.5 * SLOW, "GET /metrics took %.2fs while deliveries hang" % worst)
                text = body.decode()
                for h in hooks:
                    line = [ln for ln in text.split("\n")
                            if ln.startswith('tally_webhook_oldest_undelivered_seconds{webhook="%s"}' % h)]
                    self.assertEqual(len(line), 1, "the hanging webhook's lag is shown")
                    self.assertGreater(float(line[0].split()[-1]), 0.0, line)
                srv.stop()
        finally:
            rx.close()
