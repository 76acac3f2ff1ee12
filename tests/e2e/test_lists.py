"""Who reacted and a user's reactions (docs/api.md § "Who reacted, and a user's reactions"), on both
stores:

- a walk over thousands of entries with writes going on between its pages: no entry twice, every
  entry that did not change during the walk listed, newest change first;
- the reaction filter, limits, bad cursors and parameters (400 invalid-parameter);
- many mode: a kind's page is ordered (and timed) by when that kind joined the set;
- the access flags --who-reacted and --user-reactions, each value;
- erasure right after a burst of the user's writes (with the lists lagging: --fold-window);
- kill -9 while the lists catch up: after restart they equal the rows (recount finds nothing);
- on PostgreSQL: a list asked on node B shows writes made on node A once folded, and a
  database of schema 1 gets its lists built when a node opens it.
"""

import json
import re
import threading
import time

from harness import (PG, SLOW, Server, TallyTestCase, embedded_only, metric, pg_only, run_threads, uid)

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
LIST_WAIT_S = 5.0


def import_lines(srv, records):
    """records: (item, user, reaction) through POST /v1/admin/import (one connection each)."""
    body = "".join(json.dumps({"item": i, "user": u, "reaction": r}) + "\n" for i, u, r in records)
    st, _, doc, raw = srv.json("POST", "/v1/admin/import", body=body.encode(),
                               headers={"X-User-Id": "admin", "Content-Type": "application/x-ndjson"})
    assert st == 200, (st, raw[:300])
    return doc


def page(srv, path, user="admin", **params):
    q = "&".join("%s=%s" % kv for kv in params.items())
    return srv.json("GET", path + ("?" + q if q else ""), user=user)


def walk(srv, path, limit=100, between=None, max_pages=1000, **params):
    """Every entry of a list, page by page; between(page_number) runs after each page."""
    out, after, n = [], None, 0
    while n < max_pages:
        p = dict(params, limit=limit)
        if after:
            p["after"] = after
        st, _, doc, raw = page(srv, path, **p)
        assert st == 200, (st, raw[:300])
        out.extend(doc["reactions"])
        n += 1
        after = doc.get("next")
        if not after:
            return out
        if between:
            between(n)
    raise AssertionError("the walk did not end")


