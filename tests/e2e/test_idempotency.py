"""Idempotency-Key, toggle and If-Match, per docs/api.md § Write and § Idempotency-Key, and an
idempotency key has one fate."""

import json
import threading
import time
import unittest

from harness import Server, SharedServerTestCase, TallyTestCase, server_without_rate_limit, uid

JSON = "application/json"


def body_of(kind):
    return ('{"reaction":"%s"}' % kind).encode()


def toggle(s, item, user, kind, key=None, headers=None, body=None):
    h = {"Content-Type": JSON}
    if key is not None:
        h["Idempotency-Key"] = key
    h.update(headers or {})
    return s.json("POST", "/v1/items/%s/reaction:toggle" % item,
                  body if body is not None else body_of(kind), headers=h, user=user)


def put(s, item, user, kind, key=None, headers=None, body=None):
    h = {"Content-Type": JSON}
    if key is not None:
        h["Idempotency-Key"] = key
    h.update(headers or {})
    return s.json("PUT", "/v1/items/%s/reaction" % item,
                  body if body is not None else body_of(kind), headers=h, user=user)


def replayed(resp):
    return resp[1].get("idempotent-replayed", "").strip().lower() == "true"


class IdemCase(TallyTestCase):

    def assertReplayOf(self, first, again, msg=""):
        self.assertEqual(again[0], first[0], "status of the replay " + msg)
        self.assertEqual(again[3], first[3], "body of the replay, byte for byte " + msg)
        self.assertEqual(again[1].get("etag"), first[1].get("etag"), "ETag of the replay " + msg)
        self.assertTrue(replayed(again), "Idempotent-Replayed: true missing on the replay %s %r"
                        % (msg, again[1]))

    def assertFresh(self, resp, msg=""):
        self.assertFalse(replayed(resp), "a first answer marked Idempotent-Replayed " + msg)

    def assertState(self, s, item, user, reaction, version):
        self.assertEqual(s.reaction(item, user), {"item": item, "reaction": reaction,
                                                  "version": version})


