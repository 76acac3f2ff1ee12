"""Several PostgreSQL primaries (docs/postgresql.md § Shards): one tallyd given two --store URIs
routes every item to its shard — zlib's CRC-32 of the id mod 4096, then the map of virtual shards
kept in every database's identity — with one writer per shard. Checked against the databases
themselves: each item's rows, log and counts are on its shard alone, and the counts equal the
rows. Every route is served across shards; an Idempotency-Key binds one request across them."""

import json
import time
import zlib

from harness import PgDatabase, Server, TallyTestCase, metric, pg_only

ITEMS = 64


def shard_map(db):
    """[(first, last, shard)] as the database's identity holds it."""
    text = db.sql("SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'cluster/identity'")
    return [tuple(r) for r in json.loads(text)["map"]]


def shard_of(ranges, item):
    v = zlib.crc32(item.encode()) % 4096
    for first, last, shard in ranges:
        if first <= v <= last:
            return shard
    raise AssertionError("virtual shard %d is in no range of %r" % (v, ranges))


def rows_on(db):
    out = db.sql("SELECT item || ':' || \"user\" FROM tally_rows WHERE kind <> 0 ORDER BY 1")
    return set(line for line in out.split("\n") if line)


@pg_only("shards are PostgreSQL databases")
class TwoShardsTest(TallyTestCase):
    def test_items_live_on_their_shard_and_counts_are_exact(self):
        with Server(shards=2, args=["--rate-limit", "off"]) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(dbs[0])
            self.assertEqual(ranges, shard_map(dbs[1]))
            self.assertEqual(len(ranges), 2, ranges)
            items = ["s%d" % i for i in range(ITEMS)]
            placed = {0: set(), 1: set()}
            for n, item in enumerate(items):
                for u in range(1 + n % 3):
                    st = srv.put(item, "u%d" % u, "like" if u % 2 == 0 else "dislike")[0]
                    self.assertEqual(st, 200, item)
                    placed[shard_of(ranges, item)].add("%s:u%d" % (item, u))
            self.assertTrue(placed[0] and placed[1], "the ids fall on both shards")
            self.assertEqual(rows_on(dbs[0]), placed[0])
            self.assertEqual(rows_on(dbs[1]), placed[1])
            for n, item in enumerate(items):
                k = 1 + n % 3
                want = {"like": (k + 1) // 2, "dislike": k // 2}
                self.assertEqual(srv.wait_counts(item, want), want, item)
            # one batch read spans both shards, answered in the order asked
            st, _, doc, raw = srv.json("GET", "/v1/items?ids=" + ",".join(items[:40]), user="u0")
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual([e["item"] for e in doc["items"]], items[:40])
            self.assertTrue(all(e["viewer"]["reaction"] == "like" for e in doc["items"]))
            # the recount visits every shard and finds nothing to correct
            st, _, doc, raw = srv.json("POST", "/v1/admin/recount", {}, user="admin")
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual(doc["drift"], [])
            self.assertGreaterEqual(doc["checked"], ITEMS)
            # each shard's log holds its items' transitions only
            for k, db in enumerate(dbs):
                logged = db.sql("SELECT DISTINCT item FROM tally_log ORDER BY 1").split()
                self.assertTrue(logged, "shard %d logs its transitions" % k)
                self.assertTrue(all(shard_of(ranges, i) == k for i in logged), (k, logged))

    def test_drift_gauge_sums_what_each_shards_last_recount_found(self):
        # Drift on shard 0's item, none on shard 1's: one recount of both runs shard 0, then
        # shard 1. The gauge shows what each shard's last run found, summed: shard 1's clean run
        # after it does not hide shard 0's drift (it did: the gauge was the last run's alone).
        with Server(shards=2, args=["--rate-limit", "off", "--recount-interval", "0"]) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(dbs[0])
            on = {0: None, 1: None}
            for i in range(200):
                item = "g%d" % i
                on[shard_of(ranges, item)] = on[shard_of(ranges, item)] or item
            a, b = on[0], on[1]
            for item in (a, b):
                self.assertEqual(srv.put(item, "u1", "like")[0], 200)
                self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
            dbs[0].sql("UPDATE tally_counts SET n = n + 5 WHERE item = '%s' AND kind <> 0" % a)
            st, _, doc, raw = srv.json("POST", "/v1/admin/recount", {"items": [a, b]}, user="admin")
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual([(d["item"], d["kind"]) for d in doc["drift"]], [(a, "like")], doc)
            self.assertEqual(metric(srv, "tally_recount_drift"), 1, "shard 0's drift, after shard 1's clean run")
            st, _, doc, raw = srv.json("POST", "/v1/admin/recount", {"items": [b]}, user="admin")
            self.assertEqual((st, doc["drift"]), (200, []), raw[:300])
            self.assertEqual(metric(srv, "tally_recount_drift"), 1, "shard 1's clean run leaves shard 0's")
            st, _, doc, raw = srv.json("POST", "/v1/admin/recount", {"items": [a]}, user="admin")
            self.assertEqual((st, doc["drift"]), (200, []), "corrected by the first run: %r" % raw[:300])
            self.assertEqual(metric(srv, "tally_recount_drift"), 0)
            self.assertEqual(srv.counts(a), {"like": 1, "dislike": 0})

    def test_erase_a_user_clears_their_rows_on_every_shard(self):
        with Server(shards=2) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(dbs[0])
            items = ["e%d" % i for i in range(16)]
            self.assertEqual({shard_of(ranges, i) for i in items}, {0, 1})
            for item in items:
                self.assertEqual(srv.put(item, "gone", "like")[0], 200)
                self.assertEqual(srv.put(item, "stays", "like")[0], 200)
            st, _, doc, raw = srv.json("DELETE", "/v1/admin/users/gone", user="admin")
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual(doc["changed"], len(items))
            for item in items:
                self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
            st, _, doc, _ = srv.json("POST", "/v1/admin/recount", {}, user="admin")
            self.assertEqual((st, doc["drift"]), (200, []))

    def test_every_route_is_served_across_shards(self):
        with Server(shards=2) as srv:
            self.assertEqual(srv.put("still", "u1", "like")[0], 200)
            for path in ("/v1/changes", "/v1/users/u1/reactions", "/v1/trending", "/v1/admin/webhooks",
                         "/v1/admin/export", "/v1/users/u1/export"):
                st, _, _, raw = srv.json("GET", path, user="admin")
                self.assertEqual(st, 200, "%s: %r" % (path, raw[:300]))

    def test_readyz_names_a_shard_whose_database_is_down(self):
        # shard 1 on a PostgreSQL server of its own, stopped while the node runs
        from harness import pgcluster_module
        other = pgcluster_module().start_primary(name="shard1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1]) as srv:
                ranges = shard_map(srv.db)
                on = {0: [], 1: []}
                for i in range(64):
                    on[shard_of(ranges, "r%d" % i)].append("r%d" % i)
                self.assertEqual(srv.put(on[1][0], "u1", "like")[0], 200)
                st, _, doc, _ = srv.json("GET", "/readyz")
                self.assertEqual((st, doc), (200, {"status": "ok"}))
                pgcluster_module().stop(other, mode="immediate")
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    st, _, doc, _ = srv.json("GET", "/readyz")
                    if doc and doc.get("unreachable_shards"):
                        break
                    srv.put(on[1][0], "u2", "like")  # a write notices the lost connection
                    time.sleep(0.2)
                self.assertEqual((st, doc), (200, {"status": "ok", "unreachable_shards": [1]}))
                # the other shard's items are read and written as before
                self.assertEqual(srv.put(on[0][0], "u1", "like")[0], 200)
                self.assertEqual(srv.wait_counts(on[0][0], {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
                self.assertProblem(srv.put(on[1][0], "u3", "like"), 503, "unavailable")
                self.assertProblem(srv.json("GET", "/v1/items/" + on[1][0]), 503, "unavailable")
                # a batch shows the down shard on its items, and is kept by no cache
                st, hdrs, doc, raw = srv.json("GET", "/v1/items?ids=%s,%s" % (on[0][0], on[1][0]))
                self.assertEqual(st, 200, raw[:300])
                self.assertEqual(doc["items"][0]["counts"], {"like": 1, "dislike": 0})
                self.assertEqual(doc["items"][1], {"item": on[1][0], "unavailable": True})
                self.assertIn("no-store", hdrs.get("cache-control", ""))
                self.assertProblem(srv.json("GET", "/v1/items?ids=%s,%s" % (on[1][0], on[1][1])), 503,
                                   "unavailable")
                st, _, text = srv.request("GET", "/metrics")
                self.assertIn(b'tally_db_connected{shard="0"} 1', text)
                self.assertIn(b'tally_db_connected{shard="1"} 0', text)
                # back: its items recover by themselves, nothing acknowledged lost
                other.start()
                other.wait_ready()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and srv.put(on[1][0], "u4", "like")[0] != 200:
                    time.sleep(0.3)
                self.assertEqual(srv.put(on[1][0], "u4", "like")[0], 200)
                self.assertEqual(srv.reaction(on[1][0], "u1")["reaction"], "like")
                # named failing while a write failed in the last 10 s, then served again
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    st, _, doc, _ = srv.json("GET", "/readyz")
                    if doc == {"status": "ok"}:
                        break
                    self.assertEqual((st, doc), (200, {"status": "ok", "failing_shards": [1]}))
                    time.sleep(0.5)
                self.assertEqual((st, doc), (200, {"status": "ok"}))
        finally:
            pgcluster_module().destroy(other)


@pg_only("shards are PostgreSQL databases")
class LaterStartTest(TallyTestCase):
    def test_a_node_starts_with_a_shard_down_and_serves_it_once_reached_and_checked(self):
        from harness import pgcluster_module
        other = pgcluster_module().start_primary(name="later1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1], args=["--rate-limit", "off"]) as srv:
                ranges = shard_map(srv.db)
                on = {0: [], 1: []}
                for i in range(64):
                    on[shard_of(ranges, "l%d" % i)].append("l%d" % i)
                self.assertEqual(srv.put(on[1][0], "u1", "like")[0], 200)
                srv.stop()
                pgcluster_module().stop(other, mode="fast")
                srv.start()  # shard 1 down: the node starts and serves shard 0
                self.assertIn("event=shard-unreachable shard=1", srv.stderr())
                st, _, doc, _ = srv.json("GET", "/readyz")
                self.assertEqual((st, doc), (200, {"status": "ok", "unreachable_shards": [1]}))
                self.assertEqual(srv.put(on[0][0], "u1", "like")[0], 200)
                self.assertProblem(srv.json("GET", "/v1/items/" + on[1][0]), 503, "unavailable")
                other.start()
                other.wait_ready()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and srv.json("GET", "/readyz")[2] != {"status": "ok"}:
                    time.sleep(0.3)
                self.assertEqual(srv.json("GET", "/readyz")[2], {"status": "ok"})
                self.assertIn("event=cluster-identity-checked shard=1", srv.stderr())
                self.assertEqual(srv.reaction(on[1][0], "u1")["reaction"], "like")
                self.assertEqual(srv.put(on[1][0], "u2", "like")[0], 200)
                self.assertEqual(srv.wait_counts(on[1][0], {"like": 2, "dislike": 0}), {"like": 2, "dislike": 0})
        finally:
            pgcluster_module().destroy(other)

    def test_a_shard_reached_later_holding_another_identity_is_never_served(self):
        from harness import pgcluster_module
        other = pgcluster_module().start_primary(name="later2", fsync=False)
        try:
            db1, stranger = PgDatabase(cluster=other), PgDatabase(cluster=other)
            with Server(shard_dbs=[db1]) as srv:
                with Server(store=stranger, shards=1):  # a cluster of its own in that database
                    pass
                ranges = shard_map(srv.db)
                item1 = next("x%d" % i for i in range(64) if shard_of(ranges, "x%d" % i) == 1)
                srv.stop()
                pgcluster_module().stop(other, mode="fast")
                srv.shard_dbs = [stranger]  # the wrong database in shard 1's place
                srv.start()
                other.start()
                other.wait_ready()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and "event=pg-open-refused" not in srv.stderr():
                    srv.put(item1, "u1", "like")
                    time.sleep(0.3)
                self.assertIn("event=pg-open-refused", srv.stderr())
                self.assertIn("is shard 0 of cluster", srv.stderr())
                self.assertProblem(srv.put(item1, "u1", "like"), 503, "unavailable")
                st, _, doc, _ = srv.json("GET", "/readyz")
                self.assertEqual((st, doc), (200, {"status": "ok", "unreachable_shards": [1]}))
                self.assertEqual(stranger.sql("SELECT count(*) FROM tally_rows"), "0")
        finally:
            pgcluster_module().destroy(other)


def keyed_put(srv, item, user, kind, key):
    return srv.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": kind}, user=user,
                    headers={"Idempotency-Key": key})


@pg_only("shards are PostgreSQL databases")
class KeyClaimTest(TallyTestCase):
    """An Idempotency-Key binds one request wherever the user's items live: its claim is on the
    user's shard, taken before the write goes to the item's shard."""

    def items_on_both(self, srv, prefix):
        ranges = shard_map(srv.db)
        on = {}
        for i in range(256):
            on.setdefault(shard_of(ranges, "%s%d" % (prefix, i)), "%s%d" % (prefix, i))
        self.assertEqual(sorted(on), [0, 1])
        return on

    def test_one_key_for_items_on_two_shards_is_a_mismatch_on_either_node(self):
        with Server(shards=2, args=["--rate-limit", "off"]) as srv:
            with srv.node() as b:
                on = self.items_on_both(srv, "k")
                for n, user in enumerate(("ku0", "ku1", "ku2", "ku3")):  # users of either shard
                    first, second = (on[0], on[1]) if n % 2 else (on[1], on[0])
                    key = "key-%s" % user
                    st, _, done, raw = keyed_put(srv, first, user, "like", key)
                    self.assertEqual(st, 200, raw[:300])
                    # the same key for another request: 409 from this node and the other, nothing written
                    for node in (srv, b):
                        self.assertProblem(keyed_put(node, second, user, "like", key), 409,
                                           "idempotency-key-mismatch")
                    self.assertEqual(srv.json("GET", "/v1/items/%s/reaction" % second, user=user)[2]["reaction"],
                                     "none")
                    # the first request again, on either node: the stored answer
                    for node in (srv, b):
                        st, _, again, raw = keyed_put(node, first, user, "like", key)
                        self.assertEqual((st, again), (200, done), raw[:300])
                # every claim is on its user's shard's database alone
                ranges = shard_map(srv.db)
                dbs = [srv.db] + srv.shard_dbs
                for user in ("ku0", "ku1", "ku2", "ku3"):
                    home = shard_of(ranges, user)
                    self.assertEqual(dbs[home].sql("SELECT count(*) FROM tally_claims WHERE \"user\" = '%s'" % user),
                                     "1", user)
                    self.assertEqual(dbs[1 - home].sql(
                        "SELECT count(*) FROM tally_claims WHERE \"user\" = '%s'" % user), "0", user)

    def test_a_refused_write_releases_its_claim(self):
        with Server(shards=2, args=["--rate-limit", "off"]) as srv:
            on = self.items_on_both(srv, "r")
            ranges = shard_map(srv.db)
            st, _, _, raw = srv.json("PUT", "/v1/admin/policies/" + on[0], {"kinds": ["like"]}, user="admin")
            self.assertEqual(st, 200, raw[:300])
            # users of either shard: the claim taken on another shard than the item's, and in the
            # write's own transaction when the user's shard is the item's
            users = {}
            for n in range(256):
                users.setdefault(shard_of(ranges, "ru%d" % n), "ru%d" % n)
            self.assertEqual(sorted(users), [0, 1])
            for home, user in sorted(users.items()):
                with self.subTest(user_shard=home):
                    key = "rk-%s" % user
                    self.assertProblem(keyed_put(srv, on[0], user, "dislike", key), 403, "reaction-not-allowed")
                    # refused and not stored: the key is free for a corrected request, on the other shard too
                    st, _, doc, raw = keyed_put(srv, on[1], user, "dislike", key)
                    self.assertEqual((st, doc["reaction"]), (200, "dislike"), raw[:300])
                    self.assertProblem(keyed_put(srv, on[0], user, "like", key), 409, "idempotency-key-mismatch")
                    self.assertEqual(srv.json("GET", "/v1/items/%s/reaction" % on[0], user=user)[2]["reaction"],
                                     "none")
                    # a 412 is stored under its key on the item's shard, so its claim is kept
                    key2 = key + "-412"
                    other = next(u for u in ("%s-412-%d" % (user, n) for n in range(256))
                                 if shard_of(ranges, u) == home)
                    self.assertProblem(srv.json("PUT", "/v1/items/%s/reaction" % on[0], {"reaction": "like"},
                                                user=other, headers={"Idempotency-Key": key2, "If-Match": '"7"'}),
                                       412, "version-mismatch")
                    self.assertProblem(keyed_put(srv, on[1], other, "like", key2), 409, "idempotency-key-mismatch")
