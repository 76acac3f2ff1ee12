"""The change feed and webhooks on two shards (docs/api.md § "Several PostgreSQL primaries"): pages
merge both shards' logs and never skip or repeat an entry (their `next` an opaque token; an entry's
cursor "S.P" is refused as `after`), every item's transitions in version order; write answers carry
the entry cursor "S.P" the feed shows; a long poll wakes on a write to either shard; a webhook
receives every transition of both shards once per batch, per item in version order, and a batch in
flight at a restart is sent again whole under its delivery id; a resume by entry cursor moves only
that shard."""

import json
import re
import time
import zlib

from harness import SLOW, Server, TallyTestCase, pg_only, uid
from test_shards import shard_map, shard_of
from test_webhooks import ALLOW, FAST, QUICK, Receiver, WebhookCase

ADMIN = {"X-User-Id": "admin"}
ENTRY = re.compile(r"^[01]\.[1-9][0-9]*$")


def items_on_both(srv, n, prefix):
    """n items on each shard, by the map the databases hold."""
    ranges = shard_map(srv.db)
    on = {0: [], 1: []}
    i = 0
    while min(len(v) for v in on.values()) < n:
        item = "%s%d" % (prefix, i)
        i += 1
        if len(on[shard_of(ranges, item)]) < n:
            on[shard_of(ranges, item)].append(item)
    return on


def toggle(c, item, user, key=None):
    headers = {"X-User-Id": user, "Content-Type": "application/json", "Idempotency-Key": key or uid("k")}
    st, _, raw = c.request("POST", "/v1/items/%s/reaction:toggle" % item, body=b'{"reaction":"like"}',
                           headers=headers)
    return st, raw


