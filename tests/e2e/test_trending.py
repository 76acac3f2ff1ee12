"""Trending and hot items, per docs/api.md (Trending and hot items) and `tallyd --help`
(--trending-capacity: the error bound is events/K; --hot-threshold).

GET /v1/trending is public: the largest net gain of a kind in a window (1m, 1h, 24h), with
`error_bound`; GET /v1/admin/hot lists items written faster than --hot-threshold per second
over the last two closed 5-second buckets.

The 1m window's expiry needs a ~70 s wait: test_slow_1m_window_expiry runs only with
TALLY_E2E_SLOW=1 set."""

import json
import os
import queue
import random
import re
import socket
import threading
import time
import unittest

from harness import (SLOW, Client, Server, SharedServerTestCase, TallyTestCase, long_reals, metric,
                     uid)

ADMIN = {"X-User-Id": "admin"}
WINDOWS = ("1m", "1h", "24h")


def run_sequences(srv, sequences, nthreads=8, timeout=120):
    """Runs each sequence [(item, user, reaction), ...] in order on one thread; sequences
    interleave across nthreads. Every write must answer 200."""
    q = queue.Queue()
    for seq in sequences:
        q.put(seq)
    errors = []

    def worker():
        c = srv.client()
        try:
            while not errors:
                try:
                    seq = q.get_nowait()
                except queue.Empty:
                    return
                for item, user, r in seq:
                    resp = c.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": r},
                                  user=user)
                    if resp[0] != 200:
                        raise AssertionError("PUT %s/%s %s -> %s %r"
                                             % (item, user, r, resp[0], resp[3][:200]))
        except BaseException as e:
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * SLOW)
    if [t for t in threads if t.is_alive()]:
        raise AssertionError("writers did not finish")
    if errors:
        raise errors[0]


