"""Item policies (admin): PUT/GET/DELETE /v1/admin/policies[/{target}], their validation and the
limit of 10 000; resolution (own id, else the longest prefix, else *, else none); the checks of a
write in order (a stored Idempotency-Key replays, then If-Match, then the policy: item-closed,
reaction-not-allowed with "allowed", too-many-reactions), a refused write changing nothing and not
stored under its key; "policy" in item objects; hidden counts on every read path (item, batch, live
streams switching to null and back, trending, who reacted) but for admins; import ignoring
policies; metrics and the log; kept across a restart; on PostgreSQL another node applies a change
within a second. Both stores, both reaction modes."""

import json
import socket
import time
import unittest

from harness import SLOW, Server, SharedServerTestCase, TallyTestCase, pg_only, run_threads, uid

ADMIN = {"X-User-Id": "admin"}
ARGS = ("--rate-limit", "off", "--read-rate-limit", "off", "--live-interval", "50ms", "--who-reacted", "public")
MANY = ("--reaction-mode", "many", "--reactions", "like,love,haha,wow") + ARGS


def policy_path(target):
    return "/v1/admin/policies/" + target


def put_policy(srv, target, body, headers=ADMIN):
    return srv.json("PUT", policy_path(target), body, headers=headers)


def metric_labelled(srv, name, labels):
    st, _, body = srv.request("GET", "/metrics")
    assert st == 200
    want = "%s{%s} " % (name, labels)
    for line in body.decode().split("\n"):
        if line.startswith(want):
            return float(line[len(want):])
    return None


class PolicyCase(TallyTestCase):

    def put(self, srv, target, body):
        doc = self.assertOk(put_policy(srv, target, body), "PUT policy %s" % target)
        self.addCleanup(srv.json, "DELETE", policy_path(target), headers=ADMIN)
        return doc

    def write(self, srv, item, user, reaction, headers=None):
        return srv.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": reaction}, user=user,
                        headers=headers)


