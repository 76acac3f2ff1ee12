"""--reaction-mode many (docs/api.md § "Several reactions per user"): a user holds a set of kinds per
item, as on GitHub or Slack. Every guarantee of one mode holds per (user, item): versions rise by
one per real change, Idempotency-Key replays and 409s, If-Match 412 with the set, recount drift 0,
kill -9 safety. Runs on both stores (TALLY_STORE=pg: PostgreSQL)."""

import json
import random
import threading
import time
import unittest

from harness import (PG, Server, ServerExited, SharedServerTestCase, TallyTestCase, run_threads, split_cursor,
                     uid)

KINDS = ("like", "dislike", "love")
MANY = ["--reaction-mode", "many", "--reactions", ",".join(KINDS), "--rate-limit", "off"]
ADMIN = {"X-User-Id": "admin"}


def ordered(kinds):
    """A set as the API writes it: in the configured order."""
    return [k for k in KINDS if k in kinds]


class ManyCase(TallyTestCase):

    def assertSetWrite(self, resp, item, reactions, previous, version, changed, msg=None):
        doc = self.assertOk(resp, msg)
        rest, cursor = split_cursor(doc)
        self.assertEqual(rest, {"item": item, "reactions": reactions, "previous": previous,
                                "version": version, "changed": changed}, msg or "write answer")
        self.assertEqual(cursor is not None, changed, "a cursor exactly when it changed something: %r" % doc)
        self.assertEqual(resp[1].get("etag"), '"%d"' % version, "ETag of the write")
        return doc

    def rows_tally(self, s, item, users):
        """counts and reactors from the users' own rows (GET …/reaction)."""
        counts = {k: 0 for k in KINDS}
        reactors = 0
        for u in users:
            doc = s.json("GET", "/v1/items/%s/reaction" % item, user=u)[2]
            for k in doc["reactions"]:
                counts[k] += 1
            reactors += bool(doc["reactions"])
        return counts, reactors

    def wait_item(self, s, item, counts, reactors, timeout=3.0):
        deadline = time.monotonic() + timeout
        while True:
            doc = s.item(item)[2]
            got = (doc.get("counts"), doc.get("reactors"))
            if got == (counts, reactors) or time.monotonic() > deadline:
                self.assertEqual(got, (counts, reactors), "counts and reactors of %s" % item)
                return doc
            time.sleep(0.05)

    def recount_clean(self, s):
        doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
        self.assertEqual(doc["drift"], [], "recount drift")
        return doc


