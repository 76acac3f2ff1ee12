"""Counts in every write answer (docs/api.md, "Write"): an answer that changed something carries exactly
the counts that folding the change feed up to and including its own cursor gives — this write and
everything before it, whether or not the counts have caught up; one that changed nothing carries
the counts at some moment during the request (some state of the item in the folded feed). A
replay carries the first answer's counts, byte for byte. Counts hidden by the item's policy are
null for anyone but an admin.

Checked under concurrency (many writers on few items, every answer against a fold of
GET /v1/changes), in both reaction modes, with the fold held back (--fold-window, so that answers
are made of folded counts plus entries not folded yet), and on PostgreSQL across two nodes on one
database (each node's answers against the one feed).
"""

import random
import threading
import unittest

from harness import (PG, Server, TallyTestCase, pg_only, run_threads, uid)

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
MANY_KINDS = ("like", "love", "haha")


def fold_feed(node, mode):
    """The whole change feed folded as documented: {item: [(cursor, counts, reactors), ...]},
    the item's state after each of its entries, in feed order."""
    states, counts, reactors, after = {}, {}, {}, None
    for _ in range(10000):
        path = "/v1/changes?limit=1000" + ("&after=" + after if after else "")
        st, _, doc, raw = node.json("GET", path, headers=ADMIN)
        assert st == 200, (st, raw[:300])
        for e in doc["changes"]:
            item = e["item"]
            c = counts.setdefault(item, {})
            before, now = e["from"], e["to"]
            if mode == "one":
                before = [] if before == "none" else [before]
                now = [] if now == "none" else [now]
            counted = e.get("counted", [True, True])
            if counted[0]:
                for k in before:
                    c[k] = c.get(k, 0) - 1
            if counted[1]:
                for k in now:
                    c[k] = c.get(k, 0) + 1
            reactors[item] = reactors.get(item, 0) - (1 if counted[0] and before else 0) + \
                (1 if counted[1] and now else 0)
            states.setdefault(item, []).append((int(e["cursor"]), dict(c), reactors[item]))
        if not doc["changes"]:
            return states
        after = doc["next"]
    raise AssertionError("the feed did not end")


def full(counts, kinds):
    return {k: counts.get(k, 0) for k in kinds}