class ToggleTest(SharedServerTestCase, IdemCase):

    def test_toggle_requires_key(self):
        item, user = uid("item"), uid("user")
        self.assertProblem(toggle(self.srv, item, user, "like"), 400, "idempotency-key-required")
        self.assertState(self.srv, item, user, "none", 0)

    def test_toggle_sets_then_clears(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(toggle(s, item, user, "like", uid("k")), item, "like", "none", 1, True)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        self.assertWrite(toggle(s, item, user, "like", uid("k")), item, "none", "like", 2, True)
        self.assertCounts(s, item, {"like": 0, "dislike": 0})
        self.assertWrite(toggle(s, item, user, "dislike", uid("k")), item, "dislike", "none", 3, True)
        self.assertWrite(toggle(s, item, user, "like", uid("k")), item, "like", "dislike", 4, True)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        self.assertState(s, item, user, "like", 4)

    def test_toggle_invalid_reaction(self):
        s, item, user = self.srv, uid("item"), uid("user")
        for body in (b'{"reaction":"lovee"}', b"{}", b'{"reaction":1}'):
            with self.subTest(body=body):
                self.assertProblem(toggle(s, item, user, None, uid("k"), body=body),
                                   400, "invalid-reaction")
        self.assertState(s, item, user, "none", 0)

    def test_toggle_wrong_method(self):
        resp = self.srv.json("PUT", "/v1/items/x/reaction:toggle", {"reaction": "like"},
                             user=uid("u"), headers={"Idempotency-Key": uid("k")})
        self.assertProblem(resp, 405, "method-not-allowed")
        self.assertIn("POST", resp[1].get("allow", ""))


class KeyTest(SharedServerTestCase, IdemCase):

    def test_replay_same_answer_changes_nothing(self):
        s, item, user, key = self.srv, uid("item"), uid("user"), uid("k")
        first = toggle(s, item, user, "like", key)
        self.assertWrite(first, item, "like", "none", 1, True)
        self.assertFresh(first)
        for i in range(3):
            again = toggle(s, item, user, "like", key)
            self.assertReplayOf(first, again, "#%d" % i)
        self.assertState(s, item, user, "like", 1)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        time.sleep(0.2)
        self.assertCounts(s, item, {"like": 1, "dislike": 0}, timeout=0)

    def test_replay_on_put_and_delete_after_other_changes(self):
        s, item, user = self.srv, uid("item"), uid("user")
        k1, k2 = uid("k"), uid("k")
        first = put(s, item, user, "like", k1)
        self.assertWrite(first, item, "like", "none", 1, True)
        self.assertWrite(put(s, item, user, "dislike"), item, "dislike", "like", 2, True)
        # the replay gives the stored answer and does not set like again
        self.assertReplayOf(first, put(s, item, user, "like", k1))
        self.assertState(s, item, user, "dislike", 2)
        d = s.json("DELETE", "/v1/items/%s/reaction" % item, user=user,
                   headers={"Idempotency-Key": k2})
        self.assertWrite(d, item, "none", "dislike", 3, True)
        self.assertWrite(put(s, item, user, "like"), item, "like", "none", 4, True)
        d2 = s.json("DELETE", "/v1/items/%s/reaction" % item, user=user,
                    headers={"Idempotency-Key": k2})
        self.assertReplayOf(d, d2)
        self.assertState(s, item, user, "like", 4)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})

    def test_replay_of_unchanged_answer(self):
        s, item, user, key = self.srv, uid("item"), uid("user"), uid("k")
        self.assertWrite(put(s, item, user, "like"), item, "like", "none", 1, True)
        first = put(s, item, user, "like", key)
        self.assertWrite(first, item, "like", "like", 1, False)
        self.assertWrite(put(s, item, user, "none"), item, "none", "like", 2, True)
        self.assertReplayOf(first, put(s, item, user, "like", key))
        self.assertState(s, item, user, "none", 2)

    def test_same_key_different_fingerprint_409(self):
        s, item, user, key = self.srv, uid("item"), uid("user"), uid("k")
        self.assertWrite(toggle(s, item, user, "like", key), item, "like", "none", 1, True)
        other = uid("item")
        cases = [
            ("other body", lambda: toggle(s, item, user, "dislike", key)),
            ("same JSON, other bytes", lambda: toggle(s, item, user, None, key,
                                                      body=b'{"reaction": "like"}')),
            ("other item", lambda: toggle(s, other, user, "like", key)),
            ("other method and path", lambda: put(s, item, user, "like", key)),
            ("delete", lambda: s.json("DELETE", "/v1/items/%s/reaction" % item, user=user,
                                      headers={"Idempotency-Key": key})),
            ("kind route", lambda: s.json("PUT", "/v1/items/%s/like" % item, user=user,
                                          headers={"Idempotency-Key": key})),
        ]
        for name, fn in cases:
            with self.subTest(name):
                self.assertProblem(fn(), 409, "idempotency-key-mismatch")
        self.assertState(s, item, user, "like", 1)
        self.assertState(s, other, user, "none", 0)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        self.assertCounts(s, other, {"like": 0, "dislike": 0}, timeout=0.3)
        # the key is still bound to its first request
        self.assertEqual(toggle(s, item, user, "like", key)[0], 200)

    def test_keys_are_per_user(self):
        s, item, key = self.srv, uid("item"), uid("k")
        a, b = uid("user"), uid("user")
        ra = toggle(s, item, a, "like", key)
        self.assertWrite(ra, item, "like", "none", 1, True)
        rb = toggle(s, item, b, "like", key)
        self.assertWrite(rb, item, "like", "none", 1, True)
        self.assertFresh(rb, "(other user, same key)")
        # and B's different body under A's key is not a mismatch either
        c = uid("user")
        self.assertWrite(toggle(s, item, c, "dislike", key), item, "dislike", "none", 1, True)
        self.assertCounts(s, item, {"like": 2, "dislike": 1})

    def test_quoted_key_equals_bare(self):
        s, item, user = self.srv, uid("item"), uid("user")
        k1, k2 = uid("k"), uid("k")
        first = toggle(s, item, user, "like", '"%s"' % k1)
        self.assertWrite(first, item, "like", "none", 1, True)
        self.assertReplayOf(first, toggle(s, item, user, "like", k1), "(bare after quoted)")
        second = toggle(s, item, user, "like", k2)
        self.assertWrite(second, item, "none", "like", 2, True)
        self.assertReplayOf(second, toggle(s, item, user, "like", '"%s"' % k2), "(quoted after bare)")
        self.assertState(s, item, user, "none", 2)

    def test_invalid_keys(self):
        s, item, user = self.srv, uid("item"), uid("user")
        cases = [
            ("empty", ""),
            ("empty quoted", '""'),
            ("256 chars", "k" * 256),
            ("256 chars quoted", '"%s"' % ("k" * 256)),
            ("non-ascii", "caf\u00e9".encode("utf-8")),
            ("tab", "a\tb"),
        ]
        for name, key in cases:
            with self.subTest(name):
                self.assertProblem(put(s, item, user, "like", key), 400, "invalid-idempotency-key")
                self.assertProblem(toggle(s, item, user, "like", key), 400,
                                   "invalid-idempotency-key")
        self.assertState(s, item, user, "none", 0)

    def test_key_length_boundaries_ok(self):
        s, item, user = self.srv, uid("item"), uid("user")
        k255 = ("%s-" % uid("k")).ljust(255, "z")
        first = put(s, item, user, "like", k255)
        self.assertWrite(first, item, "like", "none", 1, True)
        self.assertReplayOf(first, put(s, item, user, "like", k255))
        k255q = ("%s-" % uid("k")).ljust(255, "q")
        self.assertWrite(put(s, item, user, "dislike", '"%s"' % k255q), item, "dislike", "like", 2, True)
        self.assertWrite(put(s, item, user, "none", "!"), item, "none", "dislike", 3, True)
        printable = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != '"')
        self.assertWrite(put(s, item, user, "like", printable), item, "like", "none", 4, True)

    def test_error_answers_are_not_stored(self):
        s, item, user = self.srv, uid("item"), uid("user")
        cases = [
            ("400 invalid reaction", lambda k: put(s, item, user, None, k, body=b'{"reaction":"lovee"}'),
             400),
            ("400 invalid json", lambda k: put(s, item, user, None, k, body=b"{"), 400),
            ("413", lambda k: put(s, item, user, None, k, body=b'{"reaction":"like"}' + b" " * 5000),
             413),
            ("415", lambda k: put(s, item, user, "like", k, headers={"Content-Type": "text/plain"}),
             415),
        ]
        version = 0
        current = "none"
        for name, bad, status in cases:
            with self.subTest(name):
                key = uid("k")
                self.assertEqual(bad(key)[0], status)
                target = "dislike" if current == "like" else "like"
                resp = put(s, item, user, target, key)
                self.assertWrite(resp, item, target, current, version + 1, True,
                                 "the corrected retry under the same key applies")
                self.assertFresh(resp)
                version, current = version + 1, target
        self.assertState(s, item, user, current, version)

    def test_412_is_stored_and_replayed(self):
        s, item, user, key = self.srv, uid("item"), uid("user"), uid("k")
        first = put(s, item, user, "like", key, headers={"If-Match": '"5"'})
        doc = self.assertProblem(first, 412, "version-mismatch")
        self.assertEqual((doc.get("reaction"), doc.get("version")), ("none", 0))
        self.assertWrite(put(s, item, user, "dislike"), item, "dislike", "none", 1, True)
        again = put(s, item, user, "like", key, headers={"If-Match": '"5"'})
        self.assertReplayOf(first, again)
        self.assertState(s, item, user, "dislike", 1)
        # same key with another If-Match is still the same fingerprint (method, path, body):
        # it gets the stored 412, not a fresh evaluation
        again2 = put(s, item, user, "like", key, headers={"If-Match": '"1"'})
        self.assertReplayOf(first, again2, "(other If-Match)")
        self.assertState(s, item, user, "dislike", 1)


