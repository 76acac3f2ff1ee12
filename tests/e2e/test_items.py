"""Reads and writes of reactions, per docs/api.md (Read, Write): one decision per click, exact counts."""

import json
import shutil
import tempfile
import time
import unittest

from harness import (Server, ServerExited, SharedServerTestCase, TallyTestCase, embedded_only,
                     metric, run_tallyd, uid)

ZERO = {"like": 0, "dislike": 0}


class ReadTest(SharedServerTestCase):

    def test_unknown_item_has_zero_counts_and_no_viewer(self):
        item = uid("item")
        resp = self.srv.item(item)
        doc = self.assertOk(resp)
        self.assertEqual(doc, {"item": item, "counts": ZERO})
        self.assertEqual(list(doc["counts"]), ["like", "dislike"], "counts in --reactions order")
        self.assertNotIn("viewer", doc)

    def test_viewer_present_with_user(self):
        item, user = uid("item"), uid("user")
        doc = self.assertOk(self.srv.item(item, user=user))
        self.assertEqual(doc, {"item": item, "counts": ZERO,
                               "viewer": {"reaction": "none", "version": 0}})

    def test_get_reaction_without_row(self):
        item, user = uid("item"), uid("user")
        resp = self.srv.json("GET", "/v1/items/%s/reaction" % item, user=user)
        doc = self.assertOk(resp)
        self.assertEqual(doc, {"item": item, "reaction": "none", "version": 0})
        self.assertEqual(resp[1].get("etag"), '"0"')

    def test_item_id_boundaries_accepted(self):
        for item in ("a", "x" * 128, "A-Za-z0-9._:~-", "...", "a..b", "~", "-"):
            with self.subTest(item=item):
                doc = self.assertOk(self.srv.item(item))
                self.assertEqual(doc["item"], item)
                self.assertEqual(doc["counts"], ZERO)

    def test_seed_table_like_dislike_clear(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "like", 2, True)
        self.assertCounts(s, item, {"like": 0, "dislike": 1})
        resp = s.json("DELETE", "/v1/items/%s/reaction" % item, user=user)
        self.assertWrite(resp, item, "none", "dislike", 3, True)
        self.assertCounts(s, item, ZERO)
        doc = self.assertOk(s.item(item, user=user))
        self.assertEqual(doc["viewer"], {"reaction": "none", "version": 3})
        # the row stays: the version keeps rising after an undo
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 4, True)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})

    def test_counts_sum_over_users(self):
        s, item = self.srv, uid("item")
        users = [uid("user") for _ in range(5)]
        for i, u in enumerate(users):
            self.assertWrite(s.put(item, u, "like" if i < 3 else "dislike"),
                             item, "like" if i < 3 else "dislike", "none", 1, True)
        self.assertCounts(s, item, {"like": 3, "dislike": 2})
        # a user's reaction on another item does not leak into this one
        self.assertCounts(s, uid("item"), ZERO, timeout=0)

    def test_same_reaction_again_changes_nothing(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
        self.assertWrite(s.put(item, user, "like"), item, "like", "like", 1, False)
        self.assertWrite(s.json("PUT", "/v1/items/%s/like" % item, user=user),
                         item, "like", "like", 1, False)
        self.assertEqual(s.reaction(item, user), {"item": item, "reaction": "like", "version": 1})
        self.assertCounts(s, item, {"like": 1, "dislike": 0})

    def test_clear_without_row_changes_nothing(self):
        s, item, user = self.srv, uid("item"), uid("user")
        resp = s.json("DELETE", "/v1/items/%s/reaction" % item, user=user)
        self.assertWrite(resp, item, "none", "none", 0, False)
        self.assertWrite(s.put(item, user, "none"), item, "none", "none", 0, False)
        self.assertEqual(s.reaction(item, user)["version"], 0)

    def test_put_none_clears(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "none", 1, True)
        self.assertWrite(s.put(item, user, "none"), item, "none", "dislike", 2, True)
        self.assertWrite(s.put(item, user, "none"), item, "none", "none", 2, False)
        self.assertCounts(s, item, ZERO)

    def test_kind_routes(self):
        s, item, user = self.srv, uid("item"), uid("user")
        path = "/v1/items/%s/" % item
        # DELETE of a kind the user does not have changes nothing (here: no row at all)
        self.assertWrite(s.json("DELETE", path + "like", user=user), item, "none", "none", 0, False)
        self.assertWrite(s.json("PUT", path + "like", user=user), item, "like", "none", 1, True)
        self.assertCounts(s, item, {"like": 1, "dislike": 0})
        # DELETE of the other kind: nothing changes, the like stays
        self.assertWrite(s.json("DELETE", path + "dislike", user=user),
                         item, "like", "like", 1, False)
        self.assertWrite(s.json("PUT", path + "dislike", user=user),
                         item, "dislike", "like", 2, True)
        self.assertWrite(s.json("DELETE", path + "like", user=user),
                         item, "dislike", "dislike", 2, False)
        self.assertCounts(s, item, {"like": 0, "dislike": 1})
        self.assertWrite(s.json("DELETE", path + "dislike", user=user),
                         item, "none", "dislike", 3, True)
        self.assertCounts(s, item, ZERO)
        self.assertEqual(s.reaction(item, user), {"item": item, "reaction": "none", "version": 3})

    def test_kind_route_accepts_and_ignores_no_body(self):
        # PUT /like carries no body; an explicit Content-Length: 0 is fine too
        s, item, user = self.srv, uid("item"), uid("user")
        resp = s.json("PUT", "/v1/items/%s/like" % item, body=b"", user=user)
        self.assertWrite(resp, item, "like", "none", 1, True)

    def test_etag_on_get_reaction_follows_version(self):
        s, item, user = self.srv, uid("item"), uid("user")
        for i, r in enumerate(["like", "dislike", "none", "like"], start=1):
            self.assertWrite(s.put(item, user, r), item, r, ["none", "like", "dislike", "none"][i - 1],
                             i, True)
            resp = s.json("GET", "/v1/items/%s/reaction" % item, user=user)
            self.assertEqual(self.assertOk(resp), {"item": item, "reaction": r, "version": i})
            self.assertEqual(resp[1].get("etag"), '"%d"' % i)

    def test_users_are_independent(self):
        s, item = self.srv, uid("item")
        a, b = uid("user"), uid("user")
        self.assertWrite(s.put(item, a, "like"), item, "like", "none", 1, True)
        self.assertWrite(s.put(item, b, "like"), item, "like", "none", 1, True)
        self.assertWrite(s.put(item, a, "dislike"), item, "dislike", "like", 2, True)
        self.assertEqual(s.reaction(item, b), {"item": item, "reaction": "like", "version": 1})
        self.assertCounts(s, item, {"like": 1, "dislike": 1})
        doc = self.assertOk(s.item(item, user=b))
        self.assertEqual(doc["viewer"], {"reaction": "like", "version": 1})

    # ---- batch read --------------------------------------------------------------------
    def test_batch_in_request_order(self):
        s, user = self.srv, uid("user")
        a, b, c = uid("c"), uid("a"), uid("b")
        self.assertWrite(s.put(b, user, "like"), b, "like", "none", 1, True)
        self.assertWrite(s.put(c, uid("user"), "dislike"), c, "dislike", "none", 1, True)
        self.assertCounts(s, b, {"like": 1, "dislike": 0})
        self.assertCounts(s, c, {"like": 0, "dislike": 1})
        doc = self.assertOk(s.json("GET", "/v1/items?ids=%s,%s,%s" % (a, b, c)))
        self.assertEqual(doc, {"items": [
            {"item": a, "counts": ZERO},
            {"item": b, "counts": {"like": 1, "dislike": 0}},
            {"item": c, "counts": {"like": 0, "dislike": 1}}]})
        doc = self.assertOk(s.json("GET", "/v1/items?ids=%s,%s,%s" % (c, a, b), user=user))
        self.assertEqual(doc, {"items": [
            {"item": c, "counts": {"like": 0, "dislike": 1},
             "viewer": {"reaction": "none", "version": 0}},
            {"item": a, "counts": ZERO, "viewer": {"reaction": "none", "version": 0}},
            {"item": b, "counts": {"like": 1, "dislike": 0},
             "viewer": {"reaction": "like", "version": 1}}]})

    def test_batch_single_id(self):
        item = uid("item")
        doc = self.assertOk(self.srv.json("GET", "/v1/items?ids=" + item))
        self.assertEqual(doc, {"items": [{"item": item, "counts": ZERO}]})

    def test_batch_100_ids_ok(self):
        ids = ["b%d" % i for i in range(100)]
        doc = self.assertOk(self.srv.json("GET", "/v1/items?ids=" + ",".join(ids)))
        self.assertEqual([x["item"] for x in doc["items"]], ids)

    def test_batch_101_ids_too_many(self):
        ids = ["b%d" % i for i in range(101)]
        self.assertProblem(self.srv.json("GET", "/v1/items?ids=" + ",".join(ids)),
                           400, "too-many-ids")

    def test_batch_missing_ids(self):
        self.assertProblem(self.srv.json("GET", "/v1/items"), 400, "invalid-parameter")
        self.assertProblem(self.srv.json("GET", "/v1/items?idz=a"), 400, "invalid-parameter")

    def test_batch_invalid_entries(self):
        for q in ("a,,b", "a,b%20c", "a,..", "a," + "x" * 129, "a,b!c"):
            with self.subTest(ids=q):
                self.assertProblem(self.srv.json("GET", "/v1/items?ids=" + q),
                                   400, "invalid-item-id")


class CustomKindsTest(TallyTestCase):

    @embedded_only("restarts with a kind added; on PostgreSQL the kinds are a setting the "
                   "nodes share, and a node with others refuses to start (docs/api.md § Running on "
                   "PostgreSQL; test_pg_nodes)")
    def test_custom_kinds_order_and_restart(self):
        with Server(args=["--reactions", "like,love,haha"]) as s:
            item, u1, u2, u3 = uid("item"), uid("user"), uid("user"), uid("user")
            doc = self.assertOk(s.item(item))
            self.assertEqual(list(doc["counts"].items()), [("like", 0), ("love", 0), ("haha", 0)])
            self.assertWrite(s.put(item, u1, "love"), item, "love", "none", 1, True)
            self.assertWrite(s.json("PUT", "/v1/items/%s/haha" % item, user=u2),
                             item, "haha", "none", 1, True)
            self.assertWrite(s.put(item, u3, "love"), item, "love", "none", 1, True)
            self.assertProblem(s.put(item, u1, "dislike"), 400, "invalid-reaction",
                               "dislike is not configured")
            self.assertProblem(s.json("PUT", "/v1/items/%s/dislike" % item, user=u1),
                               400, "invalid-reaction")
            self.assertCounts(s, item, {"like": 0, "love": 2, "haha": 1})
            s.stop()

            # a kind removed: refuse to start
            rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + s.store_args() +
                                      ["--reactions", "like,love"])
            self.assertNotEqual(rc, 0, "started without a configured kind that has data\n" + err)
            self.assertNotEqual(rc, "listening", "started without kind haha")
            self.assertIsInstance(rc, int, "no exit (%r)" % rc)
            self.assertTrue(err.strip(), "no message on stderr")

            # a kind added: fine, old counts kept, new kind listed last
            s.start(["--reactions", "like,love,haha,wow"])
            doc = self.assertOk(s.item(item, user=u1))
            self.assertEqual(list(doc["counts"].items()),
                             [("like", 0), ("love", 2), ("haha", 1), ("wow", 0)])
            self.assertEqual(doc["viewer"], {"reaction": "love", "version": 1})
            self.assertWrite(s.put(item, u1, "wow"), item, "wow", "love", 2, True)
            self.assertCounts(s, item, {"like": 0, "love": 1, "haha": 1, "wow": 1})

    def test_default_kinds_are_like_dislike(self):
        with Server() as s:
            doc = self.assertOk(s.item("x"))
            self.assertEqual(list(doc["counts"].items()), [("like", 0), ("dislike", 0)])

    def test_kind_removed_refuses_even_without_data(self):
        # kinds are fixed for a data directory once it was opened with them
        with Server(args=["--reactions", "like,love,haha"]) as s:
            s.stop()
            rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + s.store_args() +
                                      ["--reactions", "like,haha"])
            self.assertIsInstance(rc, int, "did not exit (%r)" % rc)
            self.assertNotEqual(rc, 0)
            self.assertTrue(err.strip(), "no message on stderr")