def recount_ok(test, srv):
    doc = test.assertOk(srv.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
    test.assertEqual(doc["drift"], [])
    test.assertEqual(doc["list_mismatches"], 0, "the lists disagree with the rows")
    return doc


def wait_for(fn, timeout=LIST_WAIT_S):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


class PagingTest(TallyTestCase):

    def test_walk_with_writes_between_pages(self):
        n = 3000
        with Server(args=FAST) as s:
            item = uid("big")
            users = ["u%05d" % i for i in range(n)]
            current = {u: "like" if i % 3 else "dislike" for i, u in enumerate(users)}
            import_lines(s, [(item, u, current[u]) for u in users])
            path = "/v1/items/%s/reactions" % item
            # the walk starts once the import is folded (the lists lag as the counts do: an entry
            # folded during the walk lands at its own position, perhaps below the cursor)
            self.assertCounts(s, item, {"like": 2000, "dislike": 1000}, timeout=10)
            changed, entries = set(), []

            def between(k):
                # writes during the walk: users not listed yet (older), users listed already, new ones
                for j in range(5):
                    pos = k * 100 + 50 + j * 7
                    older = users[n - 1 - pos] if pos < n else None
                    seen = entries[j * 3]["user"] if len(entries) > j * 3 else None
                    for u in (older, seen):
                        if u and u not in changed:  # a real change: the other kind
                            changed.add(u)
                            current[u] = "dislike" if current[u] == "like" else "like"
                            self.assertEqual(s.put(item, u, current[u])[0], 200)
                    fresh = "n%d_%d" % (k, j)
                    changed.add(fresh)
                    self.assertEqual(s.put(item, fresh, "like")[0], 200)

            after, pages = None, 0
            while True:
                p = {"limit": 100}
                if after:
                    p["after"] = after
                st, _, doc, raw = page(s, path, **p)
                self.assertEqual(st, 200, raw[:300])
                entries.extend(doc["reactions"])
                pages += 1
                after = doc.get("next")
                if not after:
                    break
                between(pages)
                self.assertLess(pages, 200)
            names = [e["user"] for e in entries]
            self.assertEqual(len(names), len(set(names)), "an entry was listed twice in one walk")
            unchanged = [u for u in users if u not in changed]
            missing = set(unchanged) - set(names)
            self.assertEqual(missing, set(), "entries that did not change were not listed")
            # newest change first: the unchanged ones come in reverse import order
            order = [u for u in names if u in set(unchanged)]
            self.assertEqual(order, list(reversed(unchanged)))
            for e in entries[:3]:
                self.assertRegex(e["at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
                self.assertIn(e["reaction"], ("like", "dislike"))
            # a fresh walk now lists everyone once, the changed ones first
            full = walk(s, path)
            self.assertEqual(len(full), n + sum(1 for u in changed if u.startswith("n")))
            self.assertEqual({e["user"] for e in full[:len(changed)]}, changed)
            recount_ok(self, s)
            self.assertEqual(metric(s, "tally_list_index_mismatches"), 0)

    def test_filters_limits_and_bad_parameters(self):
        with Server(args=FAST) as s:
            item = uid("f")
            for i in range(30):
                self.assertEqual(s.put(item, "u%02d" % i, "like" if i % 2 else "dislike")[0], 200)
            path = "/v1/items/%s/reactions" % item
            self.assertTrue(wait_for(lambda: len(walk(s, path)) == 30))
            st, _, doc, _ = page(s, path)
            self.assertEqual((st, len(doc["reactions"]), doc["item"]), (200, 20, item))  # default 20
            self.assertIn("next", doc)
            self.assertEqual(doc["reactions"][0]["user"], "u29")  # the newest first
            likes = walk(s, path, limit=7, reaction="like")
            self.assertEqual([e["user"] for e in likes], ["u%02d" % i for i in range(29, 0, -2)])
            self.assertTrue(all(e["reaction"] == "like" for e in likes))
            st, _, doc, _ = page(s, path, limit=15, reaction="like")
            self.assertNotIn("next", doc)  # exactly 15: no more
            st, _, doc, _ = page(s, path, limit=100)
            self.assertEqual(len(doc["reactions"]), 30)
            self.assertNotIn("next", doc)
            for bad in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"limit": ""},
                        {"reaction": "love"}, {"reaction": "none"}, {"after": "garbage"},
                        {"after": "12"}, {"after": "-1.u"}, {"after": "1.%2F"}):
                self.assertProblem(page(s, path, **bad), 400, "invalid-parameter", repr(bad))
            self.assertProblem(s.json("GET", path + "?limit=1&limit=2", user="admin"), 400,
                               "invalid-parameter")
            self.assertProblem(page(s, "/v1/items/a%20b/reactions"), 400, "invalid-item-id")
            # a cursor past every entry, or of another list, is a place: an empty page, not an error
            st, _, doc, _ = page(s, path, after="1.u00")
            self.assertEqual((st, doc["reactions"]), (200, []))
            # a user's list, with its filter
            self.assertEqual(s.put("other", "u03", "dislike")[0], 200)
            mine = wait_for(lambda: walk(s, "/v1/users/u03/reactions", user="u03"))
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/users/u03/reactions", user="u03")) == 2))
            mine = walk(s, "/v1/users/u03/reactions", user="u03")
            self.assertEqual([(e["item"], e["reaction"]) for e in mine], [("other", "dislike"), (item, "like")])
            self.assertEqual([e["item"] for e in walk(s, "/v1/users/u03/reactions", user="u03",
                                                      reaction="like")], [item])
            st, _, doc, _ = page(s, "/v1/users/u03/reactions", user="u03")
            self.assertEqual(doc["user"], "u03")
            # taking a reaction back removes it from both lists
            self.assertEqual(s.json("DELETE", "/v1/items/%s/reaction" % item, user="u03")[0], 200)
            self.assertTrue(wait_for(lambda: [e["item"] for e in walk(s, "/v1/users/u03/reactions",
                                                                      user="u03")] == ["other"]))
            self.assertNotIn("u03", [e["user"] for e in walk(s, path)])
            self.assertEqual(s.json("HEAD", path, user="admin")[0], 200)


class ManyModeTest(TallyTestCase):

    def test_a_kinds_page_is_ordered_by_when_it_joined(self):
        with Server(args=FAST + ["--reaction-mode", "many", "--reactions", "like,love,laugh"]) as s:
            item = uid("m")
            put = lambda u, k: self.assertEqual(
                s.json("PUT", "/v1/items/%s/%s" % (item, k), user=u)[0], 200)
            put("a", "like")
            time.sleep(0.01)
            put("b", "like")
            time.sleep(0.01)
            put("a", "love")  # a's like keeps its place; a moves to the front of "any"
            path = "/v1/items/%s/reactions" % item
            self.assertTrue(wait_for(lambda: len(walk(s, path, reaction="love")) == 1))
            anyk = walk(s, path)
            self.assertEqual([(e["user"], e["reactions"]) for e in anyk],
                             [("a", ["like", "love"]), ("b", ["like"])])
            self.assertNotIn("reaction", anyk[0])
            likes = walk(s, path, reaction="like")
            self.assertEqual([e["user"] for e in likes], ["b", "a"])
            self.assertEqual(likes[1]["reactions"], ["like", "love"])  # the whole set
            loves = walk(s, path, reaction="love")
            self.assertEqual(loves[0]["user"], "a")
            self.assertLess(likes[1]["at"], loves[0]["at"])  # a's like joined before its love
            self.assertEqual(loves[0]["at"], anyk[0]["at"])
            # like leaves and comes back: a moves to the front of like's page
            self.assertEqual(s.json("DELETE", "/v1/items/%s/like" % item, user="a")[0], 200)
            put("a", "like")
            self.assertTrue(wait_for(lambda: [e["user"] for e in walk(s, path, reaction="like")] == ["a", "b"]))
            mine = walk(s, "/v1/users/a/reactions", user="a", reaction="love")
            self.assertEqual([(e["item"], e["reactions"]) for e in mine], [(item, ["like", "love"])])
            recount_ok(self, s)


class ExportUserTest(TallyTestCase):

    @embedded_only("tally export reads a data directory")
    def test_export_one_user_with_the_lists_lagging(self):
        from test_ops import tally
        with Server(args=FAST + ["--fold-window", "1h"]) as s:
            import_lines(s, [("x%d" % i, "keep", "like") for i in range(50)])
            for i in range(5):
                self.assertEqual(s.put("e%d" % i, "exp", "like" if i % 2 else "dislike")[0], 200)
            self.assertEqual(s.put("e0", "exp", "none")[0], 200)
            s.kill9()  # nothing folded: the user's list is empty, the log holds everything
            r = tally("export", "--data", s.data_dir, "--user", "exp")
            self.assertEqual(r.returncode, 0, r.stderr)
            got = sorted(json.loads(line)["item"] for line in r.stdout.splitlines())
            self.assertEqual(got, ["e1", "e2", "e3", "e4"])
            self.assertEqual(json.loads(r.stdout.splitlines()[0])["user"], "exp")
            s.start(FAST)  # folds the backlog
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/users/exp/reactions")) == 4))
            s.stop()
            r = tally("export", "--data", s.data_dir, "--user", "exp")
            self.assertEqual(sorted(json.loads(line)["item"] for line in r.stdout.splitlines()), got)
            r = tally("export", "--data", s.data_dir, "--user", "nobody")
            self.assertEqual((r.returncode, r.stdout), (0, ""))


class ModeSwitchTest(TallyTestCase):

    @embedded_only("the embedded store's lists of one mode have no entries of any kind: rebuilt on a switch")
    def test_one_to_many_rebuilds_the_lists(self):
        with Server(args=FAST) as s:
            item = uid("sw")
            for u, k in (("a", "like"), ("b", "dislike"), ("c", "like")):
                self.assertEqual(s.put(item, u, k)[0], 200)
            self.assertEqual([e["user"] for e in walk(s, "/v1/items/%s/reactions" % item)], ["c", "b", "a"])
            s.stop()
            s.start(FAST + ["--reaction-mode", "many"])
            self.assertIn("event=lists-built", s.stderr())
            got = walk(s, "/v1/items/%s/reactions" % item)
            self.assertEqual([(e["user"], e["reactions"]) for e in got],
                             [("c", ["like"]), ("b", ["dislike"]), ("a", ["like"])])
            self.assertEqual(s.json("PUT", "/v1/items/%s/dislike" % item, user="a")[0], 200)
            got = walk(s, "/v1/items/%s/reactions" % item)
            self.assertEqual([e["user"] for e in got], ["a", "c", "b"])
            self.assertEqual([e["user"] for e in walk(s, "/v1/items/%s/reactions" % item, reaction="like")],
                             ["c", "a"])
            recount_ok(self, s)


class AccessTest(TallyTestCase):

    def check(self, s, path, expectations):
        for who, status in expectations:
            st, _, doc, raw = s.json("GET", path, user=who)
            self.assertEqual(st, status, "%s as %r: %r" % (path, who, raw[:200]))

    def test_each_flag_value(self):
        item_path, user_path = "/v1/items/acc/reactions", "/v1/users/owner/reactions"
        cases = [
            ([], [(None, 401), ("someone", 403), ("admin", 200)],
             [(None, 401), ("someone", 403), ("owner", 200), ("admin", 200)]),
            (["--who-reacted", "users", "--user-reactions", "users"],
             [(None, 401), ("someone", 200), ("admin", 200)],
             [(None, 401), ("someone", 200), ("owner", 200)]),
            (["--who-reacted", "public", "--user-reactions", "public"],
             [(None, 200), ("someone", 200)],
             [(None, 200), ("someone", 200)]),
        ]
        for args, item_rules, user_rules in cases:
            with Server(args=FAST + args) as s:
                self.assertEqual(s.put("acc", "owner", "like")[0], 200)
                self.check(s, item_path, item_rules)
                self.check(s, user_path, user_rules)
                st, hdrs, _, _ = s.json("GET", item_path)
                if st == 401:
                    self.assertIn("www-authenticate", hdrs)
        for bad in (["--who-reacted", "owner"], ["--user-reactions", "admin"], ["--who-reacted", "all"]):
            s = Server(args=FAST + bad, start=False)
            try:
                with self.assertRaises(Exception):
                    s.start()
            finally:
                s.close()


class ErasureTest(TallyTestCase):

    def erase_after_burst(self, args, lagging=False):
        with Server(args=FAST + args) as s:
            victim, items = uid("v"), ["e%03d" % i for i in range(120)]
            # others on the same items, who must keep theirs
            import_lines(s, [(i, "keep", "like") for i in items])

            def burst(part):
                c = s.client()
                try:
                    for i in part:
                        st, _, _, raw = c.json("PUT", "/v1/items/%s/reaction" % i, {"reaction": "dislike"},
                                               user=victim)
                        assert st == 200, raw
                finally:
                    c.close()

            errors = run_threads([lambda p=items[k::4]: burst(p) for k in range(4)])
            self.assertEqual(errors, [])
            doc = self.assertOk(s.json("DELETE", "/v1/admin/users/" + victim, headers=ADMIN))
            self.assertEqual(doc["changed"], len(items), "the newest reactions were not erased")
            for i in items[::7]:
                self.assertEqual(s.reaction(i, victim)["reaction"], "none")
            recount_ok(self, s)  # with the lists lagging too: they equal the rows as folded
            if lagging:
                return  # the lists show the erasure once folded, as the counts do
            self.assertTrue(wait_for(lambda: walk(s, "/v1/users/%s/reactions" % victim) == []))
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/users/keep/reactions")) == len(items)))
            self.assertEqual([e["user"] for e in walk(s, "/v1/items/%s/reactions" % items[5])], ["keep"])

    def test_item_deletion_leaves_both_lists(self):
        with Server(args=FAST) as s:
            gone, kept = uid("gone"), uid("kept")
            import_lines(s, [(i, "u%d" % k, "like") for i in (gone, kept) for k in range(30)])
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/users/u7/reactions")) == 2))
            doc = self.assertOk(s.json("DELETE", "/v1/admin/items/" + gone, headers=ADMIN))
            self.assertEqual(doc["changed"], 30)
            self.assertTrue(wait_for(lambda: walk(s, "/v1/items/%s/reactions" % gone) == []))
            # a user's list is folded on the user's shard: with several, a moment after the item's
            for k in (0, 7, 29):
                path = "/v1/users/u%d/reactions" % k
                wait_for(lambda: [e["item"] for e in walk(s, path)] == [kept])
                self.assertEqual([e["item"] for e in walk(s, path)], [kept])
            self.assertEqual(len(walk(s, "/v1/items/%s/reactions" % kept)), 30)
            recount_ok(self, s)

    def test_erase_right_after_a_burst(self):
        self.erase_after_burst([])

    def test_erase_right_after_a_burst_while_the_lists_lag(self):
        # folds at most every 30 s: the lists (and counts) lag the burst; erasure catches up first
        self.erase_after_burst(["--fold-window", "30s"], lagging=True)


class CrashTest(TallyTestCase):

    def test_kill_while_catching_up(self):
        with Server(args=FAST + ["--fold-window", "1h"]) as s:
            item = uid("k")
            records = [(item if i % 2 else "k2", "u%04d" % i, "like" if i % 3 else "dislike")
                       for i in range(4000)]
            import_lines(s, records)
            s.kill9()  # nothing folded: the lists are the log's to build
            s.start(FAST)
            time.sleep(0.05)
            s.kill9()  # while the writer folds the backlog
            s.start(FAST)
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/items/%s/reactions" % item)) == 2000, 20))
            recount_ok(self, s)
            got = {e["user"]: e["reaction"] for e in walk(s, "/v1/items/%s/reactions" % item)}
            want = {u: r for i, u, r in records if i == item}
            self.assertEqual(got, want)
            likes = walk(s, "/v1/items/k2/reactions", reaction="like")
            self.assertEqual(sorted(e["user"] for e in likes),
                             sorted(u for i, u, r in records if i == "k2" and r == "like"))


@pg_only()
class NodesTest(TallyTestCase):

    def test_list_on_b_shows_writes_on_a(self):
        with Server(args=FAST) as a:
            b = a.node(FAST)
            try:
                item = uid("n")
                for k in range(10):
                    self.assertEqual(a.put(item, "ua%d" % k, "like")[0], 200)
                    self.assertEqual(b.put(item, "ub%d" % k, "dislike")[0], 200)
                want = {"ua%d" % k for k in range(10)} | {"ub%d" % k for k in range(10)}
                for n in (a, b):
                    self.assertTrue(wait_for(lambda: {e["user"] for e in walk(n, "/v1/items/%s/reactions" % item)}
                                             == want), "node :%s" % n.port)
                self.assertEqual(walk(a, "/v1/items/%s/reactions" % item),
                                 walk(b, "/v1/items/%s/reactions" % item))
                # a cursor from one node goes on on the other
                st, _, doc, _ = page(a, "/v1/items/%s/reactions" % item, limit=5)
                st, _, doc2, _ = page(b, "/v1/items/%s/reactions" % item, limit=100, after=doc["next"])
                self.assertEqual(len(doc["reactions"]) + len(doc2["reactions"]), 20)
                # erasure on the node that does not fold
                for n in (a, b):
                    doc = self.assertOk(n.json("DELETE", "/v1/admin/users/ua3", headers=ADMIN))
                self.assertTrue(wait_for(lambda: walk(b, "/v1/users/ua3/reactions") == []))
                recount_ok(self, b)
            finally:
                b.close()

    def test_schema_1_gets_its_lists_built(self):
        with Server(args=FAST) as s:
            item = uid("up")
            for k in range(5):
                self.assertEqual(s.put(item, "u%d" % k, "like")[0], 200)
            self.assertTrue(wait_for(lambda: len(walk(s, "/v1/items/%s/reactions" % item)) == 5))
            s.stop()
            s.db.sql("DROP TABLE tally_lists, tally_claims; UPDATE tally_meta SET value = '1' WHERE name IN "
                     "('schema_version', 'schema_compatible_from')")
            s.start()
            self.assertIn("event=pg-schema-upgraded from=1", s.stderr())
            got = walk(s, "/v1/items/%s/reactions" % item)
            self.assertEqual([e["user"] for e in got], ["u4", "u3", "u2", "u1", "u0"])
            recount_ok(self, s)