class AnswerCountsCase(TallyTestCase):
    mode = "one"
    kinds = ("like", "dislike")

    def write_at_random(self, node, item, user, rnd, client):
        """One write of a random shape; returns (status, doc, raw)."""
        kinds = self.kinds
        op = rnd.randrange(5)
        k = rnd.choice(kinds)
        if op == 0:
            body = {"reaction": rnd.choice(kinds + ("none",))}
            if self.mode == "many" and rnd.random() < 0.5:
                body = {"reactions": sorted(rnd.sample(kinds, rnd.randrange(len(kinds) + 1)),
                                            key=kinds.index)}
            st, _, doc, raw = client.json("PUT", "/v1/items/%s/reaction" % item, body, user=user)
        elif op == 1:
            st, _, doc, raw = client.json("PUT", "/v1/items/%s/%s" % (item, k), user=user)
        elif op == 2:
            st, _, doc, raw = client.json("DELETE", "/v1/items/%s/%s" % (item, k), user=user)
        elif op == 3:
            st, _, doc, raw = client.json("DELETE", "/v1/items/%s/reaction" % item, user=user)
        else:
            st, _, doc, raw = client.json("POST", "/v1/items/%s/reaction:toggle" % item, {"reaction": k},
                                          user=user, headers={"Idempotency-Key": uid("key")})
        return st, doc, raw

    def hammer(self, nodes, items, writers=12, writes=40, seed=None):
        """writers threads, each with its own user and connection, write at random on items
        (spread over nodes); returns every answer."""
        answers, lock = [], threading.Lock()
        seed = random.randrange(1 << 30) if seed is None else seed

        def writer(n):
            rnd = random.Random(seed + n)
            node = nodes[n % len(nodes)]
            client = node.client()
            user = uid("w%d" % n)
            try:
                for _ in range(writes):
                    item = rnd.choice(items)
                    st, doc, raw = self.write_at_random(node, item, user, rnd, client)
                    with lock:
                        answers.append((st, doc, raw, item))
            finally:
                client.close()

        run_threads([lambda n=n: writer(n) for n in range(writers)], timeout=120)
        return answers, seed

    def check_answers(self, answers, states, seed):
        kinds, many = self.kinds, self.mode == "many"
        changed = unchanged = 0
        for st, doc, raw, item in answers:
            ctx = "seed %d, answer %r" % (seed, raw[:400])
            self.assertEqual(st, 200, ctx)
            self.assertIsInstance(doc.get("counts"), dict, ctx)
            self.assertEqual(list(doc["counts"]), list(kinds), "every kind, in order: " + ctx)
            if many:
                self.assertIsInstance(doc.get("reactors"), int, ctx)
            else:
                self.assertNotIn("reactors", doc, ctx)
            hist = states.get(item, [])
            if doc["changed"]:
                changed += 1
                cursor = int(doc["cursor"])
                at = [s for s in hist if s[0] == cursor]
                self.assertEqual(len(at), 1, "the answer's cursor is its item's entry in the feed: " + ctx)
                _, want, reactors = at[0]
                self.assertEqual(doc["counts"], full(want, kinds), "counts = fold of the feed up to the cursor: " + ctx)
                if many:
                    self.assertEqual(doc["reactors"], reactors, "reactors = fold up to the cursor: " + ctx)
            else:
                unchanged += 1
                seen = [full({}, kinds)] + [full(s[1], kinds) for s in hist]
                self.assertIn(doc["counts"], seen, "counts of an unchanged write: some state of the item: " + ctx)
        self.assertGreater(changed, 0)
        return changed, unchanged

    def run_and_check(self, nodes, nitems=3, **kw):
        items = [uid("hot") for _ in range(nitems)]
        answers, seed = self.hammer(nodes, items, **kw)
        states = fold_feed(nodes[0], self.mode)
        return self.check_answers(answers, states, seed)