class ManyModeApiTest(SharedServerTestCase, ManyCase):
    server_args = MANY

    def test_seed_scenario_with_sets(self):
        s, item, u = self.srv, uid("post"), uid("u")
        path = "/v1/items/%s" % item
        self.assertSetWrite(s.json("PUT", path + "/like", user=u), item, ["like"], [], 1, True)
        self.assertSetWrite(s.json("PUT", path + "/love", user=u), item, ["like", "love"], ["like"], 2,
                            True)
        self.assertSetWrite(s.json("PUT", path + "/like", user=u), item, ["like", "love"],
                            ["like", "love"], 2, False, "adding a kind held already changes nothing")
        self.assertSetWrite(s.json("DELETE", path + "/like", user=u), item, ["love"], ["like", "love"],
                            3, True)
        self.assertSetWrite(s.json("DELETE", path + "/dislike", user=u), item, ["love"], ["love"], 3,
                            False, "removing a kind not held changes nothing")
        toggle = path + "/reaction:toggle"
        self.assertSetWrite(s.json("POST", toggle, {"reaction": "love"}, user=u,
                                   headers={"Idempotency-Key": uid("k")}), item, [], ["love"], 4, True)
        self.assertSetWrite(s.json("POST", toggle, {"reaction": "dislike"}, user=u,
                                   headers={"Idempotency-Key": uid("k")}), item, ["dislike"], [], 5, True)
        self.assertSetWrite(s.json("POST", toggle, {"reaction": "like"}, user=u,
                                   headers={"Idempotency-Key": uid("k")}), item, ["like", "dislike"],
                            ["dislike"], 6, True, "a toggle adds beside what is held")
        self.assertSetWrite(s.json("PUT", path + "/reaction", {"reaction": "love"}, user=u), item,
                            ["love"], ["like", "dislike"], 7, True, "a single reaction sets the set")
        self.assertSetWrite(s.json("PUT", path + "/reaction", {"reactions": ["love", "like"]}, user=u),
                            item, ["like", "love"], ["love"], 8, True, "sets come back in configured order")
        self.assertSetWrite(s.json("PUT", path + "/reaction", {"reactions": ["like", "love"]}, user=u),
                            item, ["like", "love"], ["like", "love"], 8, False)
        # the reads: own row with its ETag, the item with reactors and viewer
        st, hdrs, doc, _ = s.json("GET", path + "/reaction", user=u)
        self.assertEqual((st, doc, hdrs.get("etag")),
                         (200, {"item": item, "reactions": ["like", "love"], "version": 8}, '"8"'))
        v = uid("v")
        self.assertSetWrite(s.json("PUT", path + "/love", user=v), item, ["love"], [], 1, True)
        doc = self.wait_item(s, item, {"like": 1, "dislike": 0, "love": 2}, 2)
        self.assertNotIn("viewer", doc)
        doc = s.item(item, user=u)[2]
        self.assertEqual(doc["viewer"], {"reactions": ["like", "love"], "version": 8})
        batch = s.json("GET", "/v1/items?ids=%s,%s" % (item, uid("none")), user=v)[2]["items"]
        self.assertEqual(batch[0]["reactors"], 2)
        self.assertEqual(batch[0]["viewer"], {"reactions": ["love"], "version": 1})
        self.assertEqual(batch[1]["reactors"], 0)
        self.assertEqual(batch[1]["viewer"], {"reactions": [], "version": 0})
        # clearing the whole set
        self.assertSetWrite(s.json("DELETE", path + "/reaction", user=u), item, [], ["like", "love"], 9,
                            True)
        self.assertSetWrite(s.json("PUT", path + "/reaction", {"reactions": []}, user=u), item, [], [],
                            9, False)
        self.wait_item(s, item, {"like": 0, "dislike": 0, "love": 1}, 1)

    def test_change_feed_carries_sets(self):
        s, item, u = self.srv, uid("feed"), uid("u")
        start = s.json("GET", "/v1/changes?limit=1000", headers=ADMIN)[2]
        after = start["next"]
        while True:  # to the end of the log
            page = s.json("GET", "/v1/changes?limit=1000&after=" + after, headers=ADMIN)[2]
            if not page["changes"]:
                break
            after = page["next"]
        s.json("PUT", "/v1/items/%s/like" % item, user=u)
        s.json("PUT", "/v1/items/%s/reaction" % item, {"reactions": ["dislike", "love"]}, user=u)
        page = s.json("GET", "/v1/changes?after=" + after, headers=ADMIN)[2]
        self.assertEqual(page["mode"], "many")
        mine = [(c["from"], c["to"], c["version"]) for c in page["changes"] if c["item"] == item]
        self.assertEqual(mine, [([], ["like"], 1), (["like"], ["dislike", "love"], 2)])

    def test_bad_sets_change_nothing(self):
        s, item, u = self.srv, uid("bad"), uid("u")
        path = "/v1/items/%s/reaction" % item
        s.json("PUT", "/v1/items/%s/like" % item, user=u)
        for body in ({"reactions": ["like", "like"]}, {"reactions": ["like", "wow"]},
                     {"reactions": "like"}, {"reactions": [1]}, {"reactions": ["like"], "reaction": "like"},
                     {"reaction": "wow"}, {}):
            self.assertProblem(s.json("PUT", path, body, user=u), 400, "invalid-reaction", repr(body))
        self.assertProblem(s.json("POST", path + ":toggle", {"reactions": ["like"]}, user=u,
                                  headers={"Idempotency-Key": uid("k")}), 400, "invalid-reaction")
        self.assertProblem(s.json("POST", path + ":toggle", {"reaction": "none"}, user=u,
                                  headers={"Idempotency-Key": uid("k")}), 400, "invalid-reaction")
        self.assertProblem(s.json("PUT", "/v1/items/%s/wow" % item, user=u), 400, "invalid-reaction")
        self.assertEqual(s.json("GET", path, user=u)[2], {"item": item, "reactions": ["like"], "version": 1})

    def test_if_match_and_idempotency(self):
        s, item, u = self.srv, uid("im"), uid("u")
        path = "/v1/items/%s/reaction" % item
        s.json("PUT", "/v1/items/%s/love" % item, user=u)
        doc = self.assertProblem(s.json("PUT", path, {"reactions": ["like"]}, user=u,
                                        headers={"If-Match": '"0"'}), 412, "version-mismatch")
        self.assertEqual((doc["reactions"], doc["version"]), (["love"], 1))
        self.assertSetWrite(s.json("PUT", path, {"reactions": ["like", "love"]}, user=u,
                                   headers={"If-Match": '"1"'}), item, ["like", "love"], ["love"], 2, True)
        key = {"Idempotency-Key": uid("key")}
        first = s.request("PUT", "/v1/items/%s/dislike" % item, headers=dict(key, **{"X-User-Id": u}))
        again = s.request("PUT", "/v1/items/%s/dislike" % item, headers=dict(key, **{"X-User-Id": u}))
        self.assertEqual(first[0], 200)
        self.assertEqual((again[0], again[2]), (first[0], first[2]), "a replay answers the same bytes")
        self.assertEqual(again[1].get("idempotent-replayed"), "true")
        self.assertEqual(json.loads(first[2])["reactions"], ["like", "dislike", "love"])
        self.assertProblem(s.json("DELETE", "/v1/items/%s/dislike" % item, user=u, headers=key), 409,
                           "idempotency-key-mismatch")
        self.assertEqual(s.json("GET", path, user=u)[2]["version"], 3)

    def test_import_sets(self):
        s, item = self.srv, uid("imp")
        lines = [{"item": item, "user": "a1", "reactions": ["like", "love"]},
                 {"item": item, "user": "a2", "reaction": "dislike"},
                 {"item": item, "user": "a3", "reactions": []},
                 {"item": item, "user": "a4", "reactions": ["like", "like"]},
                 {"item": item, "user": "a5", "reactions": ["like"], "reaction": "like"}]
        body = "".join(json.dumps(l) + "\n" for l in lines).encode()
        st, _, raw = s.request("POST", "/v1/admin/import", body,
                               headers=dict(ADMIN, **{"Content-Type": "application/x-ndjson"}))
        doc = json.loads(raw)
        self.assertEqual((st, doc["read"], doc["applied"], doc["unchanged"]), (200, 5, 2, 1), doc)
        self.assertEqual([r["line"] for r in doc["rejected"]], [4, 5])
        csv = "item,user,reactions\n%s,b1,like|love\n%s,b2,\n%s,b3,love|wow\n" % (item, item, item)
        st, _, raw = s.request("POST", "/v1/admin/import", csv.encode(),
                               headers=dict(ADMIN, **{"Content-Type": "text/csv"}))
        doc = json.loads(raw)
        self.assertEqual((st, doc["applied"], doc["unchanged"], [r["line"] for r in doc["rejected"]]),
                         (200, 1, 1, [4]), doc)
        self.assertEqual(s.json("GET", "/v1/items/%s/reaction" % item, user="a1")[2]["reactions"],
                         ["like", "love"])
        self.wait_item(s, item, {"like": 2, "dislike": 1, "love": 2}, 3)

    def test_trending_per_kind(self):
        s, hot, cold = self.srv, uid("hot"), uid("cold")
        for i in range(6):
            u = uid("t")
            s.json("PUT", "/v1/items/%s/reaction" % hot, {"reactions": ["like", "love"]}, user=u)
            if i < 2:
                s.json("PUT", "/v1/items/%s/love" % cold, user=u)
        undo = uid("t")  # a love added and taken back counts nothing
        s.json("PUT", "/v1/items/%s/love" % cold, user=undo)
        s.json("DELETE", "/v1/items/%s/love" % cold, user=undo)
        deadline = time.monotonic() + 5
        while True:
            doc = s.json("GET", "/v1/trending?reaction=love&window=1m&limit=100")[2]
            gains = {e["item"]: e["gain"] for e in doc["items"]}
            if (gains.get(hot), gains.get(cold)) == (6, 2) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual((gains.get(hot), gains.get(cold)), (6, 2), doc)

    def test_recount_finds_nothing(self):
        s, item = self.srv, uid("rc")
        for i in range(10):
            s.json("PUT", "/v1/items/%s/reaction" % item,
                   {"reactions": random.sample(KINDS, random.randrange(4))}, user="r%d" % i)
        time.sleep(0.2)
        self.recount_clean(self.srv)