if __name__ == "__main__":
    unittest.main()


@embedded_only("the row filter (--row-filter) belongs to the embedded store; on PostgreSQL a "
               "per-node filter must not decide reads")
class RowFilterTest(TallyTestCase):
    """The store's row filter (--row-filter): a missing row is answered from memory, an existing
    one always from the B-tree. Reads must be the same with it, without it, and while it fills."""

    def expect(self, model, viewers):
        """viewers: (item, user) pairs; the viewer member of each, from one batch read per user."""
        for item, user in viewers:
            kind, version = model.get((item, user), ("none", 0))
            doc = self.assertOk(self.srv.item(item, user=user))
            self.assertEqual(doc["viewer"], {"reaction": kind, "version": version}, (item, user))

    def write(self, model, item, user, kind):
        resp = self.srv.put(item, user, kind)
        doc = self.assertOk(resp)
        old = model.get((item, user), ("none", 0))
        if kind != old[0]:
            model[(item, user)] = (kind, old[1] + 1)
        self.assertEqual(doc["version"], model.get((item, user), old)[1])

    def test_reads_same_with_filter_filling_and_off(self):
        self.srv = Server()
        try:
            model = {}
            items = [uid("rf") for _ in range(20)]
            users = [uid("ru") for _ in range(15)]
            for n in range(150):  # rows at like, dislike, and back at none (still rows)
                item, user = items[n % 20], users[(n * 7) % 15]
                self.write(model, item, user, ("like", "dislike", "none")[n % 3])
            pairs = [(i, u) for i in items for u in users]  # 300 pairs: 150 with rows, the rest none
            self.expect(model, pairs)
            # written after the filter is in use: read back at once
            self.assertEqual(metric(self.srv, "tally_row_filter_ready"), 1.0)
            self.write(model, items[0], "fresh-" + users[0], "like")
            self.expect(model, [(items[0], "fresh-" + users[0])])
            # restart: the filter refills from the rows while reads go on
            self.srv.restart()
            self.expect(model, pairs)
            deadline = time.monotonic() + 10
            while metric(self.srv, "tally_row_filter_ready") != 1.0 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(metric(self.srv, "tally_row_filter_ready"), 1.0)
            self.expect(model, pairs)
            # without the filter: the same answers
            self.srv.restart(["--row-filter", "0"])
            self.assertEqual(metric(self.srv, "tally_row_filter_ready"), 0.0)
            self.expect(model, pairs)
            self.srv.stop()
        finally:
            self.srv.close()

    def test_bad_row_filter_flag(self):
        data = tempfile.mkdtemp(prefix="tally-e2e-rf-")
        try:
            for bad in ("x", "-1", "65G", "1Q"):
                with self.subTest(value=bad):
                    rc, _, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", data, "--row-filter", bad])
                    self.assertEqual(rc, 2, err)
                    self.assertIn("--row-filter", err)
        finally:
            shutil.rmtree(data, ignore_errors=True)
