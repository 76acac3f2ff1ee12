"""Live counts, trending and hot items on two shards (docs/api.md § Live counts, § Trending; the
PostgreSQL guide § Shards). A stream watching items of both shards gets every item's first counts
and then each write's counts, each event's id the entry cursor "S.P" of the item's shard S and the
position P its counts are folded up to: an event includes every write to its item whose position is
at most P (checked against the write answers' cursors and the databases' logs). A new stream — a
reconnect sending Last-Event-ID — starts again with the current counts. Trending and hot items list
the items of both shards, exactly, the same on a second node and after a restart (each shard keeps
its own summaries)."""

import re
import time

from harness import SLOW, Server, TallyTestCase, metric, pg_only, uid
from test_live import SSEClient
from test_shards import shard_map, shard_of

NO_LIMIT = ["--rate-limit", "off", "--read-rate-limit", "off"]
ENTRY_CURSOR_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


def entry_cursor(text):
    """(shard, position) of an entry cursor "S.P"; AssertionError when text is not one."""
    m = ENTRY_CURSOR_RE.match(text or "")
    if not m:
        raise AssertionError("not an entry cursor S.P: %r" % (text,))
    return int(m.group(1)), int(m.group(2))


def write_cursor(doc, shard):
    """The position of a write answer's cursor: "S.P" of the item's shard, or (while write answers
    carry the bare position) the decimal position, taken as on the item's shard."""
    c = doc.get("cursor")
    if isinstance(c, str) and c.isdigit():
        return int(c)
    s, p = entry_cursor(c)
    if s != shard:
        raise AssertionError("the write's cursor %r names shard %d, the item is on %d" % (c, s, shard))
    return p


def items_on(ranges, prefix, per_shard):
    """per_shard fresh ids on each of the two shards: {0: [...], 1: [...]}."""
    on = {0: [], 1: []}
    i = 0
    while min(len(v) for v in on.values()) < per_shard:
        item = "%s%d" % (prefix, i)
        k = shard_of(ranges, item)
        if len(on[k]) < per_shard:
            on[k].append(item)
        i += 1
    return on


def labelled(srv, name):
    """{labels: value} of a metric's labelled samples."""
    st, _, body = srv.request("GET", "/metrics")
    assert st == 200, st
    out = {}
    for line in body.decode().split("\n"):
        m = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@pg_only("shards are PostgreSQL databases")
