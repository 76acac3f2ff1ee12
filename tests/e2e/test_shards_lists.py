"""A user's list across shards (docs/postgresql.md § Shards): GET /v1/users/{user}/reactions lives
on the user's shard and is folded from every shard's log, with one checkpoint per source shard
kept beside the list. Checked against the rows of both databases: every item the user's reaction
is set on, once, most recent first in the order the changes reached the user's shard; through a
restart, a kill -9 and two nodes folding at once; and the source's log kept while the fold of it
cannot run."""

import time

from harness import SLOW, PgDatabase, Server, TallyTestCase, pg_only, run_threads
from test_shards import shard_map, shard_of

FAST = ["--rate-limit", "off", "--recount-interval", "0"]
LAG_S = 10.0  # the fold polls every 50 ms: far more than enough, and bounded


def walk(srv, user, limit=100, **params):
    out, after = [], None
    for _ in range(1000):
        q = dict(params, limit=limit)
        if after:
            q["after"] = after
        st, _, doc, raw = srv.json("GET", "/v1/users/%s/reactions?%s" % (
            user, "&".join("%s=%s" % kv for kv in q.items())), user=user)
        assert st == 200, (st, raw[:300])
        out.extend(doc["reactions"])
        after = doc.get("next")
        if not after:
            return out
    raise AssertionError("the walk did not end")


def wait_list(srv, user, want, timeout=LAG_S, key=list):
    """Polls the user's list until its (item, reaction) pairs, newest first, are want (as key sees
    them); the last seen."""
    deadline = time.monotonic() + timeout * SLOW
    while True:
        try:
            got = [(e["item"], e["reaction"]) for e in walk(srv, user)]
        except AssertionError:  # a shard's database coming back: 503 until the node reconnects
            if time.monotonic() > deadline:
                raise
            got = None
        if (got is not None and key(got) == key(want)) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def rows_of(dbs, user):
    """{item: kind code} of the user's rows that are set, over every database."""
    out = {}
    for db in dbs:
        text = db.sql("SELECT item || ' ' || kind FROM tally_rows WHERE \"user\" = '%s' AND kind <> 0" % user)
        for line in text.split("\n"):
            if line:
                item, kind = line.split(" ")
                out[item] = int(kind)
    return out


def split(ranges, prefix, n):
    """n ids of each shard: {0: [...], 1: [...]}."""
    on = {0: [], 1: []}
    i = 0
    while min(len(v) for v in on.values()) < n:
        name = "%s%d" % (prefix, i)
        if len(on[shard_of(ranges, name)]) < n:
            on[shard_of(ranges, name)].append(name)
        i += 1
    return on


def recount_ok(test, srv):
    doc = test.assertOk(srv.json("POST", "/v1/admin/recount", {}, user="admin"))
    test.assertEqual(doc["drift"], [])
    test.assertEqual(doc["list_mismatches"], 0, "the lists disagree with the rows")


