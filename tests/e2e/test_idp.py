"""Tokens from an identity provider (docs/api.md, Authentication): --jwt-keys (a JWK Set file) and
--jwt-jwks-url (fetched from a test JWKS server on loopback), RS256, PS256, ES256 and EdDSA,
--jwt-issuer/--jwt-audience, --jwt-user-claim, --jwt-admin-claim, and what is refused.

Keys and tokens are made with PyJWT and cryptography by tests/e2e/idp_tokens.py under Debian's
/usr/bin/python3 (the harness's python may lack them)."""

import base64
import hashlib
import hmac
import http.server
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (SLOW, Server, SharedServerTestCase, TallyTestCase, child_env, run_tallyd,
                     store_args, uid)

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"
ISS = "https://idp.example/realms/tally"
AUD = "tally-api"
KEYS = None  # {"dir", "jwks": {name: JWK}, "public_pem": {name: PEM}}, made once per run


def idp(request):
    r = subprocess.run([SYSTEM_PYTHON, os.path.join(HERE, "idp_tokens.py")],
                       input=json.dumps(request), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("idp_tokens.py: %s\n%s" % (r.returncode, r.stderr[-2000:]))
    return json.loads(r.stdout)


def setUpModule():
    global KEYS
    d = tempfile.mkdtemp(prefix="tally-e2e-idp-")
    KEYS = dict(idp({"op": "keys", "dir": d}), dir=d)


def tearDownModule():
    if KEYS:
        shutil.rmtree(KEYS["dir"], ignore_errors=True)


def claims(user, **kw):
    c = {"sub": user, "iss": ISS, "aud": AUD, "exp": int(time.time()) + 300}
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def mint(*specs):
    """Tokens for (key name, alg, claims[, headers]); the header's kid is the key's name unless
    headers say otherwise."""
    reqs = []
    for s in specs:
        key, alg, c = s[0], s[1], s[2]
        headers = {"kid": key}
        if len(s) > 3:
            headers = s[3]
        reqs.append({"key": key, "alg": alg, "claims": c, "headers": headers})
    return idp({"op": "sign", "dir": KEYS["dir"], "tokens": reqs})["tokens"]


def jwks(*names):
    return {"keys": [KEYS["jwks"][n] for n in names]}


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header, payload, key=None):
    """A token the library will not make: HMAC-SHA256 with key (bytes), or no signature."""
    h = b64url(json.dumps(header).encode())
    p = b64url(json.dumps(payload).encode())
    sig = hmac.new(key, (h + "." + p).encode(), hashlib.sha256).digest() if key else b""
    return h + "." + p + "." + b64url(sig)


def bearer(tok):
    return {"Authorization": "Bearer " + tok}


def idp_args(keys_file=None, url=None, extra=()):
    args = ["--jwt-issuer", ISS, "--jwt-audience", AUD]
    if keys_file:
        args += ["--jwt-keys", keys_file]
    if url:
        args += ["--jwt-jwks-url", url]
    return args + list(extra)


class IdpCase(TallyTestCase):

    def assertUnauthenticated(self, resp, msg=None, detail=None):
        doc = self.assertProblem(resp, 401, "unauthenticated", msg)
        self.assertRegex(resp[1].get("www-authenticate", ""), r"^Bearer\b", msg)
        if detail:
            self.assertIn(detail, doc["detail"], msg)

    def reaction(self, srv, item, tok):
        return srv.json("GET", "/v1/items/%s/reaction" % item, headers=bearer(tok))

    def put(self, srv, item, tok, reaction="like"):
        return srv.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": reaction},
                        headers=bearer(tok))

    def wait_ready(self, srv, timeout):
        deadline = time.monotonic() + timeout * SLOW
        st = body = None
        while time.monotonic() < deadline:
            st, _, body = srv.request("GET", "/readyz")
            if st == 200:
                return
            time.sleep(0.1)
        self.fail("/readyz still %s after %ss: %r\n%s" % (st, timeout, body, srv.stderr()[-2000:]))


def write_json(path, doc):
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