class LiveAcrossShardsTest(TallyTestCase):
    def test_a_stream_on_both_shards_sees_each_write_with_its_shards_cursor(self):
        with Server(shards=2, args=NO_LIMIT + ["--live-interval", "100ms"]) as srv:
            ranges = shard_map(srv.db)
            on = items_on(ranges, uid("lv"), 2)
            shard = {item: k for k, items in on.items() for item in items}
            items = on[0] + on[1]
            put = lambda item, user: srv.put(item, user, "like")  # noqa: E731
            self.assertEqual(put(on[0][0], "before")[0], 200)
            self.assertEqual(put(on[1][0], "before")[0], 200)
            for item in (on[0][0], on[1][0]):
                self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
            s = SSEClient(srv, items)
            self.addCleanup(s.close)
            self.assertEqual(s.status, 200)
            s.wait_for(lambda e: len(s.counts_events()) >= len(items), 5)
            first = {e["data"]["item"]: e for e in s.counts_events()}
            self.assertEqual(sorted(first), sorted(items), "one first event per item, of both shards")
            for item, e in first.items():
                k, _ = entry_cursor(e["id"])
                self.assertEqual(k, shard[item], "the event's id names its item's shard: %r" % e)
                want = 1 if item in (on[0][0], on[1][0]) else 0
                self.assertEqual(e["data"]["counts"], {"like": want, "dislike": 0}, e)

            # writes on both shards, interleaved; each answer's cursor is a position on its shard
            writes = {item: [] for item in items}  # item -> positions of its writes
            for n in range(6):
                for item in items:
                    st, _, doc, raw = put(item, "u%d" % n)
                    self.assertEqual(st, 200, raw[:300])
                    writes[item].append(write_cursor(doc, shard[item]))
            for item in items:
                last = max(writes[item])
                ev = s.wait_for(lambda e, item=item, last=last: e.get("event") == "counts" and
                                e["data"]["item"] == item and entry_cursor(e["id"])[1] >= last, 10)
                self.assertIsNotNone(ev, "no event of %s reaching its last write %d" % (item, last))
                want = 6 + (1 if item in (on[0][0], on[1][0]) else 0)
                self.assertEqual(ev["data"]["counts"], {"like": want, "dislike": 0}, ev)
            s.pump(0.3)
            # every event: its shard is its item's; P never goes back per item; its counts include
            # every write to its item at or below P (and the one made before the stream)
            last_p = {}
            for e in s.counts_events():
                item = e["data"]["item"]
                k, p = entry_cursor(e["id"])
                self.assertEqual(k, shard[item], e)
                self.assertGreaterEqual(p, last_p.get(item, 0), "P goes back for %s" % item)
                last_p[item] = p
                included = sum(1 for c in writes[item] if c <= p)
                self.assertGreaterEqual(e["data"]["counts"]["like"], included, e)
            # P is a position of the shard's own log: each shard's log holds its items' writes there
            for k, db in enumerate([srv.db] + srv.shard_dbs):
                for item in on[k]:
                    logged = db.sql("SELECT seq FROM tally_log WHERE item = '%s' AND \"user\" LIKE 'u%%' "
                                    "ORDER BY seq" % item).split()
                    self.assertEqual([int(x) for x in logged], sorted(writes[item]), (k, item))
            # each shard's follower has its own checkpoint
            cursors = labelled(srv, "tally_live_cursor")
            self.assertEqual(sorted(cursors), ['shard="0"', 'shard="1"'], cursors)
            for k in (0, 1):
                self.assertGreaterEqual(cursors['shard="%d"' % k], max(last_p[i] for i in on[k]))
            self.assertEqual(metric(srv, "tally_live_errors_total"), 0)

            # a reconnect with Last-Event-ID starts with the current counts, at positions not behind
            # what the closed stream had seen on each shard
            last_id = s.counts_events()[-1]["id"]
            s.close()
            self.assertEqual(put(on[1][1], "after")[0], 200)
            self.assertEqual(srv.wait_counts(on[1][1], {"like": 7, "dislike": 0}), {"like": 7, "dislike": 0})
            r = SSEClient(srv, items, headers="Last-Event-ID: %s\r\n" % last_id)
            self.addCleanup(r.close)
            self.assertEqual(r.status, 200)
            r.wait_for(lambda e: len(r.counts_events()) >= len(items), 5)
            again = {e["data"]["item"]: e for e in r.counts_events()}
            self.assertEqual(sorted(again), sorted(items))
            for item, e in again.items():
                k, p = entry_cursor(e["id"])
                self.assertEqual(k, shard[item])
                self.assertGreaterEqual(p, last_p[item])
                want = 7 if item in (on[0][0], on[1][0], on[1][1]) else 6
                self.assertEqual(e["data"]["counts"], {"like": want, "dislike": 0}, e)

    def test_a_second_node_streams_both_shards_writes_made_on_the_first(self):
        with Server(shards=2, args=NO_LIMIT + ["--live-interval", "100ms"]) as a:
            with a.node() as b:
                ranges = shard_map(a.db)
                on = items_on(ranges, uid("ln"), 1)
                items = [on[0][0], on[1][0]]
                s = SSEClient(b, items)
                self.addCleanup(s.close)
                s.wait_for(lambda e: len(s.counts_events()) >= 2, 5)
                for item in items:
                    st, _, doc, raw = a.put(item, uid("u"), "dislike")
                    self.assertEqual(st, 200, raw[:300])
                    p = write_cursor(doc, shard_of(ranges, item))
                    ev = s.wait_for(lambda e, item=item, p=p: e.get("event") == "counts" and
                                    e["data"]["item"] == item and entry_cursor(e["id"])[1] >= p, 10)
                    self.assertIsNotNone(ev, "node b's stream never reached %s's write" % item)
                    self.assertEqual(ev["data"]["counts"], {"like": 0, "dislike": 1})
                    self.assertEqual(entry_cursor(ev["id"])[0], shard_of(ranges, item))


