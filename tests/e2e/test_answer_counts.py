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

With voided users (docs/api.md, "Voiding"): the fold uses each entry's "counted" bits, so a voided
user's writes move nothing and a void or a restore moves the counts by the user's reaction; a voided
user's own answer shows the counts as their reads do, with their own reaction added back.
"""

import random
import threading
import time
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
            states.setdefault(item, []).append((e["cursor"], dict(c), reactors[item]))
        if not doc["changes"]:
            return states
        after = doc["next"]
    raise AssertionError("the feed did not end")


def full(counts, kinds):
    return {k: counts.get(k, 0) for k in kinds}


def own_set(doc, mode):
    """The writer's reaction after a write, from its answer, as a list of kinds."""
    if mode == "many":
        return doc["reactions"]
    return [] if doc["reaction"] == "none" else [doc["reaction"]]


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

    def hammer(self, nodes, items, writers=12, writes=40, seed=None, users=None, others=()):
        """writers threads, each with its own user (users[n] if given) and connection, write at
        random on items (spread over nodes), beside the others callables; returns every answer
        (with its user)."""
        answers, lock = [], threading.Lock()
        seed = random.randrange(1 << 30) if seed is None else seed

        def writer(n):
            rnd = random.Random(seed + n)
            node = nodes[n % len(nodes)]
            client = node.client()
            user = users[n] if users else uid("w%d" % n)
            try:
                for _ in range(writes):
                    item = rnd.choice(items)
                    st, doc, raw = self.write_at_random(node, item, user, rnd, client)
                    with lock:
                        answers.append((st, doc, raw, item, user))
            finally:
                client.close()

        errors = run_threads([lambda n=n: writer(n) for n in range(writers)] + list(others), timeout=120)
        self.assertEqual(errors, [], "seed %d" % seed)
        return answers, seed

    def check_answers(self, answers, states, seed, voided=()):
        """Each answer against the fold; a user in voided (voided throughout) is shown the fold plus
        their own reaction after the write, as a read where they are the viewer shows it."""
        kinds, many = self.kinds, self.mode == "many"
        changed = unchanged = 0
        for st, doc, raw, item, user in answers:
            ctx = "seed %d, answer %r" % (seed, raw[:400])
            self.assertEqual(st, 200, ctx)
            self.assertIsInstance(doc.get("counts"), dict, ctx)
            self.assertEqual(list(doc["counts"]), list(kinds), "every kind, in order: " + ctx)
            if many:
                self.assertIsInstance(doc.get("reactors"), int, ctx)
            else:
                self.assertNotIn("reactors", doc, ctx)
            hist = states.get(item, [])
            back = own_set(doc, self.mode) if user in voided else []

            def shown(counts, reactors):  # what this writer is shown of a state of the item
                c = full(counts, kinds)
                for k in back:
                    c[k] += 1
                return c, reactors + (1 if back else 0)

            if doc["changed"]:
                changed += 1
                cursor = doc["cursor"]
                at = [s for s in hist if s[0] == cursor]
                self.assertEqual(len(at), 1, "the answer's cursor is its item's entry in the feed: " + ctx)
                want, reactors = shown(at[0][1], at[0][2])
                self.assertEqual(doc["counts"], want, "counts = fold of the feed up to the cursor: " + ctx)
                if many:
                    self.assertEqual(doc["reactors"], reactors, "reactors = fold up to the cursor: " + ctx)
            else:
                unchanged += 1
                seen = [shown({}, 0)[0]] + [shown(s[1], s[2])[0] for s in hist]
                self.assertIn(doc["counts"], seen, "counts of an unchanged write: some state of the item: " + ctx)
        self.assertGreater(changed, 0)
        return changed, unchanged

    def run_and_check(self, nodes, nitems=3, **kw):
        items = [uid("hot") for _ in range(nitems)]
        answers, seed = self.hammer(nodes, items, **kw)
        states = fold_feed(nodes[0], self.mode)
        return self.check_answers(answers, states, seed)

    def run_with_voids(self, nodes, nitems=3, writers=8, writes=30, flips=6):
        """Writers on items where a voided user reacts and writes too (its entries count nothing),
        while another user who reacts on them is voided and restored over and over (entries that
        move the counts, between the writes): every answer against the fold of the feed."""
        kinds, items = self.kinds, [uid("hot") for _ in range(nitems)]
        node = nodes[0]
        bot, flip = uid("bot"), uid("flip")
        for it in items:
            self.assertOk(node.json("PUT", "/v1/items/%s/%s" % (it, kinds[0]), user=bot))
            self.assertOk(node.json("PUT", "/v1/items/%s/%s" % (it, kinds[-1]), user=flip))
        self.assertEqual(self.assertOk(node.json("POST", "/v1/admin/users/%s/void" % bot, headers=ADMIN)),
                         {"voided": nitems})

        def flipper():
            for n in range(flips):
                for action, key in (("void", "voided"), ("restore", "restored")):
                    doc = self.assertOk(nodes[n % len(nodes)].json("POST", "/v1/admin/users/%s/%s" % (flip, action),
                                                                   headers=ADMIN))
                    self.assertEqual(doc, {key: nitems})
                    time.sleep(0.01)

        users = [bot] + [uid("w%d" % n) for n in range(1, writers)]
        answers, seed = self.hammer(nodes, items, writers=writers, writes=writes, users=users, others=[flipper])
        states = fold_feed(node, self.mode)
        # the run did what it is about: voids and restores between the writes, the bot's entries
        # counting nothing, and answers of the bot to check
        doc = self.assertOk(node.json("GET", "/v1/changes?limit=1000", headers=ADMIN))
        self.assertLess(len(doc["changes"]), 1000, "the whole feed in one page")
        feed_counted = [(e["user"], e.get("counted")) for e in doc["changes"]]
        self.assertIn((flip, [True, False]), feed_counted)
        self.assertIn((flip, [False, True]), feed_counted)
        self.assertIn((bot, [False, False]), feed_counted)
        self.assertTrue(any(a[4] == bot and (a[1] or {}).get("changed") for a in answers))
        return self.check_answers(answers, states, seed, voided={bot})

    def run_void_and_restore_between_writes(self, node):
        """One at a time, the fold held back: each answer made of folded counts plus entries not
        folded yet, among them a void's and a restore's."""
        many, kinds = self.mode == "many", self.kinds
        like, other = kinds[0], kinds[1]
        item, bot, u1, u2, u3 = uid("i"), uid("bot"), uid("u"), uid("u"), uid("u")

        def put(user, kind):
            return self.assertOk(node.json("PUT", "/v1/items/%s/%s" % (item, kind), user=user))

        def counts(doc):
            return (doc["counts"], doc["reactors"]) if many else (doc["counts"], None)

        def want(n_like, n_other, reactors):
            c = full({like: n_like, other: n_other}, kinds)
            return (c, reactors) if many else (c, None)

        put(bot, like)
        self.assertEqual(counts(put(u1, like)), want(2, 0, 2))
        self.assertEqual(self.assertOk(node.json("POST", "/v1/admin/users/%s/void" % bot, headers=ADMIN)),
                         {"voided": 1})
        self.assertEqual(counts(put(u2, other)), want(1, 1, 2), "after the void: the bot's like is gone")
        # the voided bot's own write moves nothing for others, and its answer shows what its reads show
        self.assertEqual(counts(put(bot, other)), want(2, 2, 3) if many else want(1, 2, None))
        self.assertEqual(counts(put(u3, other)), want(1, 2, 3), "the bot's write counted nothing")
        if not many:  # the bot's unchanged write: the same view
            self.assertEqual(counts(put(bot, other)), want(1, 3, None))
        # the bot's answer is what a read as the bot shows, once the counts have caught up
        doc = put(bot, like)  # one mode: a change back to like; many: unchanged, both held
        deadline = time.monotonic() + 5
        while True:
            read = self.assertOk(node.json("GET", "/v1/items/" + item, user=bot))
            if counts(read) == counts(doc) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(counts(read), counts(doc), "the bot's answer is its read")
        self.assertEqual(self.assertOk(node.json("POST", "/v1/admin/users/%s/restore" % bot, headers=ADMIN)),
                         {"restored": 1})
        doc = put(u1, other)
        self.assertEqual(counts(doc), want(2, 4, 4) if many else want(1, 3, None), "after the restore")
        return doc


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

    def test_with_voided_users_each_answer_is_the_fold_up_to_its_cursor(self):
        with Server(args=FAST) as s:
            self.run_with_voids([s])

    def test_with_voided_users_and_the_fold_held_back(self):
        with Server(args=FAST + ["--fold-window", "300ms"]) as s:
            self.run_with_voids([s])

    def test_void_and_restore_between_writes(self):
        with Server(args=FAST + ["--fold-window", "2s"]) as s:
            self.run_void_and_restore_between_writes(s)

    def test_voided_users_replay_carries_the_first_answer(self):
        with Server(args=FAST) as s:
            item, bot = uid("i"), uid("bot")
            self.assertOk(s.json("PUT", "/v1/items/%s/like" % item, user=uid("u")))
            self.assertOk(s.json("PUT", "/v1/items/%s/dislike" % item, user=bot))
            self.assertOk(s.json("POST", "/v1/admin/users/%s/void" % bot, headers=ADMIN))
            self.assertCounts(s, item, {"like": 1, "dislike": 0})  # the void folded
            hdr = {"X-User-Id": bot, "Idempotency-Key": "k1", "Content-Type": "application/json"}
            a = s.request("PUT", "/v1/items/%s/like" % item, headers=hdr)
            self.assertEqual(a[0], 200)
            # the dislike it leaves no longer counted; its own like added back, as its reads show
            self.assertIn(b'"counts":{"like":2,"dislike":0}', a[2])
            self.assertOk(s.json("POST", "/v1/admin/users/%s/restore" % bot, headers=ADMIN))
            self.assertOk(s.json("PUT", "/v1/items/%s/dislike" % item, user=uid("u")))
            b = s.request("PUT", "/v1/items/%s/like" % item, headers=hdr)
            self.assertEqual(b[1].get("idempotent-replayed"), "true")
            self.assertEqual(a[2], b[2], "the stored answer, byte for byte")

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

    def test_with_voided_users_each_answer_is_the_fold_up_to_its_cursor(self):
        with Server(args=self.args) as s:
            self.run_with_voids([s])

    def test_with_voided_users_and_the_fold_held_back(self):
        with Server(args=self.args + ["--fold-window", "300ms"]) as s:
            self.run_with_voids([s])

    def test_void_and_restore_between_writes(self):
        with Server(args=self.args + ["--fold-window", "2s"]) as s:
            self.run_void_and_restore_between_writes(s)

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

    def test_voids_on_two_nodes(self):
        with Server(args=FAST) as a:
            with a.node() as b:
                self.run_with_voids([a, b], writers=10)

    def test_many_mode_on_two_nodes(self):
        self.mode, self.kinds = "many", MANY_KINDS
        with Server(args=FAST + ["--reaction-mode", "many", "--reactions", ",".join(MANY_KINDS)]) as a:
            with a.node() as b:
                self.run_and_check([a, b], writers=16)


if __name__ == "__main__":
    unittest.main()
