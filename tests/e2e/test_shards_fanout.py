"""Voiding and restoring a user, import and export across two shards (docs/api.md § Voiding a
user's reactions, § Export; docs/postgresql.md § Shards): the voided-user flag is written to every
shard, shard 0 first, each shard's rows stop counting with its flag, and a void that failed part-way
is finished by the same request again. An import routes each line to its item's shard (a voided-user
line to every shard); an export reads every shard and is imported back into one shard or two with the
same rows, counts and voided users. Checked against the databases themselves."""

import json
import time

from harness import PgDatabase, Server, TallyTestCase, pg_only
from test_export import export_lines, import_rows, rows_of
from test_shards import shard_map, shard_of

FAST = ["--rate-limit", "off"]
ADMIN = {"X-User-Id": "admin"}


def split_items(ranges, prefix, n):
    """n ids of each shard: {0: [...], 1: [...]}."""
    on = {0: [], 1: []}
    i = 0
    while min(len(v) for v in on.values()) < n:
        item = "%s%d" % (prefix, i)
        k = shard_of(ranges, item)
        if len(on[k]) < n:
            on[k].append(item)
        i += 1
    return on


def void_flags(dbs, user):
    """Whether each database holds the user's voided flag."""
    return [db.sql("SELECT count(*) FROM tally_aux WHERE key = 'void/u/%s'" % user).strip()
            == "1" for db in dbs]


def batch(srv, items, user=None):
    st, _, doc, raw = srv.json("GET", "/v1/items?ids=" + ",".join(items), user=user)
    assert st == 200, (st, raw[:300])
    return doc["items"]


