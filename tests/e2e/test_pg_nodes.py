"""Several tallyd nodes on one PostgreSQL database (docs/api.md § Running on PostgreSQL): every rule
holds across them as for one server. Runs only with TALLY_STORE=pg.

- a double click split over two nodes counts once;
- concurrent toggles split over the nodes give exact counts (== a recount, drift []);
- one Idempotency-Key sent to two nodes at once is applied once;
- the change feed has one order: cursors from one node work on the other, never skip;
- counts are folded by one node at a time, taken over within ~5 s when that node is kill -9'd;
- /readyz is 503 while the database is unreachable, and the nodes reconnect by themselves;
- a node started with other kinds, --reaction-mode, --idempotency-ttl or --log-retention than
  the database holds refuses to start (exit 1, naming the setting).
"""

import collections
import random
import re
import threading
import time
import unittest

from harness import (one_shard, PG, SLOW, PgDatabase, Server, TallyTestCase, pg_only, pgcluster_module,
                     run_tallyd, split_cursor, tail, uid, run_threads)

ADMIN = {"X-User-Id": "admin"}
KINDS = ("like", "dislike")
FAST = ["--rate-limit", "off", "--recount-interval", "0"]  # no limit, no periodic recount
TAKEOVER_S = 5.0  # API/issue: another node takes the fold over within seconds


def toggle(node, item, user, reaction, key, client=None):
    return (client or node).json("POST", "/v1/items/%s/reaction:toggle" % item,
                                 {"reaction": reaction}, user=user,
                                 headers={"Idempotency-Key": key})