# ============================================================================================
class KeyFileTest(SharedServerTestCase, IdpCase):
    """--jwt-keys with an RSA, an EC P-256 and an Ed25519 key."""

    @classmethod
    def setUpClass(cls):
        cls.keys_file = os.path.join(KEYS["dir"], "file-jwks.json")
        write_json(cls.keys_file, jwks("rsa", "ec", "ed"))
        cls.server_args = idp_args(cls.keys_file)
        super().setUpClass()

    def test_each_algorithm(self):
        s = self.srv
        for (alg, key) in (("RS256", "rsa"), ("PS256", "rsa"), ("ES256", "ec"), ("EdDSA", "ed")):
            with self.subTest(alg=alg):
                user, item = uid("u"), uid("item")
                tok, = mint((key, alg, claims(user)))
                self.assertWrite(self.put(s, item, tok), item, "like", "none", 1, True)
                doc = self.assertOk(self.reaction(s, item, tok))
                self.assertEqual(doc, {"item": item, "reaction": "like", "version": 1})
                # without a kid the keys that fit the alg are tried
                tok, = mint((key, alg, claims(user), {}))
                self.assertEqual(self.assertOk(self.reaction(s, item, tok))["version"], 1)
        st, _, body = s.request("GET", "/readyz")
        self.assertEqual(st, 200, body)

    def test_refused_tokens(self):
        s, item, user = self.srv, uid("item"), uid("u")
        now = int(time.time())
        good = claims(user)
        pem = KEYS["public_pem"]["rsa"].encode()
        toks = dict(zip(
            ["wrong issuer", "wrong audience", "audience array without ours", "expired",
             "not yet valid (nbf)", "no exp", "ES256 header on an RSA kid", "unknown kid",
             "crit header", "crit empty", "RS384", "signed by a key not in the set"],
            mint(("rsa", "RS256", dict(good, iss="https://other.example")),
                 ("rsa", "RS256", dict(good, aud="other-app")),
                 ("ec", "ES256", dict(good, aud=["a", "b"])),
                 ("ed", "EdDSA", dict(good, exp=now - 60)),
                 ("ed", "EdDSA", dict(good, nbf=now + 120)),
                 ("rsa", "RS256", claims(user, exp=None)),
                 ("ec", "ES256", good, {"kid": "rsa"}),
                 ("rsa", "RS256", good, {"kid": "no-such-key"}),
                 ("rsa", "RS256", good, {"kid": "rsa", "crit": ["exp"], "exp": 1}),
                 ("ec", "ES256", good, {"kid": "ec", "crit": []}),
                 ("rsa", "RS384", good, {"kid": "rsa"}),
                 ("rsa2", "RS256", good, {"kid": "rsa"}))))
        toks["alg none"] = hand_made({"alg": "none", "kid": "rsa"}, good)
        # algorithm confusion: the RSA public key's PEM used as an HS256 secret
        toks["HS256 with the public key as secret"] = hand_made({"alg": "HS256", "kid": "rsa"},
                                                                good, pem)
        toks["HS256 with the public key, no kid"] = hand_made({"alg": "HS256"}, good, pem)
        ok, = mint(("rsa", "RS256", good))
        h, p, sig = ok.split(".")
        toks["signature of another token"] = h + "." + b64url(json.dumps(
            dict(good, sub=uid("u"))).encode()) + "." + sig
        for name, tok in toks.items():
            with self.subTest(case=name):
                self.assertUnauthenticated(self.put(s, item, tok), name)
                self.assertUnauthenticated(self.reaction(s, item, tok), name)
        details = {"crit header": "crit", "wrong issuer": "iss", "wrong audience": "aud",
                   "not yet valid (nbf)": "nbf", "ES256 header on an RSA kid": "does not fit",
                   "unknown kid": "kid", "expired": "expired"}
        for name, detail in details.items():
            with self.subTest(detail=name):
                self.assertUnauthenticated(self.reaction(s, item, toks[name]), name, detail)
        self.assertEqual(self.assertOk(self.reaction(s, item, ok))["version"], 0)

    def test_user_claim_outside_the_alphabet(self):
        s, item = self.srv, uid("item")
        for bad in ("a b", "", "é", "x" * 129, ".."):
            with self.subTest(sub=bad):
                tok, = mint(("ed", "EdDSA", claims(bad)))
                self.assertUnauthenticated(self.put(s, item, tok), bad, "not a valid user id")

    def test_large_token(self):
        s, item = self.srv, uid("item")
        tok, = mint(("ed", "EdDSA", claims(uid("u"), pad="x" * 20000)))
        self.assertGreater(len(tok), 20000)
        st, hdrs, doc, raw = s.json("GET", "/v1/items/%s/reaction" % item, headers=bearer(tok))
        # past --max-header-size (16K) h2o's limit answers 431; a handler would say 401
        self.assertIn(st, (401, 431), raw[:300])
        self.assertTrue(s.running)
        # below the header limit but past the token limit (8 KiB): 401
        tok, = mint(("ed", "EdDSA", claims(uid("u"), pad="x" * 9000)))
        self.assertUnauthenticated(self.reaction(s, item, tok), "a 12 KB token", "8 KiB")

    def test_bearer_spacing(self):
        s, item = self.srv, uid("item")
        tok, = mint(("rsa", "RS256", claims(uid("u"))))
        for value in ("Bearer  " + tok, "bearer\t" + tok, "BEARER " + tok + "  ", "Bearer \t " + tok):
            with self.subTest(value=value[:10]):
                self.assertOk(s.json("GET", "/v1/items/%s/reaction" % item,
                                     headers={"Authorization": value}))
        for value in ("Bearer" + tok, "Bearer   ", "Bear " + tok):
            with self.subTest(value=value[:10]):
                self.assertUnauthenticated(s.json("GET", "/v1/items/%s/reaction" % item,
                                                  headers={"Authorization": value}), value[:10],
                                           "Bearer")

    def test_public_reads_and_admin_default(self):
        s, item = self.srv, uid("item")
        self.assertOk(s.json("GET", "/v1/items/" + item))
        user_tok, admin_tok, admin_array = mint(
            ("rsa", "RS256", claims(uid("u"))),
            ("ec", "ES256", claims(uid("root"), role="admin")),
            ("ed", "EdDSA", claims(uid("root"), role=["user", "admin"])))
        self.assertProblem(s.json("GET", "/v1/changes", headers=bearer(user_tok)), 403,
                           "forbidden")
        self.assertOk(s.json("GET", "/v1/changes", headers=bearer(admin_tok)))
        self.assertOk(s.json("GET", "/v1/changes", headers=bearer(admin_array)))