class ManyConcurrencyTest(SharedServerTestCase, ManyCase):
    """Many threads toggling kinds with keys on the same users and item, with retries of the same
    key: every key applied once, versions in step with the real changes, counts equal the rows."""
    server_args = MANY

    def test_toggles_with_keys_and_retries(self):
        s, item = self.srv, uid("conc")
        users = [uid("cu") for _ in range(4)]
        changed = {u: 0 for u in users}
        lock = threading.Lock()
        problems = []

        def worker(seed):
            def fn():
                rnd = random.Random(seed)
                c = s.client(timeout=10)
                try:
                    for _ in range(40):
                        u, kind = rnd.choice(users), rnd.choice(KINDS)
                        key = {"Idempotency-Key": uid("k"), "X-User-Id": u}
                        path = "/v1/items/%s/reaction:toggle" % item
                        answers = [c.json("POST", path, {"reaction": kind}, headers=key)
                                   for _ in range(1 + (rnd.random() < 0.3))]
                        st, _, doc, raw = answers[0]
                        if st != 200 or any(a[3] != raw for a in answers[1:]):
                            problems.append((st, raw[:200], [a[3][:200] for a in answers[1:]]))
                            continue
                        with lock:
                            changed[u] += doc["changed"]
                finally:
                    c.close()
            return fn

        self.assertEqual(run_threads([worker(i) for i in range(8)], timeout=120), [])
        self.assertEqual(problems, [])
        for u in users:
            self.assertEqual(s.json("GET", "/v1/items/%s/reaction" % item, user=u)[2]["version"],
                             changed[u], "%s: one version per real change" % u)
        counts, reactors = self.rows_tally(s, item, users)
        self.wait_item(s, item, counts, reactors)
        self.recount_clean(s)