def wait_user(case, srv, user, want, timeout=10.0):
    """GET /v1/admin/users/{user} until it says want (its reactions come from the lists, which lag)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = case.assertOk(srv.json("GET", "/v1/admin/users/" + user, headers=ADMIN))
        if doc == want or time.monotonic() > deadline:
            case.assertEqual(doc, want)
            return


def no_drift(case, srv):
    doc = case.assertOk(srv.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
    case.assertEqual(doc["drift"], [])
    case.assertEqual(doc["corrected"], 0)


def sorted_rows(lines):
    return sorted(json.dumps(x, sort_keys=True) for x in lines)


@pg_only("shards are PostgreSQL databases")
class VoidAcrossShardsTest(TallyTestCase):
    def test_a_void_reaches_every_shard_and_a_restore_brings_everything_back(self):
        with Server(shards=2, args=FAST) as srv:
            dbs = [srv.db] + srv.shard_dbs
            on = split_items(shard_map(srv.db), "v", 6)
            items = on[0] + on[1]
            for item in items:
                self.assertEqual(srv.put(item, "bot", "like")[0], 200)
                self.assertEqual(srv.put(item, "human", "like")[0], 200)
            self.assertEqual(srv.put(on[1][0], "bot", "dislike")[0], 200)  # bot: 11 likes, 1 dislike
            want = {i: {"like": 2, "dislike": 0} for i in items}
            want[on[1][0]] = {"like": 1, "dislike": 1}
            for item in items:
                self.assertEqual(srv.wait_counts(item, want[item]), want[item], item)
            seen_by_bot = batch(srv, items, user="bot")

            doc = self.assertOk(srv.json("POST", "/v1/admin/users/bot/void", headers=ADMIN))
            self.assertEqual(doc, {"voided": len(items)})
            self.assertEqual(void_flags(dbs, "bot"), [True, True])
            for item in items:  # the counts drop on both shards
                self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0}, item)
            self.assertEqual(batch(srv, items, user="bot"), seen_by_bot, "the voided user sees nothing change")
            self.assertEqual(srv.reaction(on[1][0], "bot")["reaction"], "dislike")
            wait_user(self, srv, "bot", {"user": "bot", "voided": True, "reactions": len(items)})
            no_drift(self, srv)
            # already voided everywhere: nothing more
            self.assertEqual(self.assertOk(srv.json("POST", "/v1/admin/users/bot/void", headers=ADMIN)), {"voided": 0})
            # a later write of the voided user is answered as usual, and never counted
            st, _, doc, raw = srv.json("PUT", "/v1/items/%s/reaction" % on[1][1], {"reaction": "dislike"}, user="bot")
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual(doc["counts"], {"like": 1, "dislike": 1}, "their own view: their reaction counted")
            self.assertEqual(srv.wait_counts(on[1][1], {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
            # who reacted leaves them out, on either shard
            for item in (on[0][0], on[1][2]):
                st, _, doc, raw = srv.json("GET", "/v1/items/%s/reactions" % item, user="admin")
                self.assertEqual(st, 200, raw[:300])
                self.assertEqual([e["user"] for e in doc["reactions"]], ["human"], item)

            doc = self.assertOk(srv.json("POST", "/v1/admin/users/bot/restore", headers=ADMIN))
            self.assertEqual(doc, {"restored": len(items)})
            self.assertEqual(void_flags(dbs, "bot"), [False, False])
            want[on[1][1]] = {"like": 1, "dislike": 1}
            for item in items:
                self.assertEqual(srv.wait_counts(item, want[item]), want[item], item)
            wait_user(self, srv, "bot", {"user": "bot", "voided": False, "reactions": len(items)})
            no_drift(self, srv)
            st, _, text = srv.request("GET", "/metrics")
            self.assertIn(b"tally_voided_rows_total %d" % len(items), text)
            self.assertIn(b"tally_restored_rows_total %d" % len(items), text)
            self.assertIn(b"tally_voids_total 1", text)

    def test_a_void_that_failed_on_a_shard_is_finished_by_the_same_request_again(self):
        from harness import pgcluster_module
        other = pgcluster_module().start_primary(name="fan1", fsync=False)
        try:
            db1 = PgDatabase(cluster=other)
            with Server(shard_dbs=[db1], args=FAST) as srv:
                on = split_items(shard_map(srv.db), "p", 4)
                for item in on[0] + on[1]:
                    self.assertEqual(srv.put(item, "bot", "like")[0], 200)
                    self.assertEqual(srv.put(item, "human", "like")[0], 200)
                pgcluster_module().stop(other, mode="immediate")
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    st, _, doc, raw = srv.json("POST", "/v1/admin/users/bot/void", headers=ADMIN)
                    if st == 503:
                        break
                    self.assertEqual(st, 200, raw[:300])  # shard 1's loss not noticed yet: done whole
                    self.assertEqual(srv.json("POST", "/v1/admin/users/bot/restore", headers=ADMIN)[0], 200)
                    time.sleep(0.2)
                self.assertProblem((st, _, doc, raw), 503, "unavailable")
                # shard 0 is done: its items stopped counting the bot; shard 1's are out of reach
                self.assertEqual(void_flags([srv.db], "bot"), [True])
                for item in on[0]:
                    self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
                other.start()
                other.wait_ready()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    st, _, doc, raw = srv.json("POST", "/v1/admin/users/bot/void", headers=ADMIN)
                    if st == 200:
                        break
                    time.sleep(0.3)
                self.assertEqual((st, doc), (200, {"voided": len(on[1])}), "what was left: shard 1's rows")
                self.assertEqual(void_flags([srv.db, db1], "bot"), [True, True])
                for item in on[0] + on[1]:
                    self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
                no_drift(self, srv)
        finally:
            pgcluster_module().destroy(other)


@pg_only("shards are PostgreSQL databases")
class ImportExportAcrossShardsTest(TallyTestCase):
    def rows(self, ranges):
        on = split_items(ranges, "x", 15)
        out = []
        for n, item in enumerate(on[0] + on[1]):
            for u in range(1 + n % 4):
                out.append({"item": item, "user": "u%d" % u, "reaction": "like" if (n + u) % 3 else "dislike"})
        return out

    def state(self, srv, items):
        """Rows (an export's lines, sorted), the counts of every item, the voided users."""
        lines = rows_of(export_lines(srv)[2])
        voided = sorted(x["user"] for x in lines if "voided" in x)
        counts = {}
        for i in range(0, len(items), 50):
            for e in batch(srv, items[i:i + 50]):
                counts[e["item"]] = e["counts"]
        return sorted_rows(x for x in lines if "item" in x), counts, voided

    def settle(self, srv, items, want_counts):
        for item in items:
            self.assertEqual(srv.wait_counts(item, want_counts[item], timeout=10), want_counts[item], item)

    def test_an_export_of_two_shards_imports_into_two_shards_and_into_one(self):
        with Server(shards=2, args=FAST) as a:
            dbs = [a.db] + a.shard_dbs
            rows = self.rows(shard_map(a.db))
            items = sorted({r["item"] for r in rows})
            doc = import_rows(a, rows + [{"user": "u1", "voided": True}])
            self.assertEqual((doc["read"], doc["applied"]), (len(rows) + 1, len(rows) + 1))
            self.assertEqual(void_flags(dbs, "u1"), [True, True], "a voided-user line reaches every shard")
            # each line went to its item's shard
            ranges = shard_map(a.db)
            for k, db in enumerate(dbs):
                held = db.sql("SELECT DISTINCT item FROM tally_rows ORDER BY 1").split()
                self.assertEqual(held, sorted(i for i in items if shard_of(ranges, i) == k), k)
            want = {}
            for r in rows:
                c = want.setdefault(r["item"], {"like": 0, "dislike": 0})
                c[r["reaction"]] += r["user"] != "u1"
            self.settle(a, items, want)
            no_drift(self, a)
            exported = export_lines(a)[2]
            self.assertEqual(exported[-1], {"export": "complete", "lines": len(rows) + 1})
            key = [(x["item"], x["user"]) for x in exported if "item" in x]
            self.assertEqual(key, sorted(key, key=lambda t: (t[0].encode(), t[1].encode())),
                             "the shards' rows merged in key order")
            self.assertEqual(exported[-2], {"user": "u1", "voided": True}, "the voided users after the rows")
            self.assertEqual(sum(1 for x in exported if x.get("voided")), 1, "one line per voided user")
            source = self.state(a, items)
            self.assertEqual(len(source[0]), len(rows))
            self.assertEqual(source[2], ["u1"])

            with Server(shards=2, args=FAST) as b:
                doc = import_rows(b, exported)
                self.assertEqual(doc["applied"], len(rows) + 1)
                self.settle(b, items, want)
                self.assertEqual(self.state(b, items), source)
                self.assertEqual(void_flags([b.db] + b.shard_dbs, "u1"), [True, True])
                no_drift(self, b)
                # again: nothing changes, on either shard
                doc = import_rows(b, exported)
                self.assertEqual((doc["applied"], doc["unchanged"]), (0, len(rows) + 1))

            with Server(shards=1, args=FAST) as c:
                import_rows(c, exported)
                self.settle(c, items, want)
                self.assertEqual(self.state(c, items), source)
                no_drift(self, c)
                # the same lines in the same order (key order, the voided users after the rows)
                one = export_lines(c)[2]
                self.assertEqual(one, exported, "an export does not depend on how many shards wrote it")
                # and a one-shard export into two shards
                with Server(shards=2, args=FAST) as d:
                    import_rows(d, one)
                    self.settle(d, items, want)
                    self.assertEqual(self.state(d, items), source)
                    no_drift(self, d)

    def test_a_users_export_reads_every_shard(self):
        with Server(shards=2, args=FAST) as srv:
            on = split_items(shard_map(srv.db), "m", 5)
            mine = on[0] + on[1]
            for n, item in enumerate(mine):
                self.assertEqual(srv.put(item, "me", "like" if n % 2 else "dislike")[0], 200)
                self.assertEqual(srv.put(item, "other", "like")[0], 200)
            self.assertEqual(srv.put(on[1][4], "me", "none")[0], 200)  # not set: no line
            want = {i: ("like" if n % 2 else "dislike") for n, i in enumerate(mine) if i != on[1][4]}
            deadline = time.monotonic() + 10
            while True:
                st, hdrs, lines = export_lines(srv, "/v1/users/me/export", user="me")
                self.assertEqual(st, 200)
                got = {x["item"]: x["reaction"] for x in lines}
                if got == want or time.monotonic() > deadline:  # the lists lag as the counts do
                    break
                time.sleep(0.2)
            self.assertEqual(got, want)
            self.assertEqual(len(lines), len(want), "each item once")
            ats = [x["at"] for x in lines]
            self.assertEqual(ats, sorted(ats, reverse=True), "newest first, the shards merged")
            self.assertTrue(all(set(x) == {"item", "reaction", "at"} for x in lines), lines[:2])
            self.assertEqual(hdrs["content-type"], "application/x-ndjson")
            self.assertProblem(srv.json("GET", "/v1/users/me/export", user="other"), 403, "forbidden")
