"""Cacheable public reads and GET /v1/viewer: Cache-Control, weak ETags that follow the counts,
304 to If-None-Match, Vary, private answers with a viewer; and a real caching nginx
(proxy_cache) in front of tallyd serving a hot item's counts from its cache."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import tempfile
import time
import unittest

from harness import (PG, SLOW, Server, ServerExited, SharedServerTestCase, TallyTestCase,
                     child_env, pg_only, run_tallyd, uid)
from nginx_front import HAVE_NGINX, NO_NGINX, Nginx

ZERO = {"like": 0, "dislike": 0}
VARY = "Authorization, X-User-Id"
SECRET = "cache-test-secret-0123456789abcdefghij"


def weak_etag_of(body):
    """What the contract says the tag is: a function of the body (here: tally's recipe, 128 bits
    of SHA-256 as base64url), so that it can be checked from the outside."""
    digest = hashlib.sha256(body).digest()[:16]
    return 'W/"%s"' % base64.urlsafe_b64encode(digest).decode().rstrip("=")


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def token(user):
    h = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    p = b64url(json.dumps({"sub": user, "exp": int(time.time()) + 3600}).encode())
    sig = hmac.new(SECRET.encode(), (h + "." + p).encode(), hashlib.sha256).digest()
    return "Bearer " + h + "." + p + "." + b64url(sig)


class CacheCase(TallyTestCase):

    def get(self, srv, path, headers=None):
        return srv.request("GET", path, headers=headers or {})

    def assertPublic(self, resp, max_age=1):
        st, hdrs, body = resp
        self.assertEqual(st, 200, body[:300])
        self.assertEqual(hdrs.get("cache-control"),
                         "public, max-age=%d" % max_age if max_age else "no-cache")
        self.assertEqual(hdrs.get("etag"), weak_etag_of(body))
        self.assertEqual(hdrs.get("vary"), VARY)
        return hdrs["etag"]

    def assertNotModified(self, resp, etag, cache_control):
        st, hdrs, body = resp
        self.assertEqual(st, 304, body[:300])
        self.assertEqual(body, b"")
        self.assertNotIn("content-length", hdrs)
        self.assertEqual(hdrs.get("etag"), etag)
        self.assertEqual(hdrs.get("cache-control"), cache_control)
        self.assertEqual(hdrs.get("vary"), VARY)

    def wait_etag_change(self, srv, path, etag, timeout=3.0):
        """The new ETag of path once it differs from etag (counts are folded a moment after the
        write's answer; on PostgreSQL up to ~50 ms)."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            st, hdrs, body = self.get(srv, path)
            self.assertEqual(st, 200)
            if hdrs.get("etag") != etag or time.monotonic() > deadline:
                return hdrs.get("etag"), body
            time.sleep(0.02)


class PublicReadTest(SharedServerTestCase, CacheCase):

    def test_item_read_without_user_is_public_with_a_weak_etag_of_its_body(self):
        item = uid("c")
        resp = self.get(self.srv, "/v1/items/%s" % item)
        etag = self.assertPublic(resp)
        self.assertRegex(etag, r'^W/"[A-Za-z0-9_-]{22}"$')
        self.assertEqual(json.loads(resp[2]), {"item": item, "counts": ZERO})
        # the same answer again: the same tag
        self.assertEqual(self.get(self.srv, "/v1/items/%s" % item)[1].get("etag"), etag)

    def test_batch_read_without_user_is_public(self):
        a, b = uid("c"), uid("c")
        resp = self.get(self.srv, "/v1/items?ids=%s,%s" % (a, b))
        etag = self.assertPublic(resp)
        # another order is another body, and another tag
        other = self.get(self.srv, "/v1/items?ids=%s,%s" % (b, a))
        self.assertPublic(other)
        self.assertNotEqual(other[1]["etag"], etag)

    def test_if_none_match_gives_304_without_a_body(self):
        path = "/v1/items?ids=%s,%s" % (uid("c"), uid("c"))
        etag = self.assertPublic(self.get(self.srv, path))
        cases = [etag, etag[2:], '"zzz", ' + etag, ' %s ,"x"' % etag, "*"]
        for inm in cases:
            with self.subTest(inm=inm):
                resp = self.get(self.srv, path, {"If-None-Match": inm})
                self.assertNotModified(resp, etag, "public, max-age=1")
        for inm in ['W/"nope"', etag.replace("W/", "w/"), etag[:-2] + '"', "garbage"]:
            with self.subTest(inm=inm):
                self.assertPublic(self.get(self.srv, path, {"If-None-Match": inm}))
        one = "/v1/items/%s" % uid("c")
        etag = self.assertPublic(self.get(self.srv, one))
        self.assertNotModified(self.get(self.srv, one, {"If-None-Match": etag}), etag,
                               "public, max-age=1")
        # HEAD revalidates too
        st, hdrs, body = self.srv.request("HEAD", one, headers={"If-None-Match": etag})
        self.assertEqual((st, body, hdrs.get("etag")), (304, b"", etag))
        # the list on two header lines is one list (RFC 9110 §5.3)
        st, fields, body = self.srv.exchange("GET", one, {"If-None-Match": '"zzz"', "if-none-match": etag})
        self.assertEqual((st, body), (304, b""), fields)
        st, fields, body = self.srv.exchange("GET", one, {"If-None-Match": '"zzz"', "if-none-match": '"yyy"'})
        self.assertEqual(st, 200, fields)

    def test_etag_changes_when_a_write_is_folded(self):
        item, path = uid("c"), None
        path = "/v1/items?ids=%s,%s" % (item, uid("c"))
        old = self.assertPublic(self.get(self.srv, path))
        self.assertOk(self.srv.put(item, uid("u"), "like"))
        new, body = self.wait_etag_change(self.srv, path, old)
        self.assertNotEqual(new, old, "the ETag did not change after a write")
        self.assertEqual(json.loads(body)["items"][0]["counts"], {"like": 1, "dislike": 0})
        self.assertEqual(new, weak_etag_of(body))
        # the old tag no longer revalidates; the new one does
        self.assertPublic(self.get(self.srv, path, {"If-None-Match": old}))
        self.assertNotModified(self.get(self.srv, path, {"If-None-Match": new}), new,
                               "public, max-age=1")
        # a change of the single item's read too
        one = "/v1/items/%s" % item
        before = self.assertPublic(self.get(self.srv, one))
        self.assertOk(self.srv.put(item, uid("u"), "dislike"))
        after, body = self.wait_etag_change(self.srv, one, before)
        self.assertNotEqual(after, before)
        self.assertEqual(json.loads(body)["counts"], {"like": 1, "dislike": 1})

    def test_reads_with_a_user_are_private_and_keep_vary(self):
        item, user = uid("c"), uid("u")
        for path in ("/v1/items/%s" % item, "/v1/items?ids=%s" % item):
            with self.subTest(path=path):
                st, hdrs, body = self.get(self.srv, path, {"X-User-Id": user})
                self.assertEqual(st, 200)
                self.assertEqual(hdrs.get("cache-control"), "private, no-store")
                self.assertEqual(hdrs.get("vary"), VARY)
                self.assertIn(b'"viewer"', body)
                self.assertEqual(hdrs.get("etag"), weak_etag_of(body))
                public = self.get(self.srv, path)[1]["etag"]
                self.assertNotEqual(hdrs["etag"], public, "a viewer's answer shares the public tag")

    def test_errors_of_the_item_reads_carry_vary(self):
        for path in ("/v1/items/bad%20id", "/v1/items?ids=a,,b", "/v1/items",
                     "/v1/viewer?ids=a", "/v1/viewer?ids=bad%20id"):
            with self.subTest(path=path):
                st, hdrs, _ = self.get(self.srv, path)
                self.assertIn(st, (400, 401))
                self.assertEqual(hdrs.get("vary"), VARY)
                self.assertNotIn("cache-control", hdrs)
                self.assertNotIn("etag", hdrs)

    def test_own_reaction_is_private_with_its_version_tag(self):
        """GET …/reaction is the user's own row: private, never stored, Vary kept; its ETag stays
        the row's version (the one If-Match takes)."""
        item, user = uid("c"), uid("u")
        st, hdrs, _ = self.get(self.srv, "/v1/items/%s/reaction" % item, {"X-User-Id": user})
        self.assertEqual((st, hdrs.get("etag")), (200, '"0"'))
        self.assertEqual(hdrs.get("cache-control"), "private, no-store")
        self.assertEqual(hdrs.get("vary"), VARY)


class ViewerTest(SharedServerTestCase, CacheCase):

    def viewer(self, ids, user=None, headers=None):
        h = dict(headers or {})
        if user:
            h["X-User-Id"] = user
        return self.srv.json("GET", "/v1/viewer?ids=" + ids, headers=h)

    def test_the_viewers_part_in_request_order(self):
        a, b, c, user = uid("v"), uid("v"), uid("v"), uid("u")
        self.assertOk(self.srv.put(a, user, "like"))
        self.assertOk(self.srv.put(c, user, "dislike"))
        self.assertOk(self.srv.put(c, user, "like"))
        self.assertOk(self.srv.put(b, uid("other"), "like"))  # someone else's row is not shown
        resp = self.viewer("%s,%s,%s,%s" % (c, b, a, c), user)
        doc = self.assertOk(resp)
        self.assertEqual(doc, {"items": [
            {"item": c, "reaction": "like", "version": 2},
            {"item": b, "reaction": "none", "version": 0},
            {"item": a, "reaction": "like", "version": 1},
            {"item": c, "reaction": "like", "version": 2},
        ]})
        st, hdrs = resp[0], resp[1]
        self.assertEqual(hdrs.get("cache-control"), "private, no-store")
        self.assertEqual(hdrs.get("vary"), VARY)
        self.assertEqual(hdrs.get("etag"), weak_etag_of(resp[3]))
        # the viewer's part never lags: read back at once after a write
        self.assertOk(self.srv.put(b, user, "dislike"))
        self.assertEqual(self.assertOk(self.viewer(b, user))["items"],
                         [{"item": b, "reaction": "dislike", "version": 1}])
        # each entry equals GET …/reaction
        for item in (a, b, c):
            one = self.assertOk(self.srv.json("GET", "/v1/items/%s/reaction" % item, user=user))
            self.assertEqual(self.assertOk(self.viewer(item, user))["items"], [one])

    def test_needs_a_user(self):
        resp = self.viewer(uid("v"))
        self.assertProblem(resp, 401, "unauthenticated")
        self.assertRegex(resp[1].get("www-authenticate", ""), r"^Bearer")
        self.assertProblem(self.viewer(uid("v"), "bad user"), 400, "invalid-user-id")

    def test_the_ids_rules(self):
        user = uid("u")
        self.assertProblem(self.srv.json("GET", "/v1/viewer", user=user), 400, "invalid-parameter")
        self.assertProblem(self.viewer("a,,b", user), 400, "invalid-item-id")
        self.assertProblem(self.viewer("a,b%20c", user), 400, "invalid-item-id")
        self.assertProblem(self.viewer("..", user), 400, "invalid-item-id")
        ids = ",".join("i%d" % i for i in range(100))
        self.assertEqual(len(self.assertOk(self.viewer(ids, user))["items"]), 100)
        self.assertProblem(self.viewer(ids + ",i100", user), 400, "too-many-ids")
        st, hdrs, _ = self.srv.request("POST", "/v1/viewer?ids=a", headers={"X-User-Id": user})
        self.assertEqual(st, 405)
        self.assertEqual(hdrs.get("allow"), "GET, HEAD")

    def test_if_none_match_on_the_viewers_part(self):
        item, user = uid("v"), uid("u")
        resp = self.viewer(item, user)
        etag = resp[1]["etag"]
        st, hdrs, body = self.srv.request("GET", "/v1/viewer?ids=" + item,
                                          headers={"X-User-Id": user, "If-None-Match": etag})
        self.assertEqual((st, body, hdrs.get("cache-control")), (304, b"", "private, no-store"))
        self.assertOk(self.srv.put(item, user, "like"))
        st, hdrs, body = self.srv.request("GET", "/v1/viewer?ids=" + item,
                                          headers={"X-User-Id": user, "If-None-Match": etag})
        self.assertEqual(st, 200)
        self.assertNotEqual(hdrs.get("etag"), etag)


class CacheFlagTest(CacheCase):

    def test_public_max_age_flag(self):
        for value, want in (("30s", 30), ("5m", 300), ("0", 0)):
            with self.subTest(value=value):
                with Server(args=["--public-max-age", value]) as srv:
                    path = "/v1/items/%s" % uid("c")
                    etag = self.assertPublic(self.get(srv, path), want)
                    self.assertNotModified(self.get(srv, path, {"If-None-Match": etag}), etag,
                                           "public, max-age=%d" % want if want else "no-cache")

    def test_bad_public_max_age_exits_2(self):
        for value in ("1500ms", "-1", "x", "400d", ""):
            with self.subTest(value=value):
                with self.assertRaises(ServerExited) as ctx:
                    Server(args=["--public-max-age", value])
                self.assertEqual(ctx.exception.returncode, 2)
                self.assertIn("--public-max-age", ctx.exception.stderr)

    def test_vary_names_origin_with_cors(self):
        with Server(args=["--cors-origin", "https://app.example"]) as srv:
            for headers in ({}, {"Origin": "https://app.example"}, {"Origin": "https://else.example"}):
                with self.subTest(headers=headers):
                    st, hdrs, _ = self.get(srv, "/v1/items/%s" % uid("c"), headers)
                    self.assertEqual(st, 200)
                    self.assertEqual(hdrs.get("vary"), VARY + ", Origin")
            # a preflight for a conditional read is allowed
            st, hdrs, _ = srv.request("OPTIONS", "/v1/items?ids=a", headers={
                "Origin": "https://app.example", "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "if-none-match"})
            self.assertEqual(st, 204)
            self.assertIn("If-None-Match", hdrs.get("access-control-allow-headers", ""))

    def test_tokens_public_and_private(self):
        with Server(env=child_env({"TALLY_JWT_SECRET": SECRET})) as srv:
            item = uid("c")
            self.assertPublic(self.get(srv, "/v1/items/%s" % item))
            st, hdrs, body = self.get(srv, "/v1/items/%s" % item, {"Authorization": token("t1")})
            self.assertEqual((st, hdrs.get("cache-control")), (200, "private, no-store"))
            self.assertIn(b'"viewer"', body)
            st, hdrs, _ = self.get(srv, "/v1/viewer?ids=" + item)
            self.assertEqual(st, 401)
            self.assertRegex(hdrs.get("www-authenticate", ""), r"^Bearer")
            st, hdrs, _ = self.get(srv, "/v1/viewer?ids=" + item, {"Authorization": "Bearer x.y.z"})
            self.assertEqual(st, 401)
            st, hdrs, body = self.get(srv, "/v1/viewer?ids=" + item, {"Authorization": token("t1")})
            self.assertEqual(st, 200, body)
            self.assertEqual(json.loads(body),
                             {"items": [{"item": item, "reaction": "none", "version": 0}]})
            self.assertEqual(hdrs.get("cache-control"), "private, no-store")

    def test_etag_is_the_same_after_a_restart(self):
        with Server() as srv:
            item = uid("c")
            self.assertOk(srv.put(item, uid("u"), "like"))
            self.assertEqual(srv.wait_counts(item, {"like": 1, "dislike": 0}), {"like": 1, "dislike": 0})
            before = self.assertPublic(self.get(srv, "/v1/items/%s" % item))
            srv.restart()
            self.assertNotModified(self.get(srv, "/v1/items/%s" % item, {"If-None-Match": before}),
                                   before, "public, max-age=1")

    @pg_only("two nodes on one database")
    def test_every_node_gives_the_same_etag(self):
        with Server() as a:
            b = a.node()
            try:
                item = uid("c")
                self.assertOk(a.put(item, uid("u"), "like"))
                want = {"like": 1, "dislike": 0}
                self.assertEqual(a.wait_counts(item, want), want)
                self.assertEqual(b.wait_counts(item, want), want)
                path = "/v1/items?ids=%s,%s" % (item, uid("c"))
                etag = self.assertPublic(self.get(a, path))
                self.assertNotModified(self.get(b, path, {"If-None-Match": etag}), etag,
                                       "public, max-age=1")
            finally:
                b.close()


# The site nginx runs here (docs/operations.md, "Caching the counts").
CACHE_SITE = """
proxy_cache_path %(dir)s/cache keys_zone=tally:1m max_size=16m inactive=10m;
server {
    listen 127.0.0.1:%(port)d;
    location / {
        proxy_pass http://127.0.0.1:%(upstream)d;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache tally;
        proxy_cache_lock on;
        proxy_cache_revalidate on;
        add_header X-Cache-Status $upstream_cache_status always;
    }
}
"""


MAX_AGE = 2


@unittest.skipUnless(HAVE_NGINX, NO_NGINX)
class NginxCacheTest(CacheCase):
    """tallyd behind a real caching nginx: the counts of a hot item come from nginx's cache."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="tally-cache-")
        cls.log = os.path.join(cls.tmp, "access.log")
        cls.srv = Server(args=["--public-max-age", "%ds" % MAX_AGE, "--access-log", cls.log,
                               "--rate-limit", "off"])
        try:
            cls.nginx = Nginx(lambda d, port: CACHE_SITE % {"dir": d, "port": port,
                                                            "upstream": cls.srv.port})
        except BaseException:
            cls.srv.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.nginx.close()
        finally:
            cls.srv.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def hits(self, target):
        """Answers tallyd gave to target (its access log), by status."""
        out = {}
        with open(self.log) as f:
            for line in f:
                if 'target="%s"' % target in line:
                    status = int(line.split(" status=")[1].split()[0])
                    out[status] = out.get(status, 0) + 1
        return out

    def test_a_hot_items_counts_are_served_from_the_cache(self):
        item = uid("hot")
        target = "/v1/items?ids=%s,%s" % (item, uid("cold"))
        self.assertOk(self.srv.put(item, uid("u"), "like"))
        one = {"like": 1, "dislike": 0}
        self.assertEqual(self.srv.wait_counts(item, one), one)
        t0 = time.monotonic()
        answers = [self.nginx.request(target) for _ in range(20)]
        elapsed = time.monotonic() - t0
        if elapsed >= MAX_AGE * 0.8:
            self.skipTest("20 requests took %.1fs, longer than max-age" % elapsed)
        for st, hdrs, body in answers:
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(body)["items"][0]["counts"], one)
            self.assertEqual(hdrs.get("cache-control"), "public, max-age=%d" % MAX_AGE)
        self.assertEqual([h.get("x-cache-status") for _, h, _ in answers], ["MISS"] + ["HIT"] * 19)
        self.assertEqual(self.hits(target), {200: 1}, "tallyd saw more than one of 20 requests")

        # a new count: nginx keeps the old one until max-age, then shows the new one
        written = time.monotonic()
        self.assertOk(self.srv.put(item, uid("u"), "like"))
        two = {"like": 2, "dislike": 0}
        self.assertEqual(self.srv.wait_counts(item, two), two)
        seen = None
        while time.monotonic() < written + (MAX_AGE + 3) * SLOW:
            st, hdrs, body = self.nginx.request(target)
            self.assertEqual(st, 200)
            seen = json.loads(body)["items"][0]["counts"]
            if seen == two:
                break
            self.assertEqual(seen, one)
            self.assertEqual(hdrs.get("x-cache-status"), "HIT")
            time.sleep(0.1)
        self.assertEqual(seen, two, "the new count never showed through nginx")
        self.assertLess(time.monotonic() - t0, (MAX_AGE + 3) * SLOW)
        self.assertEqual(self.hits(target), {200: 2})

    def test_an_unchanged_entry_is_revalidated_with_a_304(self):
        target = "/v1/items/%s" % uid("calm")
        st, hdrs, body = self.nginx.request(target)
        self.assertEqual((st, hdrs.get("x-cache-status")), (200, "MISS"))
        time.sleep(MAX_AGE + 0.5)
        deadline = time.monotonic() + 3 * SLOW  # nginx's clock is its loop's, to the second
        st, hdrs, again = self.nginx.request(target)
        while hdrs.get("x-cache-status") == "HIT" and time.monotonic() < deadline:
            time.sleep(0.2)
            st, hdrs, again = self.nginx.request(target)
        self.assertEqual((st, hdrs.get("x-cache-status"), again), (200, "REVALIDATED", body))
        self.assertEqual(self.hits(target), {200: 1, 304: 1})

    def test_viewer_reads_are_never_served_from_the_cache(self):
        item, user = uid("v"), uid("u")
        target = "/v1/items/%s" % item
        self.assertOk(self.srv.put(item, user, "like"))
        public = self.nginx.request(target)  # cached now
        self.assertNotIn(b"viewer", public[2])
        for i in range(3):
            st, hdrs, body = self.nginx.request(target, {"X-User-Id": user})
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(body)["viewer"], {"reaction": "like", "version": 1})
            self.assertEqual(hdrs.get("cache-control"), "private, no-store")
        # and the viewer's answer never reached a reader without a user
        st, hdrs, body = self.nginx.request(target)
        self.assertEqual((st, hdrs.get("x-cache-status")), (200, "HIT"))
        self.assertNotIn(b"viewer", body)
        self.assertEqual(self.hits(target), {200: 4})
        # nor another user
        st, _, body = self.nginx.request(target, {"X-User-Id": uid("other")})
        self.assertEqual(json.loads(body)["viewer"], {"reaction": "none", "version": 0})
        # /v1/viewer through the cache: each read reaches tallyd
        vt = "/v1/viewer?ids=" + item
        for _ in range(2):
            st, hdrs, body = self.nginx.request(vt, {"X-User-Id": user})
            self.assertEqual(json.loads(body)["items"][0]["reaction"], "like")
        self.assertEqual(self.hits(vt), {200: 2})


if __name__ == "__main__":
    unittest.main()
