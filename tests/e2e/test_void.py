"""Voiding a user's reactions (admin): POST /v1/admin/users/{user}/void and /restore, GET
/v1/admin/users/{user}. Counts drop by exactly the user's reactions and come back exactly; a
recount finds no drift before, after, and while voids, restores and writes run together; the voided
user sees nothing change (their viewer, GET …/reaction with its ETag, /v1/viewer, their own list, the
counts they are shown); their later writes are answered as usual and count nothing until restored;
the change feed carries "counted" so that folding it as documented gives the counts exactly; who
reacted and trending leave them out; erasing keeps the flag; the metrics and the log; kept across a
restart. Both stores, both reaction modes."""

import collections
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (REPO_ROOT, SLOW, Server, SharedServerTestCase, TallyTestCase, child_env, embedded_only,
                     metric, pg_only, run_threads, uid)

ADMIN = {"X-User-Id": "admin"}
NDJSON = {"X-User-Id": "admin", "Content-Type": "application/x-ndjson"}
TALLY = os.path.join(REPO_ROOT, "build", "tally")
ARGS = ("--rate-limit", "off", "--read-rate-limit", "off", "--who-reacted", "public",
        "--recount-interval", "0")
MANY = ("--reaction-mode", "many", "--reactions", "like,love,haha") + ARGS


def void(srv, user):
    return srv.json("POST", "/v1/admin/users/%s/void" % user, headers=ADMIN)


def restore(srv, user):
    return srv.json("POST", "/v1/admin/users/%s/restore" % user, headers=ADMIN)


def fold_entry(counts, e, many=False):
    """The documented fold of one change-feed entry: minus `from` if it counted before, plus `to`
    if it counts after (absent "counted" means [true, true])."""
    before, after = e.get("counted", [True, True])
    sets = []
    for side in ("from", "to"):
        v = e[side]
        sets.append(set(v) if many else (set() if v == "none" else {v}))
    if before:
        for k in sets[0]:
            counts[k] -= 1
    if after:
        for k in sets[1]:
            counts[k] += 1


class VoidCase(TallyTestCase):

    def recount(self, srv, items):
        doc = self.assertOk(srv.json("POST", "/v1/admin/recount", {"items": items}, headers=ADMIN))
        self.assertEqual(doc["drift"], [], "recount found drift")
        return doc

    def feed(self, srv):
        entries, after = [], None
        for _ in range(10000):
            path = "/v1/changes?limit=1000" + ("&after=" + after if after else "")
            doc = self.assertOk(srv.json("GET", path, headers=ADMIN))
            entries += doc["changes"]
            if not doc["changes"]:
                return entries
            after = doc["next"]
        raise AssertionError("feed too long")

    def user_view(self, srv, user, items):
        """Everything the user sees of their own state: bodies and ETags."""
        view = []
        for it in items:
            st, h, doc, _ = srv.json("GET", "/v1/items/" + it, user=user)
            view.append((st, doc))
            st, h, doc, _ = srv.json("GET", "/v1/items/%s/reaction" % it, user=user)
            view.append((st, h.get("etag"), doc))
        st, _, doc, _ = srv.json("GET", "/v1/items?ids=" + ",".join(items), user=user)
        view.append((st, doc))
        st, h, doc, _ = srv.json("GET", "/v1/viewer?ids=" + ",".join(items), user=user)
        view.append((st, h.get("etag"), doc))
        st, _, doc, _ = srv.json("GET", "/v1/users/%s/reactions" % user, user=user)
        view.append((st, [(e["item"], e.get("reaction", e.get("reactions"))) for e in doc["reactions"]]))
        return view

    def settled_view(self, srv, user, items, listed):
        """user_view once the user's own list shows their `listed` reactions: with shards, the list
        is folded from the items' shards into the user's a moment after the writes."""
        deadline = time.monotonic() + 10 * SLOW
        view = self.user_view(srv, user, items)
        while len(view[-1][1]) != listed and time.monotonic() < deadline:
            time.sleep(0.05)
            view = self.user_view(srv, user, items)
        self.assertEqual(len(view[-1][1]), listed, "the user's list: %r" % (view[-1],))
        return view