class ClaimsTest(IdpCase):
    """--jwt-user-claim and --jwt-admin-claim with a Keycloak-style nested array."""

    def test_user_and_admin_claims(self):
        keys_file = os.path.join(KEYS["dir"], "claims-jwks.json")
        write_json(keys_file, jwks("rsa"))
        args = idp_args(keys_file, extra=["--jwt-user-claim", "preferred_username",
                                          "--jwt-admin-claim", "realm_access.roles=admin"])
        with Server(args=args) as s:
            name = uid("carol")
            admin, plain, role_only, no_name = mint(
                ("rsa", "RS256", claims("f:1", preferred_username=name,
                                        realm_access={"roles": ["offline", "admin"]})),
                ("rsa", "RS256", claims("f:2", preferred_username=uid("dave"),
                                        realm_access={"roles": ["offline"]})),
                ("rsa", "RS256", claims("f:3", preferred_username=uid("erin"), role="admin")),
                ("rsa", "RS256", claims("f:4")))
            item = uid("item")
            self.assertWrite(self.put(s, item, admin), item, "like", "none", 1, True)
            feed = self.assertOk(s.json("GET", "/v1/changes?limit=1000", headers=bearer(admin)))
            self.assertIn((item, name), [(c["item"], c["user"]) for c in feed["changes"]])
            self.assertProblem(s.json("GET", "/v1/changes", headers=bearer(plain)), 403,
                               "forbidden")
            self.assertProblem(s.json("GET", "/v1/changes", headers=bearer(role_only)), 403,
                               "forbidden", "role=admin is not the configured admin claim")
            self.assertUnauthenticated(self.put(s, item, no_name), "no preferred_username",
                                       "not a valid user id")