class TrendCase(TallyTestCase):

    def trending(self, srv, window=None, reaction=None, limit=None, user=None):
        q = [(k, v) for k, v in (("reaction", reaction), ("window", window), ("limit", limit))
             if v is not None]
        path = "/v1/trending" + ("?" + "&".join("%s=%s" % kv for kv in q) if q else "")
        c = Client(srv.host, srv.port, timeout=5 * SLOW)
        try:
            resp = c.json("GET", path, user=user)
        except socket.timeout:
            raise AssertionError("GET %s: no answer within %ds" % (path, 5 * SLOW)) from None
        finally:
            c.close()
        doc = self.assertOk(resp, "GET " + path)
        self.assertEqual(set(doc), {"window", "reaction", "items", "error_bound"}, doc)
        self.assertEqual(doc["window"], window or "1h")
        self.assertEqual(doc["reaction"], reaction or "like")
        self.assertIsInstance(doc["items"], list)
        self.assertIsInstance(doc["error_bound"], (int, float))
        self.assertGreaterEqual(doc["error_bound"], 0)
        self.assertLessEqual(len(doc["items"]), int(limit) if limit else 10, "limit")
        gains = []
        for e in doc["items"]:
            self.assertEqual(set(e), {"item", "gain"}, e)
            self.assertIsInstance(e["gain"], int)
            self.assertGreater(e["gain"], 0, "an item without a net gain listed: %r" % e)
            gains.append(e["gain"])
        self.assertEqual(gains, sorted(gains, reverse=True), "largest gain first: %r" % doc)
        self.assertEqual(len({e["item"] for e in doc["items"]}), len(doc["items"]),
                         "an item listed twice")
        return doc

    def poll_trending(self, srv, want, timeout=5.0, **kw):
        """Polls GET /v1/trending until want(doc) holds; returns the last doc."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            doc = self.trending(srv, **kw)
            if want(doc) or time.monotonic() >= deadline:
                return doc
            time.sleep(0.1)

    def exact_counts(self, srv, items, total=None):
        """The items' counts once the pipeline has folded everything written so far (counts
        may lag the writes: ~50 ms on PostgreSQL, where the fold polls the shared log)."""
        deadline = time.monotonic() + 5 * SLOW
        while metric(srv, "tally_pipeline_lag_seconds") not in (0, None) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        last = None
        while True:  # and two reads alike, 0.1 s apart
            out = {}
            for n in range(0, len(items), 100):
                st, _, doc, raw = srv.json("GET", "/v1/items?ids=" + ",".join(items[n:n + 100]))
                self.assertEqual(st, 200, raw[:300])
                for e in doc["items"]:
                    out[e["item"]] = e["counts"]
            folded = total is None or sum(sum(c.values()) for c in out.values()) == total
            if (out == last and folded) or time.monotonic() >= deadline:
                return out
            last = out
            time.sleep(0.1)

    def assertWithinBound(self, doc, exact, kind, msg=""):
        bound = doc["error_bound"]
        for e in doc["items"]:
            true = exact.get(e["item"], {}).get(kind, 0)
            self.assertLessEqual(abs(e["gain"] - true), bound + 1e-9,
                                 "%s: gain %d of %s vs exact %d, error_bound %r %s"
                                 % (doc["window"], e["gain"], e["item"], true, bound, msg))


# ============================================================================================
class TrendingParamsTest(TrendCase, SharedServerTestCase):

    server_args = ("--rate-limit", "off")

    def test_defaults(self):
        doc = self.trending(self.srv)
        self.assertEqual((doc["window"], doc["reaction"]), ("1h", "like"))
        item = uid("tp")
        users = [uid("u") for _ in range(12)]
        run_sequences(self.srv, [[("%s-%d" % (item, n), u, "like")] for n, u in enumerate(users)])
        doc = self.poll_trending(self.srv, lambda d: len(d["items"]) == 10)
        self.assertEqual(len(doc["items"]), 10, "default limit 10: %r" % doc)

    def test_every_window_and_limit_bounds(self):
        for w in WINDOWS:
            for limit in ("1", "100"):
                with self.subTest(window=w, limit=limit):
                    self.trending(self.srv, window=w, limit=limit)
        self.trending(self.srv, reaction="dislike", window="24h", limit="5")

    def test_public_with_or_without_user(self):
        self.trending(self.srv)
        self.trending(self.srv, user=uid("viewer"))

    def test_bad_parameters(self):
        for q in ("window=2h", "window=1d", "window=", "window=1M", "window=60s", "window=1h,1m",
                  "limit=0", "limit=101", "limit=-1", "limit=abc", "limit=1.5", "limit=",
                  "limit=1e2", "reaction=love", "reaction=none", "reaction=", "reaction=LIKE",
                  "reaction=reaction"):
            with self.subTest(query=q):
                self.assertProblem(self.srv.json("GET", "/v1/trending?" + q), 400,
                                   "invalid-parameter")

    def test_methods(self):
        resp = self.srv.json("POST", "/v1/trending", {}, user=uid("u"))
        self.assertProblem(resp, 405, "method-not-allowed")
        self.assertIn("GET", resp[1].get("allow", ""))
        resp = self.srv.json("GET", "/v1/admin/hot")
        self.assertProblem(resp, 401, "unauthenticated")
        resp = self.srv.json("GET", "/v1/admin/hot", user=uid("u"))
        self.assertProblem(resp, 403, "forbidden")
        doc = self.assertOk(self.srv.json("GET", "/v1/admin/hot", headers=ADMIN))
        self.assertEqual(set(doc), {"items"})
        self.assertIsInstance(doc["items"], list)


# ============================================================================================
class TrendingTest(TrendCase):

    def skewed(self, prefix, n_items=30):
        """Item i (1-based) gets round(100/i) likes from distinct users, plus likes taken back
        (net 0) and likes turned into dislikes (a loss for like, a gain for dislike)."""
        items = ["%s-%02d" % (prefix, i) for i in range(1, n_items + 1)]
        seqs = []
        for i, item in enumerate(items, 1):
            g = round(100 / i)
            for n in range(g):
                seqs.append([(item, "%s-u%d" % (item, n), "like")])
            for n in range(round(20 / i) + 1):  # taken back within the window
                seqs.append([(item, "%s-t%d" % (item, n), "like"),
                             (item, "%s-t%d" % (item, n), "none")])
            for n in range(i % 3):  # like, then dislike instead
                seqs.append([(item, "%s-s%d" % (item, n), "like"),
                             (item, "%s-s%d" % (item, n), "dislike")])
        ghost = prefix + "-ghost"  # ten likes, all taken back
        for n in range(10):
            seqs.append([(ghost, "%s-g%d" % (ghost, n), "like"),
                         (ghost, "%s-g%d" % (ghost, n), "none")])
        random.Random(5).shuffle(seqs)
        return items, ghost, seqs

    def test_skewed_workload_top5(self):
        with Server(args=["--rate-limit", "off"]) as s:
            items, ghost, seqs = self.skewed(uid("sk"))
            run_sequences(s, seqs)
            exact = self.exact_counts(s, items + [ghost])
            self.assertEqual(exact[ghost], {"like": 0, "dislike": 0})
            net = {it: exact[it]["like"] for it in items}
            top5 = sorted(items, key=lambda it: (-net[it], it))[:5]
            self.assertEqual(top5, items[:5], "the workload is skewed as meant: %r" % net)
            for w in WINDOWS:
                with self.subTest(window=w):
                    doc = self.poll_trending(
                        s, lambda d: [e["item"] for e in d["items"][:5]] == top5, window=w)
                    self.assertEqual([e["item"] for e in doc["items"][:5]], top5,
                                     "the true top 5 in order (%s): %r" % (w, doc))
                    self.assertWithinBound(doc, exact, "like")
                    self.assertNotIn(ghost, [e["item"] for e in doc["items"]])
                    full = self.trending(s, window=w, limit="100")
                    self.assertWithinBound(full, exact, "like")
                    self.assertNotIn(ghost, [e["item"] for e in full["items"]],
                                     "likes taken back count as a gain")
                    self.assertEqual({e["item"] for e in full["items"]}, set(items),
                                     "30 items gained, capacity 512: all listed")
                    three = self.trending(s, window=w, limit="3")
                    self.assertEqual(three["items"], full["items"][:3])
            # the dislike side: the items whose likes turned into dislikes
            doc = self.trending(s, reaction="dislike", limit="100")
            want = {it for it in items if exact[it]["dislike"] > 0}
            self.assertEqual({e["item"] for e in doc["items"]}, want)
            self.assertWithinBound(doc, exact, "dislike")

    def test_small_capacity_within_error_bound(self):
        # K = 16 counters for 40 items: approximate; the top three are further apart than twice
        # the error bound, so their order is certain
        # (a fixed workload, fed in a fixed order through the import: every run is the same)
        with Server(args=["--rate-limit", "off", "--trending-capacity", "16"]) as s:
            prefix = "cap"
            likes = {"%s-top%d" % (prefix, n): g for n, g in enumerate((200, 120, 60))}
            for n in range(37):
                likes["%s-tail%02d" % (prefix, n)] = 2
            recs = [(item, "%s-u%d" % (item, k)) for item, g in likes.items() for k in range(g)]
            random.Random(1).shuffle(recs)
            body = "".join(json.dumps({"item": i, "user": u, "reaction": "like"}) + "\n"
                           for i, u in recs)
            doc = self.assertOk(s.json("POST", "/v1/admin/import", body=body, headers={
                "X-User-Id": "admin", "Content-Type": "application/x-ndjson"}))
            self.assertEqual(doc["applied"], len(recs), doc)
            exact = self.exact_counts(s, sorted(likes), total=len(recs))
            top = ["%s-top%d" % (prefix, n) for n in range(3)]
            for w in WINDOWS:  # no subTest: a hung server ends the test at the first window
                doc = self.poll_trending(
                    s, lambda d: [e["item"] for e in d["items"][:3]] == top, window=w,
                    limit="100")
                bound = doc["error_bound"]
                self.assertGreater(bound, 0, "an approximate summary states no error bound")
                self.assertLess(2 * bound, 60 - 2, "the workload fits the bound")
                self.assertEqual([e["item"] for e in doc["items"][:3]], top, (w, doc))
                self.assertWithinBound(doc, exact, "like")
            self.assertEqual(s.json("GET", "/healthz")[0], 200)

    def test_reals_in_15_digits(self):
        """A real in a JSON answer is printed with at most 15 significant digits: an error bound
        of 1/20 is 0.05, not jansson's default 0.050000000000000003."""
        with Server(args=["--trending-capacity", "20"]) as s:
            self.assertOk(s.put(uid("r"), uid("u"), "like"))
            doc = self.poll_trending(s, lambda d: d["items"], window="1m")
            self.assertEqual(doc["error_bound"], 1 / 20, doc)
            st, _, raw = s.request("GET", "/v1/trending?window=1m")
            self.assertEqual(st, 200)
            self.assertIn(b'"error_bound":0.05}', raw)
            self.assertEqual(long_reals(raw), [])

    def test_taken_back_and_switched(self):
        with Server(args=["--rate-limit", "off"]) as s:
            p = uid("tb")
            a, b, c, d = p + "-a", p + "-b", p + "-c", p + "-d"
            seqs = [[(a, "ua%d" % n, "like")] for n in range(5)]
            seqs += [[(b, "ub%d" % n, "like")] + ([(b, "ub%d" % n, "none")] if n < 6 else [])
                     for n in range(8)]
            seqs += [[(c, "uc%d" % n, "like"), (c, "uc%d" % n, "none")] for n in range(3)]
            seqs += [[(d, "ud%d" % n, "like")] + ([(d, "ud%d" % n, "dislike")] if n < 3 else [])
                     for n in range(4)]
            seqs += [[(c, "ux", "dislike"), (c, "ux", "like"), (c, "ux", "none")]]
            run_sequences(s, seqs)
            want = [{"item": a, "gain": 5}, {"item": b, "gain": 2}, {"item": d, "gain": 1}]
            for w in WINDOWS:
                with self.subTest(window=w):
                    doc = self.poll_trending(s, lambda x: x["items"] == want, window=w)
                    self.assertEqual(doc["items"], want, "net gains (%s)" % w)
            doc = self.poll_trending(s, lambda x: x["items"] == [{"item": d, "gain": 3}],
                                     reaction="dislike")
            self.assertEqual(doc["items"], [{"item": d, "gain": 3}])

    def test_graceful_restart_keeps_1h(self):
        with Server(args=["--rate-limit", "off"]) as s:
            items, ghost, seqs = self.skewed(uid("rs"), n_items=12)
            run_sequences(s, seqs)
            want = [items[0], items[1], items[2]]
            before = {}
            for w, r in (("1h", "like"), ("24h", "like"), ("1h", "dislike")):
                doc = self.poll_trending(s, lambda d: [e["item"] for e in d["items"][:3]] == want
                                         or r == "dislike", window=w, reaction=r, limit="100")
                # the top three can be right before the follower has read the whole log (on
                # PostgreSQL it polls the shared log): compare with what it shows once settled
                for _ in range(int(50 * SLOW)):
                    time.sleep(0.3)
                    again = self.trending(s, window=w, reaction=r, limit="100")
                    if again == doc:
                        break
                    doc = again
                before[(w, r)] = doc
            self.assertEqual([e["item"] for e in before[("1h", "like")]["items"][:3]], want)
            # twice: the second start finds no new log entry to open a bucket with, and must still
            # keep what the first one restored
            for restart in (1, 2):
                s.restart()
                for (w, r), doc in before.items():
                    with self.subTest(restart=restart, window=w, reaction=r):
                        after = self.poll_trending(s, lambda d: d == doc, window=w, reaction=r,
                                                   limit="100", timeout=2.0)
                        self.assertEqual(after, doc, "trending after graceful restart %d" % restart)

    def test_kill9_keeps_1h(self):
        # not in the API's words, but the design persists the open buckets with the log cursor
        # and replays the log after it: a crash must not lose or double a gain either
        with Server(args=["--rate-limit", "off"]) as s:
            items, ghost, seqs = self.skewed(uid("k9"), n_items=10)
            run_sequences(s, seqs)
            exact = self.exact_counts(s, items)
            want = [{"item": it, "gain": exact[it]["like"]} for it in
                    sorted(items, key=lambda it: (-exact[it]["like"], it))]
            doc = self.poll_trending(s, lambda d: d["items"] == want, window="1h", limit="100")
            self.assertEqual(doc["items"], want)
            s.kill9()
            s.start()
            after = self.poll_trending(s, lambda d: d["items"] == want, window="1h",
                                       limit="100", timeout=3.0)
            self.assertEqual(after["items"], want, "1h trending after kill -9")

    def test_hot_item(self):
        with Server(args=["--rate-limit", "off", "--hot-threshold", "5"]) as s:
            p = uid("hot")
            hot, cold = p + "-hot", p + "-cold"
            # 200 transitions on one item within a few seconds, from 100 users
            seqs = [[(hot, "%s-u%d" % (p, n), "like"), (hot, "%s-u%d" % (p, n), "dislike")]
                    for n in range(100)]
            seqs += [[(cold, "%s-c%d" % (p, n), "like")] for n in range(3)]
            t0 = time.monotonic()
            run_sequences(s, seqs, nthreads=10)
            took = time.monotonic() - t0
            self.assertLess(took, 8, "200 writes took %.1fs: too slow to be hot" % took)
            deadline = time.monotonic() + 12 * SLOW
            seen = None
            while time.monotonic() < deadline:
                doc = self.assertOk(s.json("GET", "/v1/admin/hot", headers=ADMIN))
                self.assertEqual(set(doc), {"items"})
                for e in doc["items"]:
                    self.assertEqual(set(e), {"item", "rate"}, e)
                    self.assertIsInstance(e["rate"], (int, float))
                    self.assertGreaterEqual(e["rate"], 5, "listed below the threshold: %r" % e)
                    self.assertNotEqual(e["item"], cold, "3 writes made an item hot: %r" % doc)
                entry = [e for e in doc["items"] if e["item"] == hot]
                if entry:
                    gauge = metric(s, "tally_hot_items")
                    if gauge is not None and gauge >= 1:
                        seen = (entry[0], gauge)
                        break
                time.sleep(0.25)
            self.assertIsNotNone(seen, "%s not in /v1/admin/hot with tally_hot_items >= 1 "
                                 "within 12 s (last: %r, gauge %r)"
                                 % (hot, doc, metric(s, "tally_hot_items")))
            rates = [e["rate"] for e in doc["items"]]
            self.assertEqual(rates, sorted(rates, reverse=True), "fastest first")
            self.assertLessEqual(seen[0]["rate"], 200 / 10 + 1e-9,
                                 "a rate above what was written: %r" % seen[0])

    @unittest.skipUnless(os.environ.get("TALLY_E2E_SLOW"), "slow (~75 s): set TALLY_E2E_SLOW=1")
    def test_slow_1m_window_expiry(self):
        # SLOW TEST: one ~70 s wait for the 1m window (5 s buckets, 13 of them) to move past
        with Server(args=["--rate-limit", "off"]) as s:
            p = uid("exp")
            old, new = p + "-old", p + "-new"
            run_sequences(s, [[(old, "%s-u%d" % (p, n), "like")] for n in range(6)])
            want = [{"item": old, "gain": 6}]
            doc = self.poll_trending(s, lambda d: d["items"] == want, window="1m")
            self.assertEqual(doc["items"], want)
            time.sleep(70)
            run_sequences(s, [[(new, "%s-v%d" % (p, n), "like")] for n in range(2)])
            want1m = [{"item": new, "gain": 2}]
            doc = self.poll_trending(s, lambda d: d["items"] == want1m, window="1m")
            self.assertEqual(doc["items"], want1m, "gains older than ~65 s left the 1m window")
            doc = self.trending(s, window="1h")
            self.assertEqual(doc["items"], [{"item": old, "gain": 6}, {"item": new, "gain": 2}],
                             "still in the 1h window")


if __name__ == "__main__":
    unittest.main()