class OneModeTest(AnswerCountsCase):

    def test_concurrent_writers_each_answer_is_the_fold_up_to_its_cursor(self):
        with Server(args=FAST) as s:
            self.run_and_check([s])

    def test_with_the_fold_held_back(self):
        # the answers' counts are then the folded counts plus the entries not folded yet
        with Server(args=FAST + ["--fold-window", "300ms"]) as s:
            self.run_and_check([s])
            # and an answer right after a write, before any fold, already shows it
            item, u = uid("i"), uid("u")
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, user=u))
            self.assertEqual(doc["counts"], {"like": 1, "dislike": 0})
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/dislike" % item, user=uid("u")))
            self.assertEqual(doc["counts"], {"like": 1, "dislike": 1})

    def test_replays_carry_the_first_answers_counts(self):
        with Server(args=FAST) as s:
            item, user = uid("i"), uid("ru")
            self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, user=uid("u")))
            hdr = {"X-User-Id": user, "Idempotency-Key": "k2", "Content-Type": "application/json"}
            a = s.request("PUT", "/v1/items/%s/like" % item, headers=hdr)
            self.assertEqual(a[0], 200)
            self.assertIn(b'"counts":{"like":2,"dislike":0}', a[2])
            for _ in range(3):  # the counts move on
                self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, user=uid("u")))
            b = s.request("PUT", "/v1/items/%s/like" % item, headers=hdr)
            self.assertEqual(b[1].get("idempotent-replayed"), "true")
            self.assertEqual(a[2], b[2], "the stored answer, byte for byte")
            # and after a restart, from the store
            s.restart()
            c = s.request("PUT", "/v1/items/%s/like" % item, headers=hdr)
            self.assertEqual(c[1].get("idempotent-replayed"), "true")
            self.assertEqual(a[2], c[2])

    def test_concurrent_replays_of_one_key_answer_the_same_counts(self):
        # the same keyed request sent at once: in one batch or not, every answer is the first
        with Server(args=FAST) as s:
            for _ in range(5):
                item, user, key = uid("i"), uid("u"), uid("k")
                hdr = {"X-User-Id": user, "Idempotency-Key": key, "Content-Type": "application/json"}
                got, lock = [], threading.Lock()

                def one():
                    r = s.request("POST", "/v1/items/%s/reaction:toggle" % item, body=b'{"reaction":"like"}',
                                  headers=hdr)
                    with lock:
                        got.append(r)

                for _ in range(3):  # other users on the item meanwhile
                    self.assertOk(s.json("PUT", "/v1/items/%s/dislike" % item, user=uid("o")))
                run_threads([one] * 6)
                ok = [r[2] for r in got if r[0] == 200]
                for r in got:
                    self.assertIn(r[0], (200, 409), r)
                self.assertTrue(ok)
                self.assertEqual(len(set(ok)), 1, "every answer the same bytes: %r" % ok)
                self.assertIn(b'"counts":{"like":1,"dislike":3}', ok[0])

    def test_hidden_counts_are_null_but_for_an_admin(self):
        with Server(args=FAST) as s:
            item = uid("h")
            self.assertOk(s.json("PUT", "/v1/admin/policies/" + item, {"counts": "hidden"}, headers=ADMIN))
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, user=uid("u")))
            self.assertIsNone(doc["counts"])
            self.assertNotIn("reactors", doc)
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, headers=ADMIN))
            self.assertEqual(doc["counts"], {"like": 2, "dislike": 0})
            self.assertIn(s.json("DELETE", "/v1/admin/policies/" + item, headers=ADMIN)[0], (200, 204))
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/dislike" % item, user=uid("u")))
            self.assertEqual(doc["counts"], {"like": 2, "dislike": 1})


class ManyModeTest(AnswerCountsCase):
    mode = "many"
    kinds = MANY_KINDS
    args = FAST + ["--reaction-mode", "many", "--reactions", ",".join(MANY_KINDS)]

    def test_concurrent_writers_each_answer_is_the_fold_up_to_its_cursor(self):
        with Server(args=self.args) as s:
            self.run_and_check([s])

    def test_with_the_fold_held_back(self):
        with Server(args=self.args + ["--fold-window", "300ms"]) as s:
            self.run_and_check([s])

    def test_hidden_counts_and_reactors_are_null(self):
        with Server(args=self.args) as s:
            item = uid("h")
            self.assertOk(s.json("PUT", "/v1/admin/policies/" + item, {"counts": "hidden"}, headers=ADMIN))
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/love" % item, user=uid("u")))
            self.assertEqual((doc["counts"], doc["reactors"]), (None, None))
            doc = self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, headers=ADMIN))
            self.assertEqual((doc["counts"], doc["reactors"]), ({"like": 1, "love": 1, "haha": 0}, 2))


@pg_only()
class TwoNodesTest(AnswerCountsCase):
    """Two nodes on one database: each node's answers against the one feed, while the other
    node's batches commit between them and one node folds for both."""

    def test_answers_on_two_nodes_are_the_fold_up_to_their_cursors(self):
        with Server(args=FAST) as a:
            with a.node() as b:
                self.run_and_check([a, b], writers=16)

    def test_many_mode_on_two_nodes(self):
        self.mode, self.kinds = "many", MANY_KINDS
        with Server(args=FAST + ["--reaction-mode", "many", "--reactions", ",".join(MANY_KINDS)]) as a:
            with a.node() as b:
                self.run_and_check([a, b], writers=16)


if __name__ == "__main__":
    unittest.main()