class FlagsTest(IdpCase):

    def run_flags(self, args):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-idp-")
        try:
            return run_tallyd(["--listen", "127.0.0.1:0"] + store_args(os.path.join(tmp, "data"))
                              + args)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_bad_flags_exit_2(self):
        keys_file = os.path.join(KEYS["dir"], "flags-jwks.json")
        write_json(keys_file, jwks("rsa"))
        bad_file = os.path.join(KEYS["dir"], "bad-jwks.json")
        write_json(bad_file, {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})
        cases = [
            (["--jwt-keys", keys_file, "--jwt-audience", AUD], "--jwt-issuer"),
            (["--jwt-keys", keys_file, "--jwt-issuer", ISS], "--jwt-audience"),
            (["--jwt-jwks-url", "https://idp.example/jwks", "--jwt-audience", AUD], "--jwt-issuer"),
            (["--jwt-jwks-url", "https://idp.example/jwks", "--jwt-issuer", ISS], "--jwt-audience"),
            (idp_args(url="http://idp.example/jwks"), "--jwt-jwks-url"),
            (idp_args(url="http://10.1.2.3/jwks"), "--jwt-jwks-url"),
            (idp_args(url="ftp://127.0.0.1/jwks"), "--jwt-jwks-url"),
            (idp_args(bad_file), "--jwt-keys"),
            (idp_args(os.path.join(KEYS["dir"], "missing.json")), "--jwt-keys"),
            (idp_args(keys_file, extra=["--jwt-admin-claim", "role"]), "--jwt-admin-claim"),
            (idp_args(keys_file, extra=["--jwt-jwks-refresh", "10ms"]), "--jwt-jwks-refresh"),
        ]
        for args, flag in cases:
            with self.subTest(args=args):
                rc, out, err = self.run_flags(args)
                self.assertEqual(rc, 2, err)
                self.assertNotIn("listening on", out)
                self.assertIn(flag, err)

    def test_help_lists_the_flags(self):
        r = subprocess.run([os.environ.get("TALLYD") or os.path.join(HERE, "..", "..", "build",
                                                                      "tallyd"), "--help"],
                           capture_output=True, text=True, timeout=30)
        for flag in ("--jwt-keys", "--jwt-jwks-url", "--jwt-jwks-refresh", "--jwt-issuer",
                     "--jwt-audience", "--jwt-user-claim", "--jwt-admin-claim"):
            self.assertIn(flag, r.stdout)
        self.assertIn("(default 10m)", r.stdout)
        self.assertIn("(default role=admin)", r.stdout)


# ============================================================================================
class JwksServer:
    """A JWKS endpoint on 127.0.0.1 in a thread. Bound at once; it accepts connections only after
    listen() (before, a connection is refused: the port is bound, not listening)."""

    def __init__(self, doc):
        self.doc = doc
        self.fetches = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with outer.lock:
                    outer.fetches += 1
                    body = json.dumps(outer.doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler,
                                                     bind_and_activate=False)
        self.httpd.daemon_threads = True
        self.httpd.server_bind()
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d/jwks.json" % self.port
        self.thread = None

    def listen(self):
        self.httpd.server_activate()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def set(self, doc):
        with self.lock:
            self.doc = doc

    def count(self):
        with self.lock:
            return self.fetches

    def close(self):
        if self.thread:
            self.httpd.shutdown()
            self.thread.join(10)
        self.httpd.server_close()