class ManyCrashTest(ManyCase):
    """kill -9 under a many-mode load of per-kind adds and removes: every acknowledged set survives,
    the one in flight is applied whole or not at all, counts and reactors equal the rows."""

    def test_kill9_under_many_mode_load(self):
        seed = random.randrange(1 << 30)
        with Server(args=MANY) as s:
            items = [uid("mc") for _ in range(3)]
            acked, inflight, problems = {}, {}, []
            stop = threading.Event()
            hard = time.monotonic() + 8

            def writer(t):
                rnd = random.Random(seed + t)
                users = [uid("m%d" % t) for _ in range(4)]
                c = s.client(timeout=10)
                try:
                    while not stop.is_set() and time.monotonic() < hard:
                        u, it, kind = rnd.choice(users), rnd.choice(items), rnd.choice(KINDS)
                        method = rnd.choice(("PUT", "DELETE"))
                        base = acked.get((u, it), ((), 0))
                        target = tuple(sorted(set(base[0]) | {kind} if method == "PUT"
                                              else set(base[0]) - {kind}, key=KINDS.index))
                        inflight[t] = (u, it, base, target)
                        try:
                            st, _, doc, raw = c.json(method, "/v1/items/%s/%s" % (it, kind), user=u)
                        except Exception:
                            return  # killed: the in-flight write's fate is unknown
                        if st != 200:
                            if st not in (429, 503):
                                problems.append((st, raw[:200]))
                            del inflight[t]
                            continue
                        want_v = base[1] + (target != base[0])
                        if (tuple(doc["reactions"]), doc["version"]) != (target, want_v):
                            problems.append(("answer", doc, target, want_v))
                        acked[(u, it)] = (target, want_v)
                        del inflight[t]
                finally:
                    c.close()

            threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(6)]
            for th in threads:
                th.start()
            time.sleep(random.Random(seed).uniform(1.0, 1.8))
            s.kill9()
            stop.set()
            for th in threads:
                th.join(15)
            self.assertFalse(any(th.is_alive() for th in threads), "client thread stuck")
            self.assertEqual(problems, [], "seed %d" % seed)
            self.assertTrue(acked, "nothing acknowledged before the kill")
            s.start()
            allowed = {key: {rv} for key, rv in acked.items()}
            for u, it, base, target in inflight.values():
                opts = allowed.setdefault((u, it), {base})
                opts.add((target, base[1] + (target != base[0])))
            tally = {it: ({k: 0 for k in KINDS}, 0) for it in items}
            for (u, it), opts in allowed.items():
                doc = s.json("GET", "/v1/items/%s/reaction" % it, user=u)[2]
                got = (tuple(doc["reactions"]), doc["version"])
                self.assertIn(got, opts, "%s on %s after kill -9 (seed %d)" % (u, it, seed))
                counts, reactors = tally[it]
                for k in got[0]:
                    counts[k] += 1
                tally[it] = (counts, reactors + bool(got[0]))
            for it in items:
                self.wait_item(s, it, *tally[it])
            self.recount_clean(s)