class PolicyOneMode(SharedServerTestCase, PolicyCase):
    server_args = ARGS

    def test_put_get_list_replace_delete(self):
        p = uid("p")
        doc = self.put(self.srv, p, {"kinds": ["like"], "closed": False, "counts": "hidden"})
        self.assertEqual(doc, {"target": p, "kinds": ["like"], "closed": False, "counts": "hidden"})
        self.assertEqual(self.assertOk(self.srv.json("GET", policy_path(p), headers=ADMIN)), doc)
        listed = self.assertOk(self.srv.json("GET", "/v1/admin/policies", headers=ADMIN))["policies"]
        self.assertIn(doc, listed)
        # a PUT replaces the whole policy: nothing of the previous one stays
        doc = self.assertOk(put_policy(self.srv, p, {"closed": True}))
        self.assertEqual(doc, {"target": p, "kinds": ["like", "dislike"], "closed": True, "counts": "public"})
        # every member optional: an empty body is the default policy
        doc = self.assertOk(self.srv.json("PUT", policy_path(p), headers=ADMIN))
        self.assertEqual(doc, {"target": p, "kinds": ["like", "dislike"], "closed": False, "counts": "public"})
        st, _, _, raw = self.srv.json("DELETE", policy_path(p), headers=ADMIN)
        self.assertEqual((st, raw), (204, b""))
        self.assertProblem(self.srv.json("DELETE", policy_path(p), headers=ADMIN), 404, "not-found")
        self.assertProblem(self.srv.json("GET", policy_path(p), headers=ADMIN), 404, "not-found")
        self.assertNotIn(p, [x["target"] for x in
                             self.assertOk(self.srv.json("GET", "/v1/admin/policies", headers=ADMIN))["policies"]])

    def test_admin_only(self):
        p = uid("p")
        self.assertProblem(put_policy(self.srv, p, {}, headers={}), 401, "unauthenticated")
        self.assertProblem(put_policy(self.srv, p, {}, headers={"X-User-Id": "u1"}), 403, "forbidden")
        self.assertProblem(self.srv.json("GET", "/v1/admin/policies", user="u1"), 403, "forbidden")
        self.assertProblem(self.srv.json("DELETE", policy_path(p), user="u1"), 403, "forbidden")

    def test_validation(self):
        p = uid("p")
        bad_bodies = [{"kinds": ["nope"]}, {"kinds": []}, {"kinds": "like"}, {"kinds": ["like", "like"]},
                      {"max_kinds": 0}, {"max_kinds": 17}, {"max_kinds": "3"}, {"max_kinds": 2.5},
                      {"closed": "yes"}, {"counts": "secret"}, {"count": "hidden"}]
        for body in bad_bodies:
            with self.subTest(body=body):
                self.assertProblem(put_policy(self.srv, p, body), 400, "invalid-parameter")
        for raw in [b"{", b"[]", b'"x"']:  # not a JSON object
            self.assertProblem(self.srv.json("PUT", policy_path(p), raw, headers=dict(ADMIN, **{
                "Content-Type": "application/json"})), 400, "invalid-json")
        for target in ["a*b", "**", "a%20b", "a$*", "x" * 129, "x" * 129 + "*", "..", "%2A%2A"]:
            with self.subTest(target=target):
                self.assertProblem(put_policy(self.srv, target, {}), 400, "invalid-parameter")
                self.assertProblem(self.srv.json("DELETE", policy_path(target), headers=ADMIN), 400,
                                   "invalid-parameter")
        # nothing was stored by any of them
        listed = self.assertOk(self.srv.json("GET", "/v1/admin/policies", headers=ADMIN))["policies"]
        self.assertNotIn(p, [x["target"] for x in listed])
        # max_kinds 1..16 at its bounds; `*` percent-encoded
        self.assertEqual(self.put(self.srv, p, {"max_kinds": 16})["max_kinds"], 16)
        self.assertEqual(self.put(self.srv, p, {"max_kinds": 1})["max_kinds"], 1)
        q = uid("q")
        self.assertEqual(self.put(self.srv, q + "-%2A", {})["target"], q + "-*")

    def test_resolution_most_specific_wins(self):
        base = uid("r")
        item = lambda i: self.assertOk(self.srv.item(i))  # noqa: E731
        self.assertNotIn("policy", item(base + "-a-1"))
        self.put(self.srv, base + "-*", {"kinds": ["like"]})
        self.put(self.srv, base + "-a-*", {"kinds": ["dislike"]})
        self.put(self.srv, base + "-a-1", {"closed": True})
        self.assertEqual(item(base + "-a-1")["policy"], {"kinds": ["like", "dislike"], "closed": True,
                                                         "counts": "public"})
        self.assertEqual(item(base + "-a-2")["policy"]["kinds"], ["dislike"])
        self.assertEqual(item(base + "-a-")["policy"]["kinds"], ["dislike"])  # a prefix matches itself
        self.assertEqual(item(base + "-b")["policy"]["kinds"], ["like"])
        self.assertNotIn("policy", item(base + "x"))
        # levels never merge: deleting the item's own falls back to the longest prefix
        self.assertEqual(self.srv.json("DELETE", policy_path(base + "-a-1"), headers=ADMIN)[0], 204)
        self.assertEqual(item(base + "-a-1")["policy"], {"kinds": ["dislike"], "closed": False,
                                                         "counts": "public"})
        st, _, doc, _ = self.write(self.srv, base + "-a-1", uid("u"), "like")
        self.assertEqual(st, 403)
        self.assertEqual(doc["allowed"], ["dislike"])

    def test_refusals_change_nothing_and_are_not_stored(self):
        i, u = uid("c"), uid("u")
        self.assertOk(self.write(self.srv, i, u, "dislike"))
        self.put(self.srv, i, {"kinds": ["like"]})
        # adding a kind outside kinds: 403 with allowed, and nothing changes
        doc = self.assertProblem(self.write(self.srv, i, u + "2", "dislike"), 403, "reaction-not-allowed")
        self.assertEqual(doc["allowed"], ["like"])
        self.assertProblem(self.srv.json("PUT", "/v1/items/%s/dislike" % i, user=u + "2"), 403,
                           "reaction-not-allowed")
        self.assertEqual(self.srv.reaction(i, u + "2"), {"item": i, "reaction": "none", "version": 0})
        # switching to a disallowed kind is adding it; a held disallowed kind may stay and be cleared
        self.assertOk(self.write(self.srv, i, u, "dislike"))  # no change: nothing added
        self.assertOk(self.write(self.srv, i, u, "like"))
        self.assertProblem(self.write(self.srv, i, u, "dislike"), 403, "reaction-not-allowed")
        self.assertEqual(self.srv.reaction(i, u)["reaction"], "like")
        st, _, doc, _ = self.srv.json("DELETE", "/v1/items/%s/reaction" % i, user=u)
        self.assertEqual((st, doc["reaction"]), (200, "none"))
        # closed: every write refused, even one that changes nothing
        self.assertOk(put_policy(self.srv, i, {"closed": True}))
        self.assertProblem(self.srv.json("DELETE", "/v1/items/%s/reaction" % i, user=u), 403, "item-closed")
        self.assertProblem(self.write(self.srv, i, u, "like"), 403, "item-closed")
        self.assertProblem(self.srv.json("POST", "/v1/items/%s/reaction:toggle" % i, {"reaction": "like"},
                                         user=u, headers={"Idempotency-Key": uid("k")}), 403, "item-closed")
        # a refused write is not stored under its Idempotency-Key: once open, the same key applies
        key = uid("k")
        self.assertProblem(self.write(self.srv, i, u, "like", headers={"Idempotency-Key": key}), 403,
                           "item-closed")
        self.assertOk(put_policy(self.srv, i, {}))
        st, hdrs, doc, _ = self.write(self.srv, i, u, "like", headers={"Idempotency-Key": key})
        self.assertEqual((st, doc["changed"], hdrs.get("idempotent-replayed")), (200, True, None))
        self.assertEqual(self.srv.wait_counts(i, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})

    def test_order_of_checks(self):
        i, u, key = uid("o"), uid("u"), uid("k")
        first = self.write(self.srv, i, u, "like", headers={"Idempotency-Key": key})
        self.assertOk(first)
        self.put(self.srv, i, {"closed": True})
        # 1. a stored key replays its answer, byte for byte, though the item is closed now
        st, hdrs, _, raw = self.write(self.srv, i, u, "like", headers={"Idempotency-Key": key})
        self.assertEqual((st, raw, hdrs.get("idempotent-replayed")), (200, first[3], "true"))
        # 2. then If-Match: 412 before the policy
        doc = self.assertProblem(self.write(self.srv, i, u, "dislike", headers={"If-Match": '"7"'}), 412,
                                 "version-mismatch")
        self.assertEqual((doc["reaction"], doc["version"]), ("like", 1))
        # 3. then the policy, also for a write whose If-Match holds
        self.assertProblem(self.write(self.srv, i, u, "dislike", headers={"If-Match": '"1"'}), 403, "item-closed")
        # item-closed comes before reaction-not-allowed
        self.assertOk(put_policy(self.srv, i, {"closed": True, "kinds": ["like"]}))
        self.assertProblem(self.write(self.srv, i, u, "dislike"), 403, "item-closed")
        self.assertEqual(self.srv.reaction(i, u)["version"], 1)

    def test_hidden_counts_on_read_paths(self):
        i, other, u = uid("h"), uid("h"), uid("u")
        self.assertOk(self.write(self.srv, i, u, "like"))
        self.assertOk(self.write(self.srv, other, u, "like"))
        self.assertEqual(self.srv.wait_counts(i, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
        self.put(self.srv, i, {"counts": "hidden"})
        pol = {"kinds": ["like", "dislike"], "closed": False, "counts": "hidden"}
        # anonymous, a user (their own reaction still shown), an admin
        self.assertEqual(self.assertOk(self.srv.item(i)), {"item": i, "counts": None, "policy": pol})
        self.assertEqual(self.assertOk(self.srv.item(i, user=u)),
                         {"item": i, "counts": None, "policy": pol, "viewer": {"reaction": "like", "version": 1}})
        self.assertEqual(self.assertOk(self.srv.item(i, headers=ADMIN))["counts"], {"like": 1, "dislike": 0})
        batch = self.assertOk(self.srv.json("GET", "/v1/items?ids=%s,%s" % (i, other)))["items"]
        self.assertEqual([b["counts"] for b in batch], [None, {"like": 1, "dislike": 0}])
        # who reacted: admins only, whatever --who-reacted says
        self.assertProblem(self.srv.json("GET", "/v1/items/%s/reactions" % i), 403, "forbidden")
        self.assertProblem(self.srv.json("GET", "/v1/items/%s/reactions" % i, user=u), 403, "forbidden")
        self.assertOk(self.srv.json("GET", "/v1/items/%s/reactions" % i, headers=ADMIN))
        self.assertOk(self.srv.json("GET", "/v1/items/%s/reactions" % other))
        # a write answer to the user: their own reaction, as ever
        doc = self.assertOk(self.write(self.srv, i, u, "dislike"))
        self.assertEqual(doc["reaction"], "dislike")
        self.assertIsNone(doc["counts"])  # write answers hide them too

    def test_trending_leaves_hidden_items_out(self):
        with Server(args=ARGS) as s:
            a, b = uid("ta"), uid("tb")
            for n in range(3):
                self.assertOk(self.write(s, a, uid("u"), "like"))
            self.assertOk(self.write(s, b, uid("u"), "like"))
            self.assertOk(put_policy(s, a, {"counts": "hidden"}))
            deadline = time.monotonic() + 5 * SLOW
            while True:
                admin = self.assertOk(s.json("GET", "/v1/trending?window=1m", headers=ADMIN))
                if len(admin["items"]) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual([x["item"] for x in admin["items"]], [a, b])
            public = self.assertOk(s.json("GET", "/v1/trending?window=1m&limit=1"))
            self.assertEqual([x["item"] for x in public["items"]], [b])
            self.assertOk(put_policy(s, a, {}))
            public = self.assertOk(s.json("GET", "/v1/trending?window=1m&limit=1"))
            self.assertEqual([x["item"] for x in public["items"]], [a])

    def test_live_stream_switches_to_null_and_back(self):
        i, u = uid("lv"), uid("u")
        self.assertOk(self.write(self.srv, i, u, "like"))
        sock = socket.create_connection((self.srv.host, self.srv.port), timeout=10)
        self.addCleanup(sock.close)
        sock.sendall(("GET /v1/live?ids=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % i).encode())
        buf = b""

        def wait_data(pred, timeout=5.0):
            nonlocal buf
            deadline = time.monotonic() + timeout * SLOW
            while time.monotonic() < deadline:
                for line in buf.split(b"\n"):
                    if line.startswith(b"data: "):
                        doc = json.loads(line[6:])
                        if pred(doc):
                            buf = buf[buf.index(line) + len(line):]
                            return doc
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    break
                if not chunk:
                    break
                buf += chunk
            self.fail("no such event; got %r" % buf[-500:])

        wait_data(lambda d: d["counts"] is not None and d["counts"]["like"] >= 1)
        self.put(self.srv, i, {"counts": "hidden"})
        doc = wait_data(lambda d: d["counts"] is None, timeout=2.0)
        self.assertEqual(doc["policy"]["counts"], "hidden")
        self.assertOk(put_policy(self.srv, i, {}))
        doc = wait_data(lambda d: d["counts"] is not None, timeout=2.0)
        self.assertEqual(doc["counts"]["like"], 1)

    def test_import_ignores_policies(self):
        i = uid("im")
        self.put(self.srv, i, {"closed": True})
        body = "\n".join(json.dumps({"item": i, "user": uid("u"), "reaction": "like"}) for _ in range(3)) + "\n"
        st, _, doc, raw = self.srv.json("POST", "/v1/admin/import", body,
                                        headers=dict(ADMIN, **{"Content-Type": "application/x-ndjson"}))
        self.assertEqual((st, doc["applied"]), (200, 3), raw)
        self.assertEqual(self.srv.wait_counts(i, {"like": 3, "dislike": 0}), {"like": 3, "dislike": 0})

    def test_metrics_and_log(self):
        i = uid("m")
        before = metric_labelled(self.srv, "tally_policy_refusals_total", 'code="item-closed"')
        changes = metric_labelled(self.srv, "tally_policy_changes_total", "") or 0
        self.put(self.srv, i, {"closed": True})
        self.assertProblem(self.write(self.srv, i, uid("u"), "like"), 403, "item-closed")
        self.assertEqual(metric_labelled(self.srv, "tally_policy_refusals_total", 'code="item-closed"'), before + 1)
        st, _, body = self.srv.request("GET", "/metrics")
        line = [x for x in body.decode().split("\n") if x.startswith("tally_policy_changes_total ")][0]
        self.assertGreater(float(line.split()[1]), changes)
        self.assertIn('event=policy action=put target="%s" who="admin"' % i, self.srv.stderr())


class PolicyManyMode(SharedServerTestCase, PolicyCase):
    server_args = MANY

    def test_max_kinds_and_clearing(self):
        i, u = uid("mk"), uid("u")
        put = lambda kinds: self.srv.json("PUT", "/v1/items/%s/reaction" % i,  # noqa: E731
                                          {"reactions": kinds}, user=u)
        self.assertOk(put(["like", "love", "haha"]))
        self.put(self.srv, i, {"max_kinds": 2, "kinds": ["like", "love", "haha"]})
        self.assertEqual(self.assertOk(self.srv.item(i))["policy"],
                         {"kinds": ["like", "love", "haha"], "closed": False, "counts": "public", "max_kinds": 2})
        # already over: adding refused, removing allowed
        doc = self.assertProblem(self.srv.json("PUT", "/v1/items/%s/wow" % i, user=u), 403, "reaction-not-allowed")
        self.assertEqual(doc["allowed"], ["like", "love", "haha"])
        self.assertOk(self.srv.json("DELETE", "/v1/items/%s/haha" % i, user=u))
        doc = self.assertProblem(self.srv.json("PUT", "/v1/items/%s/haha" % i, user=u), 403, "too-many-reactions")
        self.assertEqual(doc["max_kinds"], 2)
        self.assertProblem(put(["haha", "like", "love"]), 403, "too-many-reactions")
        self.assertEqual(self.srv.reaction(i, u)["reactions"], ["like", "love"])
        # a set within the bound that adds a kind
        self.assertOk(put(["haha"]))
        self.assertOk(self.srv.json("POST", "/v1/items/%s/reaction:toggle" % i, {"reaction": "like"}, user=u,
                                    headers={"Idempotency-Key": uid("k")}))
        self.assertProblem(self.srv.json("POST", "/v1/items/%s/reaction:toggle" % i, {"reaction": "love"},
                                         user=u, headers={"Idempotency-Key": uid("k")}), 403, "too-many-reactions")
        self.assertOk(put([]))

    def test_hidden_reactors_null(self):
        i, u = uid("hr"), uid("u")
        self.assertOk(self.srv.json("PUT", "/v1/items/%s/love" % i, user=u))
        self.put(self.srv, i, {"counts": "hidden"})
        doc = self.assertOk(self.srv.item(i, user=u))
        self.assertEqual((doc["counts"], doc["reactors"], doc["viewer"]["reactions"]), (None, None, ["love"]))
        deadline = time.monotonic() + 3 * SLOW
        while True:
            doc = self.assertOk(self.srv.item(i, headers=ADMIN))
            if doc["reactors"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((doc["reactors"], doc["counts"]["love"]), (1, 1))


@unittest.skipIf(SLOW > 1, "10000 admin writes (~45 s under the sanitizer): the release stages run it; the "
                           "policies' code is the same as in the other tests here")
class PolicyLimitAndRestart(PolicyCase):

    def test_ten_thousand_then_too_many_policies_and_restart(self):
        with Server(args=ARGS) as s:
            prefix = uid("lim")
            clients = [s.client() for _ in range(8)]

            def worker(k):
                c = clients[k]
                for n in range(k, 10000, 8):
                    st, _, _, raw = c.json("PUT", policy_path("%s-%d" % (prefix, n)), {"closed": n == 0},
                                           headers=ADMIN)
                    assert st == 200, (st, raw)
            self.assertEqual(run_threads([lambda k=k: worker(k) for k in range(8)], timeout=600), [])
            self.assertProblem(put_policy(s, prefix + "-x", {}), 400, "too-many-policies")
            # replacing one that exists is not one more; deleting one makes room
            self.assertOk(put_policy(s, prefix + "-1", {"closed": True}))
            self.assertEqual(s.json("DELETE", policy_path(prefix + "-2"), headers=ADMIN)[0], 204)
            self.assertOk(put_policy(s, prefix + "-x", {"kinds": ["like"]}))
            self.assertProblem(put_policy(s, prefix + "-y", {}), 400, "too-many-policies")
            listed = self.assertOk(s.json("GET", "/v1/admin/policies", headers=ADMIN))["policies"]
            self.assertEqual(len(listed), 10000)
            # kept across a restart
            s.stop()
            s.start()
            self.assertProblem(self.write(s, prefix + "-0", uid("u"), "like"), 403, "item-closed")
            self.assertProblem(self.write(s, prefix + "-x", uid("u"), "dislike"), 403, "reaction-not-allowed")
            self.assertOk(self.write(s, prefix + "-2", uid("u"), "like"))
            self.assertEqual(len(self.assertOk(s.json("GET", "/v1/admin/policies", headers=ADMIN))["policies"]),
                             10000)
            self.assertProblem(put_policy(s, prefix + "-y", {}), 400, "too-many-policies")


@pg_only()
class PolicyTwoNodes(PolicyCase):

    def test_other_node_within_a_second(self):
        with Server(args=ARGS) as a:
            b = a.node()
            try:
                for n in range(3):
                    i, u = uid("n"), uid("u")
                    self.assertOk(self.write(b, i, u, "like"))
                    self.assertOk(put_policy(a, i, {"closed": True, "counts": "hidden"}))
                    t0 = time.monotonic()
                    # at once on the answering node
                    self.assertProblem(self.write(a, i, u, "dislike"), 403, "item-closed")
                    while True:
                        st = self.write(b, i, u, "dislike")[0]
                        if st == 403 or time.monotonic() - t0 > 3:
                            break
                        time.sleep(0.02)
                    took = time.monotonic() - t0
                    self.assertEqual(st, 403)
                    self.assertLess(took, 1.0 * SLOW, "node B applied the policy after %.2fs" % took)
                    self.assertIsNone(self.assertOk(b.item(i))["counts"])
                    # the write B took before it knew is the only one
                    self.assertEqual(self.assertOk(b.item(i, user=u))["viewer"]["version"],
                                     self.assertOk(a.item(i, user=u))["viewer"]["version"])
                    # and the other way: a change on B reaches A within a second
                    self.assertOk(put_policy(b, i, {}))
                    t0 = time.monotonic()
                    while self.write(a, i, u, "like")[0] != 200 and time.monotonic() - t0 < 3:
                        time.sleep(0.02)
                    took = time.monotonic() - t0
                    self.assertLess(took, 1.0 * SLOW, "node A applied the policy after %.2fs" % took)
            finally:
                b.stop()
                b.close()


if __name__ == "__main__":
    unittest.main()