class JwksUrlTest(IdpCase):

    def test_unreachable_at_start_then_up_then_down(self):
        js = JwksServer(jwks("rsa", "ec"))
        try:
            with Server(args=idp_args(url=js.url, extra=["--jwt-jwks-refresh", "2s"])) as s:
                item, user = uid("item"), uid("u")
                tok, = mint(("rsa", "RS256", claims(user)))
                st, _, body = s.request("GET", "/readyz")
                self.assertEqual(st, 503, body)
                self.assertIn(b"jwt-jwks-url", body)
                self.assertProblem(self.put(s, item, tok), 503, "unavailable")
                self.assertProblem(self.reaction(s, item, tok), 503, "unavailable")
                self.assertProblem(s.json("GET", "/v1/changes"), 503, "unavailable")
                # public reads keep working, a token on them is not a viewer yet
                doc = self.assertOk(s.json("GET", "/v1/items/" + item, headers=bearer(tok)))
                self.assertNotIn("viewer", doc)
                st, _, body = s.request("GET", "/healthz")
                self.assertEqual(st, 200, body)
                # the provider comes up: a retry loads the keys (1 s, 2 s, ... up to the refresh)
                js.listen()
                self.wait_ready(s, 10)
                self.assertWrite(self.put(s, item, tok), item, "like", "none", 1, True)
                # the provider goes away: the last good set is kept
                before = js.count()
                js.close()
                js = None
                time.sleep(4.5)
                self.assertGreaterEqual(before, 1)
                self.assertEqual(self.assertOk(self.reaction(s, item, tok))["version"], 1)
                st, _, body = s.request("GET", "/readyz")
                self.assertEqual(st, 200, body)
                self.assertIn("event=jwks-fetch-failed", s.stderr())
                self.assertIn("keeping the last good key set", s.stderr())
        finally:
            if js:
                js.close()

    def test_rotation_on_refresh(self):
        js = JwksServer(jwks("rsa"))
        js.listen()
        try:
            with Server(args=idp_args(url=js.url, extra=["--jwt-jwks-refresh", "1s"])) as s:
                self.wait_ready(s, 10)
                item = uid("item")
                old, new = mint(("rsa", "RS256", claims(uid("u"))),
                                ("rsa2", "PS256", claims(uid("u"))))
                self.assertOk(self.reaction(s, item, old))
                self.assertUnauthenticated(self.reaction(s, item, new), "rsa2 not served yet")
                js.set(jwks("rsa2"))
                deadline = time.monotonic() + 10 * SLOW
                while time.monotonic() < deadline:
                    if self.reaction(s, item, new)[0] == 200:
                        break
                    time.sleep(0.1)
                self.assertOk(self.reaction(s, item, new), "the new kid after a refresh")
                self.assertUnauthenticated(self.reaction(s, item, old), "the removed kid")
        finally:
            js.close()

    @unittest.skipUnless(os.environ.get("TALLY_E2E_SLOW"), "slow (~35 s): set TALLY_E2E_SLOW=1")
    def test_slow_unknown_kid_fetch(self):
        """A token with an unknown kid is refused at once and asks for one background fetch,
        at most one per 30 s however many such tokens come."""
        js = JwksServer(jwks("rsa"))
        js.listen()
        try:
            with Server(args=idp_args(url=js.url)) as s:  # refresh 10m: only the kid fetches
                self.wait_ready(s, 10)
                started = time.monotonic()
                self.assertEqual(js.count(), 1)
                item = uid("item")
                old, new = mint(("rsa", "RS256", claims(uid("u"))),
                                ("rsa2", "RS256", claims(uid("u"))))
                self.assertOk(self.reaction(s, item, old))
                js.set(jwks("rsa2"))
                for _ in range(20):
                    t0 = time.monotonic()
                    self.assertUnauthenticated(self.reaction(s, item, new), "unknown kid")
                    self.assertLess(time.monotonic() - t0, 1.0 * SLOW, "the token was held")
                time.sleep(1)
                self.assertEqual(js.count(), 1, "an unknown-kid fetch within 30 s of the last")
                deadline = started + 45 * SLOW
                while time.monotonic() < deadline and self.reaction(s, item, new)[0] != 200:
                    time.sleep(0.25)
                self.assertOk(self.reaction(s, item, new), "the new kid after the kid fetch")
                self.assertGreaterEqual(time.monotonic() - started, 29)
                self.assertEqual(js.count(), 2)
                self.assertUnauthenticated(self.reaction(s, item, old), "the removed kid")
        finally:
            js.close()


class BothStoresTest(IdpCase):
    """Auth does not depend on the store: one pass of a provider token on whichever store runs."""

    def test_token_write_and_read(self):
        keys_file = os.path.join(KEYS["dir"], "stores-jwks.json")
        write_json(keys_file, jwks("ed"))
        with Server(args=idp_args(keys_file)) as s:
            item, user = uid("item"), uid("u")
            tok, = mint(("ed", "EdDSA", claims(user)))
            self.assertWrite(self.put(s, item, tok, "dislike"), item, "dislike", "none", 1, True)
            s.wait_counts(item, {"like": 0, "dislike": 1})
            doc = self.assertOk(s.json("GET", "/v1/items/" + item, headers=bearer(tok)))
            self.assertEqual(doc["viewer"], {"reaction": "dislike", "version": 1})