class ModeSwitchTest(ManyCase):
    """A store of one mode reopens in many with its reactors counted; back to one is refused once a
    user holds two kinds on one item, and allowed again when nobody does."""

    def start_in(self, s, mode):
        args = ["--reaction-mode", mode, "--reactions", ",".join(KINDS)]
        if PG and s.starts:  # a shared setting: changed by the deliberate step of docs/postgresql.md
            with self.assertRaises(ServerExited) as e:
                s.start(args)
            self.assertEqual(e.exception.returncode, 1)
            self.assertIn("--reaction-mode", e.exception.stderr)
            for db in [s.db] + s.shard_dbs:  # every shard's database
                db.sql("UPDATE tally_meta SET value = '%s' WHERE name = 'reaction_mode'" % mode)
        s.start(args)

    def test_one_to_many_and_back(self):
        with Server(args=["--reactions", ",".join(KINDS)]) as s:
            item = uid("sw")
            for i, k in enumerate(("like", "like", "dislike", "love", "none")):
                s.put(item, "s%d" % i, k)
            self.assertCounts(s, item, {"like": 2, "dislike": 1, "love": 1})
            self.assertNotIn("reactors", s.item(item)[2])
            s.stop()
            self.start_in(s, "many")
            self.wait_item(s, item, {"like": 2, "dislike": 1, "love": 1}, 4)
            self.assertEqual(s.json("GET", "/v1/items/%s/reaction" % item, user="s0")[2],
                             {"item": item, "reactions": ["like"], "version": 1})
            s.json("PUT", "/v1/items/%s/love" % item, user="s0")
            s.json("PUT", "/v1/items/%s/like" % item, user="s9")
            self.wait_item(s, item, {"like": 3, "dislike": 1, "love": 2}, 5)
            self.recount_clean(s)
            s.stop()
            args = ["--reaction-mode", "one", "--reactions", ",".join(KINDS)]
            if PG:
                for db in [s.db] + s.shard_dbs:
                    db.sql("UPDATE tally_meta SET value = 'one' WHERE name = 'reaction_mode'")
            with self.assertRaises(ServerExited) as e:
                s.start(args)
            self.assertEqual(e.exception.returncode, 1)
            self.assertIn("several reactions", e.exception.stderr)
            if PG:
                for db in [s.db] + s.shard_dbs:
                    db.sql("UPDATE tally_meta SET value = 'many' WHERE name = 'reaction_mode'")
            s.start(MANY)
            s.json("DELETE", "/v1/items/%s/like" % item, user="s0")
            s.stop()
            if PG:
                for db in [s.db] + s.shard_dbs:
                    db.sql("UPDATE tally_meta SET value = 'one' WHERE name = 'reaction_mode'")
            s.start(args)
            self.assertCounts(s, item, {"like": 2, "dislike": 1, "love": 2}, timeout=3)
            self.assertEqual(s.reaction(item, "s0"), {"item": item, "reaction": "love", "version": 3})
            self.assertEqual(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN)[2]["drift"], [])


if __name__ == "__main__":
    unittest.main()