@pg_only("shards are PostgreSQL databases")
class TrendingAcrossShardsTest(TallyTestCase):
    def test_trending_and_hot_list_items_of_both_shards_on_every_node_and_after_a_restart(self):
        with Server(shards=2, args=NO_LIMIT + ["--hot-threshold", "1"]) as srv:
            ranges = shard_map(srv.db)
            on = items_on(ranges, uid("tr"), 2)
            # gains that interleave the shards when ranked: b (1) 25, a (0) 20, c (1) 8, d (0) 3
            gains = {on[1][0]: 25, on[0][0]: 20, on[1][1]: 8, on[0][1]: 3}
            ranked = sorted(gains, key=lambda i: -gains[i])
            for item, n in gains.items():
                for u in range(n):
                    st, _, _, raw = srv.put(item, "u%d" % u, "like")
                    self.assertEqual(st, 200, raw[:300])
            want = [{"item": i, "gain": gains[i]} for i in ranked]

            def trending(server, limit=10):
                st, _, doc, raw = server.json("GET", "/v1/trending?window=1h&limit=%d" % limit)
                self.assertEqual(st, 200, raw[:300])
                return doc

            deadline = time.monotonic() + 10 * SLOW
            while time.monotonic() < deadline and trending(srv)["items"] != want:
                time.sleep(0.2)
            doc = trending(srv)
            self.assertEqual(doc["items"], want)
            self.assertEqual(trending(srv, 2)["items"], want[:2])
            self.assertEqual(doc["error_bound"], 33 / 512, "the largest shard's: 25 + 8 events on shard 1")
            # hot: the two busiest items, one on each shard, once their 5 s bucket has closed
            deadline = time.monotonic() + 20 * SLOW
            hot = []
            while time.monotonic() < deadline:
                st, _, doc, raw = srv.json("GET", "/v1/admin/hot", user="admin")
                self.assertEqual(st, 200, raw[:300])
                hot = [e["item"] for e in doc["items"]]
                if len(hot) >= 2:
                    break
                time.sleep(0.5)
            self.assertEqual(hot[:2], [on[1][0], on[0][0]], doc)
            self.assertEqual({shard_of(ranges, i) for i in hot[:2]}, {0, 1})
            # a second node follows both shards' logs too
            with srv.node() as b:
                deadline = time.monotonic() + 10 * SLOW
                while time.monotonic() < deadline and trending(b)["items"] != want:
                    time.sleep(0.2)
                self.assertEqual(trending(b)["items"], want)
            # each shard keeps its own summaries: a restart restores both
            srv.restart()
            for k, db in enumerate([srv.db] + srv.shard_dbs):
                self.assertEqual(db.sql("SELECT count(*) FROM tally_aux WHERE key = 'trend/open'"), "1", k)
            deadline = time.monotonic() + 10 * SLOW
            while time.monotonic() < deadline and trending(srv)["items"] != want:
                time.sleep(0.2)
            self.assertEqual(trending(srv)["items"], want)