class IfMatchTest(SharedServerTestCase, IdemCase):

    def test_if_match_mismatch(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(put(s, item, user, "like"), item, "like", "none", 1, True)
        for name, fn in [
            ("would change nothing", lambda: put(s, item, user, "like", headers={"If-Match": '"7"'})),
            ("would change", lambda: put(s, item, user, "dislike", headers={"If-Match": '"0"'})),
            ("delete", lambda: s.json("DELETE", "/v1/items/%s/reaction" % item, user=user,
                                      headers={"If-Match": '"2"'})),
            ("kind route", lambda: s.json("PUT", "/v1/items/%s/dislike" % item, user=user,
                                          headers={"If-Match": '"3"'})),
            ("kind delete", lambda: s.json("DELETE", "/v1/items/%s/like" % item, user=user,
                                           headers={"If-Match": '"3"'})),
            ("toggle", lambda: toggle(s, item, user, "like", uid("k"), headers={"If-Match": '"9"'})),
        ]:
            with self.subTest(name):
                doc = self.assertProblem(fn(), 412, "version-mismatch")
                self.assertEqual((doc.get("reaction"), doc.get("version")), ("like", 1))
        self.assertState(s, item, user, "like", 1)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})

    def test_if_match_match(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(put(s, item, user, "like"), item, "like", "none", 1, True)
        self.assertWrite(put(s, item, user, "like", headers={"If-Match": '"1"'}),
                         item, "like", "like", 1, False)
        self.assertWrite(put(s, item, user, "dislike", headers={"If-Match": '"1"'}),
                         item, "dislike", "like", 2, True)
        doc = self.assertProblem(put(s, item, user, "none", headers={"If-Match": '"1"'}),
                                 412, "version-mismatch")
        self.assertEqual((doc.get("reaction"), doc.get("version")), ("dislike", 2))
        self.assertWrite(s.json("DELETE", "/v1/items/%s/reaction" % item, user=user,
                                headers={"If-Match": '"2"'}), item, "none", "dislike", 3, True)

    def test_if_match_zero_only_when_never_reacted(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(put(s, item, user, "like", headers={"If-Match": '"0"'}),
                         item, "like", "none", 1, True)
        doc = self.assertProblem(put(s, item, user, "dislike", headers={"If-Match": '"0"'}),
                                 412, "version-mismatch")
        self.assertEqual((doc.get("reaction"), doc.get("version")), ("like", 1))
        self.assertWrite(put(s, item, user, "none"), item, "none", "like", 2, True)
        # back to none, but the user has reacted: the row is at version 2
        doc = self.assertProblem(put(s, item, user, "like", headers={"If-Match": '"0"'}),
                                 412, "version-mismatch")
        self.assertEqual((doc.get("reaction"), doc.get("version")), ("none", 2))
        self.assertState(s, item, user, "none", 2)


class DurableKeyTest(IdemCase):

    def _replay_across(self, how):
        with Server() as s:
            item, user, key = uid("item"), uid("user"), uid("k")
            first = toggle(s, item, user, "like", key)
            self.assertWrite(first, item, "like", "none", 1, True)
            k412 = uid("k")
            f412 = put(s, item, user, "dislike", k412, headers={"If-Match": '"4"'})
            self.assertProblem(f412, 412, "version-mismatch")
            how(s)
            s.start()
            self.assertReplayOf(first, toggle(s, item, user, "like", key), "(after restart)")
            self.assertReplayOf(f412, put(s, item, user, "dislike", k412,
                                          headers={"If-Match": '"4"'}), "(412 after restart)")
            self.assertProblem(toggle(s, item, user, "dislike", key), 409, "idempotency-key-mismatch")
            self.assertState(s, item, user, "like", 1)
            self.assertCounts(s, item, {"like": 1, "dislike": 0})

    def test_replay_after_graceful_restart(self):
        self._replay_across(lambda s: s.stop())

    def test_replay_after_kill9(self):
        self._replay_across(lambda s: s.kill9())

    def test_ttl_expiry(self):
        with Server(args=["--idempotency-ttl", "2s"]) as s:
            item, user, key = uid("item"), uid("user"), uid("k")
            t0 = time.monotonic()
            self.assertWrite(toggle(s, item, user, "like", key), item, "like", "none", 1, True)
            if time.monotonic() - t0 < 1.5:
                self.assertProblem(toggle(s, item, user, "dislike", key), 409,
                                   "idempotency-key-mismatch", "within the TTL")
            time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
            resp = toggle(s, item, user, "dislike", key)
            self.assertWrite(resp, item, "dislike", "like", 2, True, "expired key = unknown key")
            self.assertFresh(resp)
            self.assertCounts(s, item, {"like": 0, "dislike": 1})
            # the record written once the key expired (on PostgreSQL inserted complete by the
            # answers' statement) is stored whole: its replay is the same answer, counts and cursor
            self.assertEqual(json.loads(resp[3])["counts"], {"like": 0, "dislike": 1})
            self.assertReplayOf(resp, toggle(s, item, user, "dislike", key), "of the key used again")

    def test_ttl_flag_forms(self):
        for value in ("90s", "15m", "24h"):
            with self.subTest(value):
                with Server(args=["--idempotency-ttl", value]) as s:
                    self.assertEqual(s.request("GET", "/healthz")[0], 200)


class IdemConcurrencyTest(IdemCase):

    def test_storm_same_key_applied_once(self):
        with server_without_rate_limit() as s:
            item, user, key = uid("item"), uid("user"), uid("k")
            barrier = threading.Barrier(50, timeout=30)
            answers, errors = [], []
            lock = threading.Lock()

            def worker():
                try:
                    barrier.wait()
                    c = s.client()
                    try:
                        for _ in range(10):
                            st, hdrs, doc, raw = c.json(
                                "POST", "/v1/items/%s/reaction:toggle" % item, body_of("like"),
                                headers={"Content-Type": JSON, "Idempotency-Key": key}, user=user)
                            with lock:
                                answers.append((st, raw, hdrs.get("etag"), replayed((st, hdrs))))
                    finally:
                        c.close()
                except Exception as e:
                    errors.append(repr(e))

            threads = [threading.Thread(target=worker, daemon=True) for _ in range(50)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
            self.assertFalse(any(t.is_alive() for t in threads), "storm threads stuck")
            self.assertEqual(errors, [])
            self.assertEqual(len(answers), 500)
            statuses = {}
            for st, raw, _, _ in answers:
                statuses[st] = statuses.get(st, 0) + 1
            self.assertEqual(statuses, {200: 500}, "answers by status")
            bodies = {raw for _, raw, _, _ in answers}
            self.assertEqual(len(bodies), 1, "different bodies: %r" % list(bodies)[:3])
            self.assertEqual({e for _, _, e, _ in answers}, {'"1"'})
            self.assertEqual(sum(1 for a in answers if not a[3]), 1,
                             "exactly one answer is the original, 499 are replays")
            self.assertState(s, item, user, "like", 1)
            self.assertCounts(s, item, {"like": 1, "dislike": 0}, timeout=3)

    def test_40_users_toggle_concurrently(self):
        with Server() as s:
            item = uid("item")
            users = [uid("tu") for _ in range(40)]
            barrier = threading.Barrier(40, timeout=30)
            problems = []

            def worker(n, u):
                try:
                    barrier.wait()
                    k1 = uid("k")
                    r1 = toggle(s, item, u, "like", k1)
                    if r1[0] != 200 or r1[2].get("version") != 1:
                        problems.append((u, "first", r1[0], r1[3][:200]))
                        return
                    r1b = toggle(s, item, u, "like", k1)  # a client retry
                    if r1b[3] != r1[3] or not replayed(r1b):
                        problems.append((u, "retry", r1b[0], r1b[3][:200]))
                    if n % 3 == 0:
                        r2 = toggle(s, item, u, "like", uid("k"))
                        if r2[0] != 200 or r2[2].get("reaction") != "none":
                            problems.append((u, "second", r2[0], r2[3][:200]))
                except Exception as e:
                    problems.append((u, repr(e)))

            threads = [threading.Thread(target=worker, args=(n, u), daemon=True)
                       for n, u in enumerate(users)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertFalse(any(t.is_alive() for t in threads))
            self.assertEqual(problems, [])
            cleared = sum(1 for n in range(40) if n % 3 == 0)
            self.assertCounts(s, item, {"like": 40 - cleared, "dislike": 0}, timeout=3)
            for n, u in enumerate(users):
                want = ("none", 2) if n % 3 == 0 else ("like", 1)
                doc = s.reaction(item, u)
                self.assertEqual((doc["reaction"], doc["version"]), want, u)


if __name__ == "__main__":
    unittest.main()