@pg_only("shards are PostgreSQL databases")
class UserListAcrossShardsTest(TallyTestCase):
    def test_a_users_list_holds_both_shards_items_newest_first(self):
        with Server(shards=2, args=FAST) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(srv.db)
            items = split(ranges, "li", 4)
            users = split(ranges, "lu", 1)
            for home in (0, 1):
                user = users[home][0]
                # alternately on the user's own shard and the other one; each change waited for, so
                # the order in which they reached the user's shard is the order they were made
                order = [items[(home + i) % 2][i // 2] for i in range(8)]
                want = []
                for n, item in enumerate(order):
                    kind = "like" if n % 3 else "dislike"
                    self.assertEqual(srv.put(item, user, kind)[0], 200)
                    want.insert(0, (item, kind))
                    self.assertEqual(wait_list(srv, user, want), want, "user of shard %d" % home)
                # paging with the cursor gives the same walk
                self.assertEqual([(e["item"], e["reaction"]) for e in walk(srv, user, limit=3)], want)
                self.assertEqual([e["item"] for e in walk(srv, user, reaction="dislike")],
                                 [i for i, k in want if k == "dislike"])
                # a change moves the pair to the front, a removal takes it out, on either shard
                for item in (order[0], order[1]):
                    kind = "like" if dict(want)[item] == "dislike" else "dislike"
                    self.assertEqual(srv.put(item, user, kind)[0], 200)
                    want = [(item, kind)] + [p for p in want if p[0] != item]
                    self.assertEqual(wait_list(srv, user, want), want)
                for item in (order[2], order[3]):
                    self.assertEqual(srv.put(item, user, "none")[0], 200)
                    want = [p for p in want if p[0] != item]
                    self.assertEqual(wait_list(srv, user, want), want)
                self.assertEqual(sorted(i for i, _ in want), sorted(rows_of(dbs, user)))
                # the foreign entries are on the user's shard, with the source's checkpoint beside them
                other = dbs[1 - home].sql(
                    "SELECT count(*) FROM tally_lists WHERE \"user\" = '%s' AND kind = 0" % user)
                mine = dbs[home].sql("SELECT count(*) FROM tally_lists WHERE \"user\" = '%s' AND kind = 0" % user)
                self.assertEqual(int(mine), len(want))
                self.assertEqual(int(other), len([i for i, _ in want if shard_of(ranges, i) != home]))
                self.assertTrue(dbs[home].sql("SELECT count(*) FROM tally_aux WHERE key = 'cluster/userfold/%d'"
                                              % (1 - home)) == "1")
            recount_ok(self, srv)

    def test_the_recount_finds_a_damaged_copy(self):
        with Server(shards=2, args=FAST) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(srv.db)
            items = split(ranges, "di", 2)
            users = split(ranges, "du", 1)
            user = users[0][0]
            for item in items[0] + items[1]:
                self.assertEqual(srv.put(item, user, "like")[0], 200)
            want = [(i, "like") for i in reversed(items[0] + items[1])]
            self.assertEqual(wait_list(srv, user, want, key=sorted), want)
            recount_ok(self, srv)
            # one copy gone on the user's shard, another with the wrong set
            dbs[0].sql("DELETE FROM tally_lists WHERE item = '%s' AND \"user\" = '%s'" % (items[1][0], user))
            dbs[0].sql("UPDATE tally_lists SET kinds = 2 WHERE item = '%s' AND \"user\" = '%s'" % (items[1][1], user))
            doc = self.assertOk(srv.json("POST", "/v1/admin/recount", {}, user="admin"))
            self.assertEqual(doc["list_mismatches"], 3, doc)  # two entries missing (any kind, like), one set

    def test_an_erased_user_leaves_their_list_on_every_shard(self):
        with Server(shards=2, args=FAST) as srv:
            ranges = shard_map(srv.db)
            items = split(ranges, "ei", 3)
            user = "eraseme"
            for item in items[0] + items[1]:
                self.assertEqual(srv.put(item, user, "like")[0], 200)
            deadline = time.monotonic() + LAG_S * SLOW
            while len(walk(srv, user)) < 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(len(walk(srv, user)), 6)
            self.assertOk(srv.json("DELETE", "/v1/admin/users/%s" % user, user="admin"))
            self.assertEqual(wait_list(srv, user, []), [])
            recount_ok(self, srv)

    def test_a_kill_and_two_nodes_lose_nothing_and_double_nothing(self):
        with Server(shards=2, args=FAST) as srv:
            dbs = [srv.db] + srv.shard_dbs
            ranges = shard_map(srv.db)
            items = split(ranges, "ki", 8)
            users = ["ku%d" % u for u in range(6)]
            all_items = items[0] + items[1]

            def writes(server, round_, u):
                def one():
                    for n, item in enumerate(all_items):
                        if (n + u + round_) % 3 != 2:
                            kind = ("like", "dislike", "none")[(n + round_) % 3]
                            st = server.put(item, users[u], kind)[0]
                            assert st == 200, st
                return one

            self.assertEqual(run_threads([writes(srv, 0, u) for u in range(len(users))]), [])
            srv.kill9()  # folds in flight are lost whole: the next start folds them again
            srv.start()
            with srv.node() as second:
                # two nodes write and fold at once; either may lead each shard's fold
                self.assertEqual(run_threads([writes((srv, second)[i % 2], 1 + i % 2, i // 2)
                                              for i in range(2 * len(users))]), [])
                for user in users:
                    for node in (srv, second):
                        deadline = time.monotonic() + LAG_S * SLOW
                        while True:
                            got = walk(node, user, limit=7)
                            if sorted(e["item"] for e in got) == sorted(rows_of(dbs, user)) or \
                                    time.monotonic() > deadline:
                                break
                            time.sleep(0.05)
                        self.assertEqual(sorted(e["item"] for e in got), sorted(rows_of(dbs, user)), user)
                        self.assertEqual(len(got), len(set(e["item"] for e in got)), "listed twice")
                second.stop()
            srv.restart()
            for user in users:
                self.assertEqual(sorted(e["item"] for e in walk(srv, user)), sorted(rows_of(dbs, user)), user)
            recount_ok(self, srv)


@pg_only("shards are PostgreSQL databases")
class UserListSourceKeptTest(TallyTestCase):
    def test_a_source_log_is_kept_while_the_users_shard_is_down(self):
        from harness import pgcluster_module
        other = pgcluster_module().start_primary(name="ulist1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1], args=FAST + ["--log-retention", "1s"]) as srv:
                ranges = shard_map(srv.db)
                items = split(ranges, "pi", 4)
                users = split(ranges, "pu", 1)
                user = users[1][0]  # on the shard that goes down
                self.assertEqual(srv.put(items[0][0], user, "like")[0], 200)
                self.assertEqual(wait_list(srv, user, [(items[0][0], "like")]), [(items[0][0], "like")])
                pgcluster_module().stop(other, mode="immediate")
                for item in items[0][1:]:
                    self.assertEqual(srv.put(item, user, "like")[0], 200)
                time.sleep(3.0 * SLOW)  # past the retention and several sweeps
                kept = srv.db.sql("SELECT count(*) FROM tally_log WHERE \"user\" = '%s' AND item <> '%s'"
                                  % (user, items[0][0]))
                self.assertEqual(int(kept), 3, "shard 0 pruned entries shard 1 has not folded")
                other.start()
                other.wait_ready()
                want = [(i, "like") for i in reversed(items[0])]
                # folded together once back: one position, so in id order among themselves
                got = wait_list(srv, user, want, timeout=30, key=sorted)
                self.assertEqual(sorted(got), sorted(want))
                # and once folded, the log is pruned behind every fold again
                deadline = time.monotonic() + 15 * SLOW
                while time.monotonic() < deadline and srv.db.sql("SELECT count(*) FROM tally_log") != "0":
                    time.sleep(0.2)
                self.assertEqual(srv.db.sql("SELECT count(*) FROM tally_log"), "0")
        finally:
            pgcluster_module().destroy(other)