@pg_only("shards are PostgreSQL databases")
class TrendingShardDownTest(TallyTestCase):
    def test_a_shard_down_at_start_restores_its_summaries_once_reached(self):
        # the log kept 1 s only: once pruned, shard 1's gains are in its persisted summaries alone
        from harness import PgDatabase, pgcluster_module
        other = pgcluster_module().start_primary(name="trend1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1], args=NO_LIMIT + ["--log-retention", "1s"]) as srv:
                ranges = shard_map(srv.db)
                on = items_on(ranges, uid("td"), 1)
                gains = {on[1][0]: 7, on[0][0]: 3}
                for item, n in gains.items():
                    for u in range(n):
                        self.assertEqual(srv.put(item, "u%d" % u, "like")[0], 200)
                want = [{"item": on[1][0], "gain": 7}, {"item": on[0][0], "gain": 3}]

                def trending():
                    st, _, doc, raw = srv.json("GET", "/v1/trending?window=1h")
                    self.assertEqual(st, 200, raw[:300])
                    return doc["items"]

                def wait_trending(expected, timeout):
                    deadline = time.monotonic() + timeout * SLOW
                    while time.monotonic() < deadline and trending() != expected:
                        time.sleep(0.2)
                    self.assertEqual(trending(), expected)

                wait_trending(want, 10)
                deadline = time.monotonic() + 20 * SLOW
                while time.monotonic() < deadline and db1.sql("SELECT count(*) FROM tally_log") != "0":
                    time.sleep(0.3)
                self.assertEqual(db1.sql("SELECT count(*) FROM tally_log"), "0", "shard 1's log pruned")
                srv.stop()  # each shard's summaries persisted on it
                pgcluster_module().stop(other, mode="fast")
                srv.start()
                wait_trending(want[1:], 10)  # shard 0's items meanwhile
                self.assertIn("event=trending-restore-failed", srv.stderr())
                other.start()
                other.wait_ready()
                wait_trending(want, 30)  # restored from shard 1's own records, not from its log
                self.assertIn("event=trending-restore-resumed", srv.stderr())
                srv.restart()  # and persisted again, whole
                wait_trending(want, 10)
        finally:
            pgcluster_module().destroy(other)


@pg_only("shards are PostgreSQL databases")
class LiveShardDownTest(TallyTestCase):
    def test_a_shard_down_holds_back_only_its_own_items(self):
        from harness import PgDatabase, pgcluster_module
        other = pgcluster_module().start_primary(name="live1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1], args=NO_LIMIT + ["--live-interval", "100ms"]) as srv:
                ranges = shard_map(srv.db)
                on = items_on(ranges, uid("ld"), 1)
                up, down = on[0][0], on[1][0]
                st, _, doc, raw = srv.put(down, "u0", "like")
                self.assertEqual(st, 200, raw[:300])
                p0 = write_cursor(doc, 1)
                pgcluster_module().stop(other, mode="immediate")
                s = SSEClient(srv, [up, down])
                self.addCleanup(s.close)
                self.assertEqual(s.status, 200)
                ev = s.wait_for(lambda e: e.get("event") == "counts", 5)
                self.assertIsNotNone(ev, "shard 0's item gets its first counts with shard 1 down")
                self.assertEqual((ev["data"]["item"], entry_cursor(ev["id"])[0]), (up, 0))
                st, _, doc, raw = srv.put(up, "u1", "like")
                self.assertEqual(st, 200, raw[:300])
                p = write_cursor(doc, 0)
                ev = s.wait_for(lambda e: e["data"]["item"] == up and entry_cursor(e["id"])[1] >= p
                                if e.get("event") == "counts" else False, 5)
                self.assertIsNotNone(ev, "shard 0's writes stream while shard 1 is down")
                self.assertEqual(ev["data"]["counts"], {"like": 1, "dislike": 0})
                self.assertEqual(s.counts_events(down), [], "nothing of the down shard's item yet")
                other.start()
                other.wait_ready()
                deadline = time.monotonic() + 30 * SLOW
                while time.monotonic() < deadline and not s.counts_events(down):
                    srv.put(down, "u1", "like")  # a write notices the server is back
                    s.pump(0.3)
                got = s.counts_events(down)
                self.assertTrue(got, "shard 1's item gets its counts once its shard is back")
                self.assertEqual(entry_cursor(got[0]["id"])[0], 1)
                # its first counts are folded up to its P: the write made before the outage is in
                # the first event whose P reaches the write's
                ev = s.wait_for(lambda e: e.get("event") == "counts" and e["data"]["item"] == down and
                                entry_cursor(e["id"])[1] >= p0, 10)
                self.assertIsNotNone(ev, "no event of %s reaching its first write %d" % (down, p0))
                self.assertGreaterEqual(ev["data"]["counts"]["like"], 1, ev)
                self.assertGreater(metric(srv, "tally_live_errors_total"), 0)
        finally:
            pgcluster_module().destroy(other)