class VoidOneMode(SharedServerTestCase, VoidCase):
    server_args = ARGS

    def test_counts_drop_and_return_exactly(self):
        a, b = uid("a"), uid("b")
        bot, u1 = uid("bot"), uid("u")
        self.srv.put(a, bot, "like")
        self.srv.put(b, bot, "dislike")
        self.srv.put(a, u1, "like")
        self.assertCounts(self.srv, a, {"like": 2, "dislike": 0})
        self.assertCounts(self.srv, b, {"like": 0, "dislike": 1})
        self.recount(self.srv, [a, b])
        self.assertEqual(self.assertOk(void(self.srv, bot)), {"voided": 2})
        self.assertCounts(self.srv, a, {"like": 1, "dislike": 0})
        self.assertCounts(self.srv, b, {"like": 0, "dislike": 0})
        self.recount(self.srv, [a, b])
        self.assertEqual(self.assertOk(self.srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN)),
                         {"user": bot, "voided": True, "reactions": 2})
        self.assertEqual(self.assertOk(void(self.srv, bot)), {"voided": 0}, "already voided")
        self.assertEqual(self.assertOk(restore(self.srv, bot)), {"restored": 2})
        self.assertCounts(self.srv, a, {"like": 2, "dislike": 0})
        self.assertCounts(self.srv, b, {"like": 0, "dislike": 1})
        self.recount(self.srv, [a, b])
        self.assertEqual(self.assertOk(restore(self.srv, bot)), {"restored": 0}, "not voided")
        self.assertEqual(self.assertOk(self.srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN)),
                         {"user": bot, "voided": False, "reactions": 2})
        # a user never seen: nothing to void, but the flag holds for what they do later
        ghost = uid("ghost")
        self.assertEqual(self.assertOk(void(self.srv, ghost)), {"voided": 0})
        self.assertEqual(self.assertOk(self.srv.json("GET", "/v1/admin/users/" + ghost, headers=ADMIN)),
                         {"user": ghost, "voided": True, "reactions": 0})

    def test_voided_user_sees_nothing_change(self):
        items = [uid("i") for _ in range(3)]
        bot, u1 = uid("bot"), uid("u")
        self.srv.put(items[0], bot, "like")
        self.srv.put(items[1], bot, "dislike")
        self.srv.put(items[1], bot, "like")  # version 2
        self.srv.put(items[0], u1, "like")
        self.assertCounts(self.srv, items[0], {"like": 2, "dislike": 0})
        self.assertCounts(self.srv, items[1], {"like": 1, "dislike": 0})
        before = self.settled_view(self.srv, bot, items, 2)
        self.assertOk(void(self.srv, bot))
        self.assertCounts(self.srv, items[0], {"like": 1, "dislike": 0})
        self.assertCounts(self.srv, items[1], {"like": 0, "dislike": 0})
        self.assertEqual(self.user_view(self.srv, bot, items), before, "the voided user's own view")
        # others see the drop
        doc = self.assertOk(self.srv.item(items[0], user=u1))
        self.assertEqual(doc["counts"], {"like": 1, "dislike": 0})
        self.assertOk(restore(self.srv, bot))
        self.assertCounts(self.srv, items[1], {"like": 1, "dislike": 0})
        self.assertEqual(self.user_view(self.srv, bot, items), before, "after the restore")

    def test_later_writes_count_nothing_until_restored(self):
        a, c = uid("a"), uid("c")
        bot = uid("bot")
        self.srv.put(a, bot, "like")
        self.assertOk(void(self.srv, bot))
        # answered as usual: versions go on, If-Match holds, ETags follow
        self.assertWrite(self.srv.put(c, bot, "like"), c, "like", "none", 1, True)
        self.assertWrite(self.srv.put(a, bot, "dislike"), a, "dislike", "like", 2, True)
        self.assertProblem(self.srv.json("PUT", "/v1/items/%s/reaction" % c, {"reaction": "dislike"}, user=bot,
                                         headers={"If-Match": '"7"'}), 412, "version-mismatch")
        self.assertCounts(self.srv, a, {"like": 0, "dislike": 0})  # the void folded
        self.assertEqual(self.srv.stable_counts(c), {"like": 0, "dislike": 0})
        self.assertEqual(self.srv.stable_counts(a), {"like": 0, "dislike": 0})
        # the bot is shown its own reactions in the counts
        self.assertEqual(self.assertOk(self.srv.item(c, user=bot))["counts"], {"like": 1, "dislike": 0})
        self.recount(self.srv, [a, c])
        self.assertEqual(self.assertOk(restore(self.srv, bot)), {"restored": 2})
        self.assertCounts(self.srv, c, {"like": 1, "dislike": 0})
        self.assertCounts(self.srv, a, {"like": 0, "dislike": 1})
        self.recount(self.srv, [a, c])

    def test_feed_carries_counted_and_folds_to_the_counts(self):
        items = [uid("f") for _ in range(3)]
        bot, u1 = uid("bot"), uid("u")
        self.srv.put(items[0], bot, "like")
        self.srv.put(items[1], bot, "dislike")
        self.srv.put(items[0], u1, "dislike")
        self.assertOk(void(self.srv, bot))
        self.srv.put(items[2], bot, "like")      # [false, false]
        self.srv.put(items[0], bot, "dislike")   # [false, false]
        self.assertOk(restore(self.srv, bot))
        self.srv.put(items[1], bot, "none")      # counted again
        self.assertOk(void(self.srv, bot))
        entries = [e for e in self.feed(self.srv) if e["item"] in items]
        mine = [e for e in entries if e["user"] == bot]
        self.assertEqual([e.get("counted") for e in mine],
                         [None, None,
                          [True, False], [True, False],        # the void: one entry per row
                          [False, False], [False, False],
                          [False, True], [False, True], [False, True],  # the restore
                          None,
                          [True, False], [True, False]])
        for e in mine:
            if "counted" in e and e["counted"][0] != e["counted"][1]:
                self.assertEqual(e["from"], e["to"], "a void or restore moves no reaction: %r" % e)
        self.assertEqual(len({e["cursor"] for e in entries}), len(entries), "cursors tell entries apart")
        folded = {it: collections.Counter() for it in items}
        for e in entries:
            fold_entry(folded[e["item"]], e)
        # the counts converge to the fold (on PostgreSQL the fold may commit a moment after the answers)
        self.assertEqual({k: folded[items[0]][k] for k in ("like", "dislike")}, {"like": 0, "dislike": 1})
        for it in items:
            self.assertCounts(self.srv, it, {k: folded[it][k] for k in ("like", "dislike")},
                              msg="fold of the feed for " + it)
        self.recount(self.srv, items)

    def test_lists_and_trending_leave_voided_users_out(self):
        a = uid("a")
        bots = [uid("bot") for _ in range(3)]
        u1 = uid("u")
        for b in bots:
            self.srv.put(a, b, "like")
        self.srv.put(a, u1, "like")
        for b in bots:
            self.assertOk(void(self.srv, b))
        self.assertCounts(self.srv, a, {"like": 1, "dislike": 0})  # folded: the lists with the counts
        listed = []
        after = None
        for _ in range(10):  # pages of one: voided users' entries are skipped, paging goes on
            path = "/v1/items/%s/reactions?limit=1" % a + ("&after=" + after if after else "")
            doc = self.assertOk(self.srv.json("GET", path))
            listed += [e["user"] for e in doc["reactions"]]
            after = doc.get("next")
            if not after:
                break
        self.assertEqual(listed, [u1])
        # the voided user's own list is unchanged
        doc = self.assertOk(self.srv.json("GET", "/v1/users/%s/reactions" % bots[0], user=bots[0]))
        self.assertEqual([e["item"] for e in doc["reactions"]], [a])
        deadline = time.monotonic() + 3 * SLOW
        while True:
            doc = self.assertOk(self.srv.json("GET", "/v1/trending?window=1h&limit=100"))
            gains = {e["item"]: e["gain"] for e in doc["items"]}
            if gains.get(a) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(gains.get(a), 1, "trending counts only the user who counts")

    def test_erase_keeps_the_flag(self):
        a = uid("a")
        bot = uid("bot")
        self.srv.put(a, bot, "like")
        self.assertOk(void(self.srv, bot))
        self.assertEqual(self.assertOk(self.srv.json("DELETE", "/v1/admin/users/" + bot, headers=ADMIN)),
                         {"changed": 1})
        deadline = time.monotonic() + 2 * SLOW
        while True:  # "reactions" comes from the user's list, which lags as the counts do
            doc = self.assertOk(self.srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))
            if doc["reactions"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(doc, {"user": bot, "voided": True, "reactions": 0})
        self.assertCounts(self.srv, a, {"like": 0, "dislike": 0})
        self.assertEqual(self.srv.stable_counts(a), {"like": 0, "dislike": 0})
        self.srv.put(a, bot, "like")
        self.assertEqual(self.srv.stable_counts(a), {"like": 0, "dislike": 0})
        self.recount(self.srv, [a])

    def test_admin_only_and_bad_input(self):
        bot = uid("bot")
        for path, method in (("/void", "POST"), ("/restore", "POST"), ("", "GET")):
            self.assertProblem(self.srv.json(method, "/v1/admin/users/%s%s" % (bot, path)), 401, "unauthenticated")
            self.assertProblem(self.srv.json(method, "/v1/admin/users/%s%s" % (bot, path), user="u1"), 403,
                               "forbidden")
            self.assertProblem(self.srv.json(method, "/v1/admin/users/a%%20b%s" % path, headers=ADMIN), 400,
                               "invalid-user-id")
        st, h, _, _ = self.srv.json("GET", "/v1/admin/users/%s/void" % bot, headers=ADMIN)
        self.assertEqual(st, 405)
        self.assertEqual(h.get("allow"), "POST")
        self.assertEqual(self.assertOk(self.srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))["voided"],
                         False, "bad requests changed nothing")

    def test_metrics_and_log(self):
        bot = uid("bot")
        self.srv.put(uid("a"), bot, "like")
        v0, r0 = metric(self.srv, "tally_voids_total"), metric(self.srv, "tally_restores_total")
        rows0 = metric(self.srv, "tally_voided_rows_total")
        self.assertOk(void(self.srv, bot))
        self.assertOk(void(self.srv, bot))  # changes nothing: not counted
        self.assertOk(restore(self.srv, bot))
        self.assertEqual(metric(self.srv, "tally_voids_total"), v0 + 1)
        self.assertEqual(metric(self.srv, "tally_restores_total"), r0 + 1)
        self.assertEqual(metric(self.srv, "tally_voided_rows_total"), rows0 + 1)
        self.assertGreaterEqual(metric(self.srv, "tally_voided_users"), 0)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            err = self.srv.stderr()
            if 'action=restore user="%s"' % bot in err:
                break
            time.sleep(0.05)
        self.assertIn('event=void action=void user="%s" rows=1 who="admin"' % bot, err)
        self.assertIn('event=void action=restore user="%s" rows=1 who="admin"' % bot, err)

    def test_race_void_while_the_user_writes(self):
        """The user writes from several threads while voids and restores run: every answer as usual,
        and at the end the counts are exactly the rows that count, and a recount finds nothing."""
        items = [uid("r") for _ in range(8)]
        bot, others = uid("bot"), [uid("u") for _ in range(3)]
        for it in items:
            for u in others:
                self.srv.put(it, u, "like")
        stop = threading.Event()
        errors = []

        def writer(seed):
            rnd = random.Random(seed)
            cl = self.srv.client()
            try:
                while not stop.is_set():
                    it = rnd.choice(items)
                    st, _, _, raw = cl.json("PUT", "/v1/items/%s/reaction" % it,
                                            {"reaction": rnd.choice(["like", "dislike", "none"])}, user=bot)
                    if st != 200:
                        errors.append((st, raw))
            finally:
                cl.close()

        def voider():
            for i in range(12):
                self.assertOk(void(self.srv, bot) if i % 2 == 0 else restore(self.srv, bot))
                time.sleep(0.02)
            self.assertOk(void(self.srv, bot))
            stop.set()

        run_threads([lambda: writer(1), lambda: writer(2), lambda: writer(3), voider], timeout=120)
        self.assertEqual(errors, [])
        for it in items:  # the bot is voided at the end: only the others count
            self.assertCounts(self.srv, it, {"like": 3, "dislike": 0})
        self.recount(self.srv, items)
        self.assertOk(restore(self.srv, bot))
        for it in items:
            mine = self.srv.reaction(it, bot)["reaction"]
            want = {"like": 3, "dislike": 0}
            if mine != "none":
                want[mine] += 1
            self.assertCounts(self.srv, it, want)
        self.recount(self.srv, items)

    def test_race_restore_during_a_recount(self):
        """Recounts of every item run while a user with reactions on many items is voided and
        restored: no recount finds drift (it would correct it, and the counts would then be wrong)."""
        items = [uid("rc") for _ in range(150)]
        bot, u1 = uid("bot"), uid("u")
        for it in items:
            self.srv.put(it, bot, "like")
            self.srv.put(it, u1, "dislike")
        stop = threading.Event()
        drifts = []

        def recounter():
            cl = self.srv.client()
            try:
                while not stop.is_set():
                    st, _, doc, raw = cl.json("POST", "/v1/admin/recount", {"items": items}, headers=ADMIN)
                    if st == 200:
                        drifts.extend(doc["drift"])
                    elif st != 503:  # another admin job running
                        drifts.append((st, raw))
            finally:
                cl.close()

        def voider():
            for i in range(10):
                self.assertOk(void(self.srv, bot) if i % 2 == 0 else restore(self.srv, bot))
                time.sleep(0.03)
            stop.set()

        run_threads([recounter, voider], timeout=180)
        self.assertEqual(drifts, [])
        for it in items[:10] + items[-10:]:
            self.assertCounts(self.srv, it, {"like": 1, "dislike": 1})
        self.recount(self.srv, items)