@pg_only("shards are PostgreSQL databases")
class ShardsFeedTest(WebhookCase):

    def page(self, srv, after=None, limit=1000, wait=None):
        q = "limit=%d" % limit
        if after is not None:
            q += "&after=" + after
        if wait is not None:
            q += "&wait=%d" % wait
        return self.assertOk(srv.json("GET", "/v1/changes?" + q, headers=ADMIN))

    def check_per_item_order(self, entries):
        """Each reaction row's transitions (an item's, user by user) in version order, none missing."""
        last = {}
        for e in entries:
            row = (e["item"], e["user"])
            self.assertEqual(e["version"], last.get(row, 0) + 1, "%s out of version order" % (row,))
            last[row] = e["version"]

    def test_pages_cover_both_shards_once(self):
        with Server(shards=2, args=FAST) as srv:
            on = items_on_both(srv, 4, "f")
            items = on[0] + on[1]
            acked = {}
            c = srv.client()
            try:
                for i in range(300):
                    item = items[(i * 7) % len(items)]
                    st, raw = toggle(c, item, "u%d" % (i % 5), key=uid("k"))
                    self.assertEqual(st, 200, raw[:200])
                    doc = json.loads(raw)
                    self.assertRegex(doc["cursor"], ENTRY, "a write answer names its shard")
                    self.assertEqual(doc["cursor"].split(".")[0], str(shard_of(shard_map(srv.db), item)))
                    acked[doc["cursor"]] = (item, doc["version"])
                # a replay answers the same bytes: the same S.P
                st, _, raw = c.request("POST", "/v1/items/%s/reaction:toggle" % items[0],
                                       body=b'{"reaction":"like"}',
                                       headers={"X-User-Id": "rp", "Content-Type": "application/json",
                                                "Idempotency-Key": "rp-1"})
                st2, h2, raw2 = c.request("POST", "/v1/items/%s/reaction:toggle" % items[0],
                                          body=b'{"reaction":"like"}',
                                          headers={"X-User-Id": "rp", "Content-Type": "application/json",
                                                   "Idempotency-Key": "rp-1"})
                self.assertEqual((st, st2, raw2), (200, 200, raw))
                self.assertEqual(h2.get("idempotent-replayed"), "true")
                acked[json.loads(raw)["cursor"]] = (items[0], json.loads(raw)["version"])
            finally:
                c.close()
            # paging to the end in small pages: every acknowledged write once, nothing else
            seen, after, pages = [], None, 0
            while True:
                doc = self.page(srv, after, limit=17)
                pages += 1
                self.assertNotRegex(doc["next"], r"^[0-9.]+$", "a page token is opaque")
                if not doc["changes"]:
                    break
                self.assertLessEqual(len(doc["changes"]), 17)
                seen += doc["changes"]
                after = doc["next"]
            cursors = [e["cursor"] for e in seen]
            self.assertEqual(len(cursors), len(set(cursors)), "an entry repeated")
            self.assertEqual(set(cursors), set(acked), "every acknowledged write, and only those")
            for e in seen:
                self.assertEqual((e["item"], e["version"]), acked[e["cursor"]])
            self.check_per_item_order(seen)
            self.assertEqual({c.split(".")[0] for c in cursors}, {"0", "1"})
            # each shard's positions rise within the pages
            for s in ("0", "1"):
                pos = [int(c.split(".")[1]) for c in cursors if c.startswith(s + ".")]
                self.assertEqual(pos, sorted(pos), "shard %s out of log order" % s)
            # one page of everything gives the same entries
            whole = self.page(srv, None, limit=1000)
            self.assertEqual(sorted(e["cursor"] for e in whole["changes"]), sorted(cursors))
            # an entry cursor, a decimal position or a token broken: 400
            for bad in (cursors[0], "5", after[:-2], after + "AA", "x"):
                st, _, doc, raw = srv.json("GET", "/v1/changes?after=" + bad, headers=ADMIN)
                self.assertProblem((st, _, doc, raw), 400, "invalid-parameter", bad)

    def test_long_poll_wakes_on_either_shard(self):
        with Server(shards=2, args=FAST) as srv:
            on = items_on_both(srv, 1, "w")
            for shard in (1, 0):
                nxt = self.page(srv)["next"]
                while True:
                    doc = self.page(srv, nxt)
                    if not doc["changes"]:
                        break
                    nxt = doc["next"]
                import threading
                got = {}

                def poll():
                    got["doc"] = self.page(srv, nxt, wait=20)
                    got["at"] = time.monotonic()

                t = threading.Thread(target=poll)
                t.start()
                time.sleep(0.8)
                self.assertNotIn("doc", got, "the poll waits")
                sent = time.monotonic()
                st, _, doc, raw = srv.put(on[shard][0], "poller%d" % shard, "like")
                self.assertEqual(st, 200, raw[:200])
                t.join(25)
                self.assertIn("doc", got)
                self.assertLess(got["at"] - sent, 5 * SLOW, "woken by the write, not the timeout")
                self.assertEqual([e["cursor"] for e in got["doc"]["changes"]], [doc["cursor"]])
                self.assertTrue(doc["cursor"].startswith("%d." % shard))

    def test_webhook_gets_both_shards_in_item_order_and_resends_after_restart(self):
        args = FAST + ALLOW + ["--webhook-timeout", "2500ms", "--webhook-backoff-min", "100ms",
                               "--webhook-backoff-max", "400ms"]
        with Receiver(mode="hang", hang_s=3) as rc, Server(shards=2, args=args) as s:
            on = items_on_both(s, 3, "h")
            start = self.newest(s)
            doc = self.create(s, rc.url())
            c = s.client()
            try:
                for i in range(240):
                    item = (on[0] + on[1])[i % 6]
                    self.assertEqual(toggle(c, item, "u%d" % (i % 7))[0], 200)
            finally:
                c.close()
            self.wait_for("the first attempt", lambda: rc.arrivals)
            before = rc.arrivals[0]
            s.stop()  # the first batch is waiting for its answer: recorded as pending, not delivered
            with rc.lock:
                rc.mode = "ok"
            s.start()
            c = s.client()
            try:
                for i in range(20):
                    self.assertEqual(toggle(c, on[i % 2][0], "late%d" % i)[0], 200)
            finally:
                c.close()
            expected = self.feed(s, start)
            self.assertEqual(len(expected), 260)
            final = self.newest(s)
            self.wait_for("all delivered", lambda: self.listing(s, doc["id"])["delivered"] == final,
                          timeout=30 * SLOW)
            self.assertEqual(rc.arrivals[1], before, "the pending batch kept its delivery id across the restart")
            time.sleep(3.5)  # the hung first attempt ends
            got = rc.got()
            first = [json.loads(r["body"])["transitions"] for r in got
                     if r["headers"].get("Tally-Delivery-Id") == before]
            self.assertGreaterEqual(len(first), 2)
            self.assertTrue(all(t == first[0] for t in first), "the same batch, sent again")
            # every transition once (batches counted once each), per item in version order
            batches, delivered = {}, []
            for r in got:
                did = r["headers"]["Tally-Delivery-Id"]
                body = json.loads(r["body"])["transitions"]
                if did in batches:
                    self.assertEqual(batches[did], body)
                    continue
                batches[did] = body
                delivered += body
            self.assertEqual(sorted(e["cursor"] for e in delivered), sorted(e["cursor"] for e in expected))
            self.assertEqual(len(delivered), len(expected), "each transition in one batch")
            self.check_per_item_order(delivered)
            self.assertEqual({e["cursor"].split(".")[0] for e in delivered}, {"0", "1"})
            w = self.listing(s, doc["id"])
            self.assertEqual(len(w["delivered_shards"]), 2)
            self.assertEqual(w["state"], "active")

    def test_resume_by_entry_cursor_moves_that_shard(self):
        with Receiver() as rc, Server(shards=2, args=FAST + ALLOW + QUICK) as s:
            on = items_on_both(s, 1, "r")
            doc = self.create(s, rc.url())
            cursors = {}
            for shard in (0, 1):
                for i in range(3):
                    st, _, d, raw = s.put(on[shard][0], "ru%d" % i, "like")
                    self.assertEqual(st, 200, raw[:200])
                    cursors.setdefault(shard, []).append(d["cursor"])
            final = self.newest(s)
            self.wait_for("delivered", lambda: self.listing(s, doc["id"])["delivered"] == final)
            n = len(rc.got())
            # back to shard 1's first entry: its two later ones again, nothing of shard 0
            st, _, r, raw = s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"],
                                   {"after": cursors[1][0]}, headers=ADMIN)
            self.assertEqual((st, r["after"]), (200, cursors[1][0]), raw[:300])
            self.wait_for("resent", lambda: len(rc.got()) > n and
                          self.listing(s, doc["id"])["delivered"] == final)
            again = [e["cursor"] for r in rc.got()[n:] for e in json.loads(r["body"])["transitions"]]
            self.assertEqual(again, cursors[1][1:])
            # a page token or a bare position is not an entry cursor; a shard beyond the count: 400
            for bad in (final, "3", "2.1"):
                st, _, d, raw = s.json("POST", "/v1/admin/webhooks/%s/resume" % doc["id"], {"after": bad},
                                       headers=ADMIN)
                self.assertProblem((st, _, d, raw), 400, "invalid-parameter", bad)