class NodesCase(TallyTestCase):

    def assertCountsOnAll(self, nodes, item, expected, timeout=3.0):
        for n in nodes:
            self.assertCounts(n, item, expected, timeout=timeout,
                              msg="counts of %s on node :%s" % (item, n.port))

    def assertNoDrift(self, node):
        doc = self.assertOk(node.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
        self.assertEqual(doc["drift"], [], "recount on node :%s found drift" % node.port)
        return doc

    def rows_tally(self, node, item, users):
        tally = {k: 0 for k in KINDS}
        for u in users:
            r = node.reaction(item, u)["reaction"]
            if r != "none":
                tally[r] += 1
        return tally

    def walk_feed(self, nodes, limit=100, max_pages=5000):
        """The whole feed, page after page, each page from the next node in turn (a cursor
        from one node given to the other). Returns the entries."""
        entries, after = [], None
        for n in range(max_pages):
            node = nodes[n % len(nodes)]
            path = "/v1/changes?limit=%d" % limit + ("&after=" + after if after else "")
            doc = self.assertOk(node.json("GET", path, headers=ADMIN), "GET %s on :%s" % (path, node.port))
            if not doc["changes"]:
                return entries
            entries.extend(doc["changes"])
            after = doc["next"]
        self.fail("the feed did not end within %d pages" % max_pages)


# ============================================================================================
@pg_only()
class TwoNodesTest(NodesCase):
    """Two nodes on one fresh database for the class; tests keep apart with fresh ids."""

    a = b = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.a = Server(args=FAST)
        try:
            cls.b = cls.a.node()
        except BaseException:
            cls.a.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            for n in (cls.b, cls.a):
                if n is not None and n.running:
                    n.stop()
        finally:
            for n in (cls.b, cls.a):
                if n is not None:
                    n.close()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        for n in (self.a, self.b):
            if n is None or not n.running:
                raise AssertionError("a node is not running\n" + tail(n.stderr() if n else ""))

    def test_both_nodes_answer_and_see_each_others_writes(self):
        item, user = uid("n2"), uid("u")
        self.assertWrite(self.a.put(item, user, "like"), item, "like", "none", 1, True)
        self.assertEqual(self.b.reaction(item, user), {"item": item, "reaction": "like", "version": 1})
        self.assertWrite(self.b.put(item, user, "dislike"), item, "dislike", "like", 2, True)
        self.assertEqual(self.a.reaction(item, user), {"item": item, "reaction": "dislike", "version": 2})
        self.assertCountsOnAll((self.a, self.b), item, {"like": 0, "dislike": 1})
        for n in (self.a, self.b):
            self.assertEqual(n.request("GET", "/readyz")[0], 200)

    def test_double_click_split_over_two_nodes_counts_once(self):
        item = uid("dbl")
        users = [uid("du") for _ in range(30)]
        barrier = threading.Barrier(2 * len(users), timeout=30)
        answers = collections.defaultdict(list)
        lock = threading.Lock()

        def click(node, u):
            def fn():
                barrier.wait()
                resp = node.put(item, u, "like")
                with lock:
                    answers[u].append(resp)
            return fn

        errors = run_threads([click(n, u) for u in users for n in (self.a, self.b)])
        self.assertEqual(errors, [])
        for u in users:
            got = answers[u]
            self.assertEqual(len(got), 2)
            for st, _, _, raw in got:
                self.assertEqual(st, 200, raw[:300])
            docs = sorted((split_cursor(r[2])[0] for r in got), key=lambda d: not d["changed"])
            self.assertEqual(docs, [
                {"item": item, "reaction": "like", "previous": "none", "version": 1, "changed": True},
                {"item": item, "reaction": "like", "previous": "like", "version": 1, "changed": False},
            ], "user %s: exactly one of the two clicks (one per node) changes the row" % u)
        self.assertCountsOnAll((self.a, self.b), item, {"like": 30, "dislike": 0})
        time.sleep(0.3)
        self.assertCountsOnAll((self.a, self.b), item, {"like": 30, "dislike": 0}, timeout=0)

    def test_concurrent_toggles_split_over_nodes_exact_counts(self):
        items = [uid("tg") for _ in range(2)]
        users = [uid("tu") for _ in range(16)]
        per = 6  # toggles per (user, item, node): every toggle is a real change
        acked = collections.Counter()  # (item, user) -> 2xx toggles
        lock = threading.Lock()

        def worker(node, user, seed):
            def fn():
                rnd = random.Random(seed)
                c = node.client()
                try:
                    for i in range(per * len(items)):
                        item = items[i % len(items)]
                        kind = "like" if users.index(user) % 2 == 0 else rnd.choice(KINDS)
                        st, _, doc, raw = toggle(node, item, user, kind, uid("key"), client=c)
                        if st == 200:
                            with lock:
                                acked[(item, user)] += 1
                            self.assertTrue(doc["changed"], raw[:300])
                        else:
                            raise AssertionError("toggle on :%s -> %s %r" % (node.port, st, raw[:300]))
                finally:
                    c.close()
            return fn

        errors = run_threads([worker(n, u, k) for k, u in enumerate(users)
                              for n in (self.a, self.b)], timeout=120 * SLOW)
        self.assertEqual(errors, [])
        for item in items:
            for k, u in enumerate(users):
                doc = self.a.reaction(item, u)
                n = acked[(item, u)]
                self.assertEqual(doc["version"], n, "%s/%s: version == number of toggles" % (item, u))
                if k % 2 == 0:  # only like toggles: like iff an odd number of them
                    self.assertEqual(doc["reaction"], "like" if n % 2 else "none", (item, u))
            want = self.rows_tally(self.b, item, users)
            self.assertCountsOnAll((self.a, self.b), item, want, timeout=5)
        self.assertNoDrift(self.a)
        self.assertNoDrift(self.b)

    def test_one_key_sent_to_two_nodes_at_once_is_applied_once(self):
        item = uid("ik")
        users = [uid("iu") for _ in range(25)]
        barrier = threading.Barrier(2 * len(users), timeout=30)
        answers = collections.defaultdict(list)
        lock = threading.Lock()
        keys = {u: uid("key") for u in users}

        def send(node, u):
            def fn():
                barrier.wait()
                resp = toggle(node, item, u, "like", keys[u])
                with lock:
                    answers[u].append((node, resp))
            return fn

        errors = run_threads([send(n, u) for u in users for n in (self.a, self.b)])
        self.assertEqual(errors, [])
        for u in users:
            got = answers[u]
            self.assertEqual(len(got), 2)
            ok = [r for _, r in got if r[0] == 200]
            others = [r for _, r in got if r[0] != 200]
            self.assertGreaterEqual(len(ok), 1, "user %s: no 200 at all: %r" % (u, [r[3][:200] for _, r in got]))
            for r in others:
                self.assertProblem(r, 409, "idempotency-key-in-use", "the second of two at once")
            for r in ok:
                self.assertWrite(r, item, "like", "none", 1, True, "user %s: one application" % u)
            if len(ok) == 2:
                self.assertEqual(ok[0][3], ok[1][3], "both nodes give the same answer, byte for byte")
                replayed = [r[1].get("idempotent-replayed") for r in ok]
                self.assertLessEqual(replayed.count("true"), 1, "both marked replayed: %r" % replayed)
            # applied once: the row is at version 1, and a replay on either node says so
            self.assertEqual(self.a.reaction(item, u), {"item": item, "reaction": "like", "version": 1})
            for n in (self.a, self.b):
                again = toggle(n, item, u, "like", keys[u])
                self.assertWrite(again, item, "like", "none", 1, True, "replay on :%s" % n.port)
                self.assertEqual(again[1].get("idempotent-replayed"), "true")
        self.assertCountsOnAll((self.a, self.b), item, {"like": 25, "dislike": 0})

    @one_shard("decimal change-feed cursors (a token with several shards: test_shards_feed.py)")
    def test_change_feed_one_order_cursors_work_on_every_node(self):
        # the feed's end now: everything after it is this test's
        start = None
        for n in range(5000):
            node = (self.a, self.b)[n % 2]
            path = "/v1/changes?limit=1000" + ("&after=" + start if start else "")
            doc = self.assertOk(node.json("GET", path, headers=ADMIN))
            start = doc["next"]
            if not doc["changes"]:
                break
        items = [uid("fd") for _ in range(3)]
        acked, lock = [], threading.Lock()

        def writer(node, n):
            def fn():
                rnd = random.Random(n)
                users = [uid("fu%d" % n) for _ in range(3)]
                c = node.client()
                try:
                    deadline = time.monotonic() + 2.0
                    while time.monotonic() < deadline:
                        item, user = rnd.choice(items), rnd.choice(users)
                        r = rnd.choice(("like", "dislike", "none"))
                        st, _, doc, raw = c.json("PUT", "/v1/items/%s/reaction" % item,
                                                 {"reaction": r}, user=user)
                        if st != 200:
                            raise AssertionError("write on :%s -> %s %r" % (node.port, st, raw[:200]))
                        if doc["changed"]:
                            with lock:
                                acked.append((item, user, doc["previous"], doc["reaction"], doc["version"]))
                finally:
                    c.close()
            return fn

        # users of one writer thread are written through one node; the two nodes interleave
        # on items, so the log's order has to come from the database, not from a node
        errors = run_threads([writer(node, n) for n, node in enumerate((self.a, self.b) * 3)])
        self.assertEqual(errors, [])
        self.assertGreaterEqual(len(acked), 20, "too few changes to mean anything")

        def after_start(nodes, limit):
            entries, after = [], start
            for n in range(5000):
                node = nodes[n % len(nodes)]
                path = "/v1/changes?limit=%d&after=%s" % (limit, after)
                doc = self.assertOk(node.json("GET", path, headers=ADMIN), "%s on :%s" % (path, node.port))
                if not doc["changes"]:
                    return entries
                self.assertEqual(doc["next"], doc["changes"][-1]["cursor"])
                entries.extend(doc["changes"])
                after = doc["next"]
            self.fail("the feed did not end")

        # every change was acknowledged (committed) before this point; allow the tail a moment
        # to become visible, but a page must never skip an entry to show a later one
        deadline = time.monotonic() + 5 * SLOW
        while len(after_start((self.a,), 1000)) < len(acked) and time.monotonic() < deadline:
            time.sleep(0.1)
        alternating = after_start((self.a, self.b), 7)  # pages from A, B, A, ... cursors crossing
        only_b = after_start((self.b,), 1000)
        only_a = after_start((self.a,), 1000)
        as_t = lambda e: (e["item"], e["user"], e["from"], e["to"], e["version"])  # noqa: E731
        self.assertEqual([e["cursor"] for e in alternating], [e["cursor"] for e in only_a],
                         "one order: pages crossing nodes == pages from node A")
        self.assertEqual([as_t(e) for e in only_a], [as_t(e) for e in only_b],
                         "one order: node A's feed == node B's feed")
        cursors = [e["cursor"] for e in alternating]
        self.assertEqual(len(set(cursors)), len(cursors), "a cursor repeats")
        got = collections.Counter(as_t(e) for e in alternating)
        want = collections.Counter(acked)
        self.assertEqual(sorted(got - want), [], "in the feed but never acknowledged")
        self.assertEqual(sorted(want - got), [], "acknowledged but missing from the feed (skipped)")
        self.assertEqual(len(alternating), len(acked), "entries == real changes")
        chains = collections.defaultdict(list)
        for e in alternating:
            chains[(e["item"], e["user"])].append(e)
        for key, es in chains.items():
            self.assertEqual([e["version"] for e in es], list(range(1, len(es) + 1)),
                             "versions of %r strictly consecutive in feed order" % (key,))
            prev = "none"
            for e in es:
                self.assertEqual(e["from"], prev, "broken chain for %r" % (key,))
                prev = e["to"]
        # a cursor from A in the middle of the log: B continues from exactly there
        if len(alternating) > 4:
            mid = alternating[len(alternating) // 2]
            doc = self.assertOk(self.b.json("GET", "/v1/changes?limit=1000&after=" + mid["cursor"], headers=ADMIN))
            self.assertEqual([e["cursor"] for e in doc["changes"]][:3],
                             cursors[len(alternating) // 2 + 1:][:3])

    def test_long_poll_on_one_node_wakes_for_a_write_on_the_other(self):
        end = None
        for _ in range(5000):
            doc = self.assertOk(self.b.json("GET", "/v1/changes?limit=1000" +
                                            ("&after=" + end if end else ""), headers=ADMIN))
            end = doc["next"]
            if not doc["changes"]:
                break
        item, user = uid("lp"), uid("u")
        result = {}

        def poll():
            t0 = time.monotonic()
            result["resp"] = self.b.json("GET", "/v1/changes?after=%s&wait=10" % end, headers=ADMIN)
            result["took"] = time.monotonic() - t0

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        time.sleep(0.5)
        self.assertWrite(self.a.put(item, user, "like"), item, "like", "none", 1, True)
        t.join(15)
        self.assertFalse(t.is_alive(), "the poll on B never answered")
        doc = self.assertOk(result["resp"])
        self.assertEqual([(e["item"], e["user"], e["version"]) for e in doc["changes"]][:1],
                         [(item, user, 1)], "B's poll sees A's write")
        self.assertLess(result["took"], 9.5, "B answered only at the end of the wait")

    def test_settings_that_must_agree_refuse_a_node(self):
        # the database holds like,dislike / one / 24h / 24h (the defaults of node a and b)
        for flag, value, pattern in (
                ("--reactions", "like,love", r"reactions|kinds"),
                ("--reactions", "like", r"reactions|kinds"),
                ("--reaction-mode", "many", r"reaction[-_ ]mode"),
                ("--idempotency-ttl", "90s", r"idempotency[-_ ]ttl"),
                ("--log-retention", "1h", r"log[-_ ]retention")):
            with self.subTest(flag=flag, value=value):
                rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + self.a.store_args() +
                                          FAST + [flag, value])
                if rc == 2 and re.search(r"(?i)%s: unknown flag" % re.escape(flag), err):
                    # like server_without_rate_limit: a tallyd without the feature at all has
                    # no value of it to disagree on (the API describes it; this build lacks it)
                    self.skipTest("this tallyd has no %s flag" % flag)
                self.assertEqual(rc, 1, "a node with %s %s beside the others\nstdout=%r\nstderr=%s"
                                 % (flag, value, out, tail(err)))
                self.assertRegex(err, "(?i)" + pattern, "the message names the setting")
        # the running nodes did not mind
        for n in (self.a, self.b):
            self.assertEqual(n.request("GET", "/readyz")[0], 200)
        item, user = uid("st"), uid("u")
        self.assertWrite(self.b.put(item, user, "like"), item, "like", "none", 1, True)


# ============================================================================================
@pg_only()
class StartTogetherTest(NodesCase):

    def test_two_nodes_start_at_once_on_a_fresh_repeatable_read_database(self):
        # The schema step decides under its advisory lock from what it then reads: an operator's
        # default_transaction_isolation of repeatable read must not give the second node a view
        # taken before the first one's schema was committed (it would create it again and fail).
        for round_no in range(3):
            db = PgDatabase()
            self.addCleanup(db.drop)
            a = Server(args=FAST, store=db, start=False)
            self.addCleanup(a.close)
            b = a.node(start=False)
            self.addCleanup(b.close)
            for d in [db] + a.shard_dbs:
                d.sql("ALTER DATABASE \"%s\" SET default_transaction_isolation = 'repeatable read'" % d.name)
            errors = run_threads([a.start, b.start])
            self.assertEqual(errors, [], "round %d: both nodes start" % round_no)
            item, user = uid("together"), uid("u")
            self.assertEqual(a.put(item, user, "like")[0], 200)
            self.assertCountsOnAll([a, b], item, {"like": 1, "dislike": 0})
            self.assertNoDrift(b)
            b.stop()
            a.stop()


# ============================================================================================
@pg_only()
class FoldTakeoverTest(NodesCase):

    def test_counts_taken_over_when_the_folding_node_is_killed(self):
        # which node folds is not visible from outside: kill one, then the other, so the
        # folding node is killed at least once (the second kill hits the one that took over)
        with Server(args=FAST) as a:
            b = a.node()
            try:
                live = [a, b]
                items = [uid("fold") for _ in range(2)]
                users = [uid("fu") for _ in range(12)]
                rnd = random.Random(7)
                for round_no in range(2):
                    victim, survivor = live[0], live[1]
                    for u in users:  # load through both
                        for it in items:
                            for n in (victim, survivor):
                                st = n.put(it, u, rnd.choice(("like", "dislike", "none")))[0]
                                self.assertEqual(st, 200)
                    victim.kill9()
                    t_kill = time.monotonic()
                    for u in users[: len(users) // 2]:  # more writes on the survivor
                        for it in items:
                            self.assertEqual(survivor.put(it, u, rnd.choice(KINDS))[0], 200)
                    for it in items:
                        want = self.rows_tally(survivor, it, users)
                        self.assertCounts(survivor, it, want, timeout=TAKEOVER_S + 2.0,
                                          msg="round %d: counts of %s on the survivor %.1fs after "
                                              "kill -9 of the other node" % (round_no, it,
                                                                            time.monotonic() - t_kill))
                    self.assertNoDrift(survivor)
                    # the killed node comes back (a fresh process, same database)
                    victim.start()
                    live = [survivor, victim]
                for it in items:
                    self.assertCountsOnAll(live, it, self.rows_tally(live[0], it, users))
            finally:
                if b.running:
                    b.stop()
                b.close()


# ============================================================================================
@pg_only()
class DatabaseOutageTest(NodesCase):
    """Its own cluster: stopping the run's cluster would take the other tests' servers down."""

    @one_shard("decimal change-feed cursors (a token with several shards: test_shards_feed.py)")
    def test_readyz_503_while_unreachable_and_nodes_reconnect(self):
        pgc = pgcluster_module()
        cluster = pgc.start_primary(name="outage", fsync=False)
        try:
            db = PgDatabase(cluster)
            with Server(args=FAST, store=db) as a:
                b = a.node()
                try:
                    item, user = uid("out"), uid("u")
                    self.assertWrite(a.put(item, user, "like"), item, "like", "none", 1, True)
                    for n in (a, b):
                        self.assertEqual(n.request("GET", "/readyz")[0], 200)
                    cluster.stop("fast")
                    deadline = time.monotonic() + 15 * SLOW
                    states = {}
                    while time.monotonic() < deadline:
                        states = {n.port: n.request("GET", "/readyz")[0] for n in (a, b)}
                        if set(states.values()) == {503}:
                            break
                        time.sleep(0.2)
                    self.assertEqual(set(states.values()), {503}, "readyz with the database down: %r" % states)
                    for n in (a, b):
                        self.assertEqual(n.request("GET", "/healthz")[0], 200, "the process is up")
                        resp = n.put(item, user, "dislike")
                        self.assertProblem(resp, 503, "unavailable", "a write with the database down")
                        self.assertRegex(resp[1].get("retry-after", ""), r"^[0-9]+$", "Retry-After")
                    cluster.start()  # same port, same data
                    deadline = time.monotonic() + 30 * SLOW
                    while time.monotonic() < deadline:
                        states = {n.port: n.request("GET", "/readyz")[0] for n in (a, b)}
                        if set(states.values()) == {200}:
                            break
                        time.sleep(0.2)
                    self.assertEqual(set(states.values()), {200},
                                     "readyz after the database came back: %r" % states)
                    self.assertWrite(b.put(item, user, "dislike"), item, "dislike", "like", 2, True)
                    self.assertWrite(a.put(item, user, "none"), item, "none", "dislike", 3, True)
                    self.assertCountsOnAll((a, b), item, {"like": 0, "dislike": 0})
                    for n in (a, b):
                        self.assertTrue(n.running, "a node died during the outage\n" + tail(n.stderr()))
                finally:
                    if b.running:
                        b.stop()
                    b.close()
        finally:
            cluster.destroy()


if __name__ == "__main__":
    unittest.main()