class VoidManyMode(SharedServerTestCase, VoidCase):
    server_args = MANY

    def test_sets_drop_and_return_with_the_reactors(self):
        a = uid("a")
        bot, u1 = uid("bot"), uid("u")
        self.assertOk(self.srv.json("PUT", "/v1/items/%s/reaction" % a, {"reactions": ["like", "love"]}, user=bot))
        self.assertOk(self.srv.json("PUT", "/v1/items/%s/like" % a, user=u1))
        want = {"like": 2, "love": 1, "haha": 0}
        self.assertCounts(self.srv, a, want)
        before = self.assertOk(self.srv.item(a, user=bot))
        self.assertEqual(before["reactors"], 2)
        self.assertEqual(self.assertOk(void(self.srv, bot)), {"voided": 1})
        self.assertCounts(self.srv, a, {"like": 1, "love": 0, "haha": 0})
        self.assertEqual(self.assertOk(self.srv.item(a))["reactors"], 1)
        self.assertEqual(self.assertOk(self.srv.item(a, user=bot)), before, "the voided user's view")
        self.assertOk(self.srv.json("PUT", "/v1/items/%s/haha" % a, user=bot))
        self.assertEqual(self.srv.stable_counts(a), {"like": 1, "love": 0, "haha": 0})
        self.recount(self.srv, [a])
        entries = [e for e in self.feed(self.srv) if e["item"] == a]
        folded = collections.Counter()
        for e in entries:
            fold_entry(folded, e, many=True)
        self.assertEqual({k: folded[k] for k in ("like", "love", "haha")}, {"like": 1, "love": 0, "haha": 0})
        self.assertOk(restore(self.srv, bot))
        self.assertCounts(self.srv, a, {"like": 2, "love": 1, "haha": 1})
        self.recount(self.srv, [a])


class VoidRestart(VoidCase):

    def test_kept_across_a_restart(self):
        with Server(args=ARGS) as srv:
            a = uid("a")
            bot, u1 = uid("bot"), uid("u")
            srv.put(a, bot, "like")
            srv.put(a, u1, "like")
            # both likes folded first: else a count of 1 may be the bot's like alone, not the void
            self.assertCounts(srv, a, {"like": 2, "dislike": 0})
            self.assertOk(void(srv, bot))
            self.assertCounts(srv, a, {"like": 1, "dislike": 0})
            view = self.settled_view(srv, bot, [a], 1)
            srv.restart()
            self.assertEqual(self.assertOk(srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))["voided"], True)
            self.assertCounts(srv, a, {"like": 1, "dislike": 0})
            self.assertEqual(self.user_view(srv, bot, [a]), view, "the voided user's view after a restart")
            srv.put(uid("c"), bot, "like")
            self.recount(srv, [a])
            srv.kill9()
            srv.start()
            self.assertEqual(self.assertOk(restore(srv, bot)), {"restored": 2})
            self.assertCounts(srv, a, {"like": 2, "dislike": 0})
            self.recount(srv, [a])


class VoidImportExport(VoidCase):

    def test_import_honours_voided_lines(self):
        with Server(args=ARGS) as srv:
            a, b = uid("a"), uid("b")
            bot, u1 = uid("bot"), uid("u")
            lines = [{"item": a, "user": bot, "reaction": "like"}, {"item": b, "user": bot, "reaction": "dislike"},
                     {"item": a, "user": u1, "reaction": "like"}, {"user": bot, "voided": True},
                     {"user": "not an id", "voided": True}, {"user": bot, "voided": "yes"}]
            body = "".join(json.dumps(x) + "\n" for x in lines)
            doc = self.assertOk(srv.json("POST", "/v1/admin/import", body=body, headers=NDJSON))
            self.assertEqual((doc["read"], doc["applied"], len(doc["rejected"])), (6, 4, 2), doc)
            self.assertEqual([r["line"] for r in doc["rejected"]], [5, 6])
            self.assertCounts(srv, a, {"like": 1, "dislike": 0})
            self.assertCounts(srv, b, {"like": 0, "dislike": 0})
            self.assertEqual(self.assertOk(srv.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))["voided"], True)
            # the voided viewer is shown their own like (once the fold has the void: a count of 1 seen
            # above may be the bot's like alone, folded before u1's, when the records reach the fold apart)
            deadline = time.monotonic() + 2 * SLOW
            while self.assertOk(srv.item(a, user=bot))["counts"] != {"like": 2, "dislike": 0} and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.assertOk(srv.item(a, user=bot))["counts"], {"like": 2, "dislike": 0})
            self.assertEqual(srv.stable_counts(a), {"like": 1, "dislike": 0})
            self.recount(srv, [a, b])
            body = json.dumps({"user": bot, "voided": False}) + "\n"
            doc = self.assertOk(srv.json("POST", "/v1/admin/import", body=body, headers=NDJSON))
            self.assertEqual(doc["applied"], 1)
            self.assertCounts(srv, a, {"like": 2, "dislike": 0})

    @embedded_only("tally export and verify read a data directory")
    def test_tally_export_verify_and_round_trip(self):
        with Server(args=ARGS) as srv:
            a = uid("a")
            bot, u1 = uid("bot"), uid("u")
            srv.put(a, bot, "like")
            srv.put(a, u1, "dislike")
            self.assertOk(void(srv, bot))
            self.assertCounts(srv, a, {"like": 0, "dislike": 1})
            srv.stop()
            env = child_env()
            r = subprocess.run([TALLY, "verify", "--data", srv.data_dir], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("voided users: 1", r.stdout)
            r = subprocess.run([TALLY, "export", "--data", srv.data_dir], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [json.loads(x) for x in r.stdout.splitlines()]
            self.assertEqual(lines[-1], {"export": "complete", "lines": 3})
            self.assertIn({"user": bot, "voided": True}, lines)
            export = r.stdout
            # offline: tally import of the export into a new directory keeps the voided user
            tmp = tempfile.mkdtemp(prefix="tally-e2e-void-")
            self.addCleanup(shutil.rmtree, tmp, True)
            path = os.path.join(tmp, "export.ndjson")
            with open(path, "w") as f:
                f.write(export)
            copy = os.path.join(tmp, "copy")
            r = subprocess.run([TALLY, "import", "--data", copy, "--reactions", "like,dislike", path], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run([TALLY, "verify", "--data", copy], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("voided users: 1", r.stdout)
            r = subprocess.run([TALLY, "export", "--data", copy], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(sorted(r.stdout.splitlines()), sorted(export.splitlines()), "the same lines again")
        with Server(args=ARGS) as dst:
            doc = self.assertOk(dst.json("POST", "/v1/admin/import", body=export, headers=NDJSON))
            self.assertEqual(doc["rejected"], [])
            self.assertCounts(dst, a, {"like": 0, "dislike": 1})
            self.assertEqual(self.assertOk(dst.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))["voided"], True)
            self.assertOk(restore(dst, bot))
            self.assertCounts(dst, a, {"like": 1, "dislike": 1})


@pg_only()
class VoidTwoNodes(VoidCase):
    """Two nodes on one database: a void on one applies to the other's reads within a second, and
    writes of the user arriving on the other node while the void runs are counted exactly."""

    a = b = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.a = Server(args=ARGS)
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

    def test_other_node_follows_within_a_second(self):
        a = uid("a")
        bot, u1 = uid("bot"), uid("u")
        self.b.put(a, bot, "like")
        self.b.put(a, u1, "like")
        self.assertCounts(self.b, a, {"like": 2, "dislike": 0})
        view = self.settled_view(self.b, bot, [a], 1)
        self.assertOk(void(self.a, bot))
        t0 = time.monotonic()
        self.assertCounts(self.b, a, {"like": 1, "dislike": 0})
        while time.monotonic() - t0 < 1.5 * SLOW and self.user_view(self.b, bot, [a]) != view:
            time.sleep(0.05)
        self.assertLess(time.monotonic() - t0, 1.5 * SLOW)
        self.assertEqual(self.user_view(self.b, bot, [a]), view, "the voided user's view on the other node")
        doc = self.assertOk(self.b.json("GET", "/v1/items/%s/reactions" % a))
        self.assertEqual([e["user"] for e in doc["reactions"]], [u1])
        self.assertEqual(self.assertOk(self.b.json("GET", "/v1/admin/users/" + bot, headers=ADMIN))["voided"], True)
        self.assertOk(restore(self.b, bot))
        self.assertCounts(self.a, a, {"like": 2, "dislike": 0})

    def test_void_on_one_node_while_writes_arrive_on_the_other(self):
        items = [uid("n") for _ in range(6)]
        bot, others = uid("bot"), [uid("u") for _ in range(2)]
        for it in items:
            for u in others:
                self.a.put(it, u, "like")
        stop = threading.Event()
        errors = []

        def writer(seed):
            rnd = random.Random(seed)
            cl = self.b.client()
            try:
                while not stop.is_set():
                    it = rnd.choice(items)
                    st, _, _, raw = cl.json("PUT", "/v1/items/%s/reaction" % it,
                                            {"reaction": rnd.choice(["like", "dislike", "none"])}, user=bot)
                    if st != 200:
                        errors.append((st, raw))
            finally:
                cl.close()

        def voider():
            for i in range(12):
                self.assertOk(void(self.a, bot) if i % 2 == 0 else restore(self.a, bot))
                time.sleep(0.03)
            self.assertOk(void(self.a, bot))
            time.sleep(0.2)
            stop.set()

        run_threads([lambda: writer(1), lambda: writer(2), voider], timeout=120)
        self.assertEqual(errors, [])
        for n in (self.a, self.b):
            for it in items:
                self.assertCounts(n, it, {"like": 2, "dislike": 0})
        self.recount(self.a, items)
        self.assertOk(restore(self.b, bot))
        for it in items:
            mine = self.a.reaction(it, bot)["reaction"]
            want = {"like": 2, "dislike": 0}
            if mine != "none":
                want[mine] += 1
            self.assertCounts(self.b, it, want)
        self.recount(self.b, items)


if __name__ == "__main__":
    unittest.main()
