"""JWT authentication, per docs/api.md (Authentication; Operations: admin rights): HS256 bearer
tokens from TALLY_JWT_SECRET or --jwt-secret-file (several secrets, re-read on SIGHUP).

Tokens come from the operator's tool (`build/tally token`); a few broken ones are made here."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import (REPO_ROOT, SLOW, Server, SharedServerTestCase, TallyTestCase, child_env,
                     run_tallyd, secret as new_secret, store_args, uid)

TALLY = os.path.join(REPO_ROOT, "build", "tally")
SECRET = new_secret("e2e-secret")
ZERO = {"like": 0, "dislike": 0}


def token(user, secret=SECRET, admin=False, ttl=None, secret_file=None):
    """A JWT from `tally token`."""
    args = [TALLY, "token", "--user", user]
    if admin:
        args.append("--admin")
    if ttl:
        args += ["--ttl", ttl]
    if secret_file:
        args += ["--jwt-secret-file", secret_file]
        env = child_env()
    else:
        env = child_env({"TALLY_JWT_SECRET": secret})
    try:
        r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=env, timeout=30)
    except FileNotFoundError:
        raise AssertionError("%s is missing: make all" % TALLY)
    if r.returncode != 0 or r.stdout.count(".") != 2:
        raise AssertionError("tally token %r -> %s %r %r" % (args[2:], r.returncode, r.stdout,
                                                             r.stderr))
    return r.stdout.strip()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def hs256(payload, secret, header=None):
    """A hand-made JWT (for tokens the tool will not make)."""
    h = b64url(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    p = b64url(json.dumps(payload).encode())
    sig = hmac.new(secret.encode(), (h + "." + p).encode(), hashlib.sha256).digest()
    return h + "." + p + "." + b64url(sig)


def bearer(tok):
    return {"Authorization": "Bearer " + tok}


class AuthCase(TallyTestCase):

    def assertUnauthenticated(self, resp, msg=None):
        self.assertProblem(resp, 401, "unauthenticated", msg)
        self.assertRegex(resp[1].get("www-authenticate", ""), r"^Bearer\b",
                         "401 without WWW-Authenticate: Bearer %s" % (msg or ""))

    def put(self, srv, item, reaction, headers):
        return srv.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": reaction},
                        headers=headers)

    def reaction_of(self, srv, item, tok):
        resp = srv.json("GET", "/v1/items/%s/reaction" % item, headers=bearer(tok))
        return self.assertOk(resp, "GET reaction with a token")


def start_public(env, args=()):
    """A server on 0.0.0.0:<free port> (allowed with a secret); the tests connect to
    127.0.0.1."""
    s = Server(args=args, env=env, listen="0.0.0.0:0")
    s.host = "127.0.0.1"
    return s


# ============================================================================================
class BearerTest(SharedServerTestCase, AuthCase):
    """TALLY_JWT_SECRET in the environment; listening on 0.0.0.0."""

    @classmethod
    def setUpClass(cls):
        cls.srv = start_public(child_env({"TALLY_JWT_SECRET": SECRET}))
        cls.listen_host = cls.srv.proc.host

    def test_listens_on_any_address_with_a_secret(self):
        self.assertEqual(self.listen_host, "0.0.0.0")
        st, _, body = self.srv.request("GET", "/healthz")
        self.assertEqual(st, 200, body)

    def test_write_as_token_subject(self):
        s, item, user = self.srv, uid("item"), uid("user")
        tok = token(user)
        self.assertWrite(self.put(s, item, "like", bearer(tok)), item, "like", "none", 1, True)
        self.assertEqual(self.reaction_of(s, item, tok),
                         {"item": item, "reaction": "like", "version": 1})
        s.wait_counts(item, {"like": 1, "dislike": 0})  # counts may lag the write a moment
        doc = self.assertOk(s.json("GET", "/v1/items/" + item, headers=bearer(tok)))
        self.assertEqual(doc, {"item": item, "counts": {"like": 1, "dislike": 0},
                               "viewer": {"reaction": "like", "version": 1}})
        # another user's token sees its own (empty) reaction
        other = uid("user")
        self.assertEqual(self.reaction_of(s, item, token(other)),
                         {"item": item, "reaction": "none", "version": 0})
        # X-User-Id next to a token is ignored: the user is still the token's sub
        h = dict(bearer(tok), **{"X-User-Id": other})
        self.assertWrite(self.put(s, item, "dislike", h), item, "dislike", "like", 2, True)
        self.assertEqual(self.reaction_of(s, item, token(other))["version"], 0)
        self.assertEqual(self.reaction_of(s, item, tok),
                         {"item": item, "reaction": "dislike", "version": 2})
        # the scheme is case-insensitive (RFC 9110 section 11.1)
        resp = s.json("GET", "/v1/items/%s/reaction" % item, headers={"Authorization": "bearer " + tok})
        self.assertEqual(self.assertOk(resp)["version"], 2)
        # other write routes take the user from the token too
        resp = s.json("DELETE", "/v1/items/%s/dislike" % item, headers=bearer(tok))
        self.assertWrite(resp, item, "none", "dislike", 3, True)
        resp = s.json("POST", "/v1/items/%s/reaction:toggle" % item, {"reaction": "like"},
                      headers=dict(bearer(tok), **{"Idempotency-Key": uid("k")}))
        self.assertWrite(resp, item, "like", "none", 4, True)
        # the change feed names the token's sub
        feed = self.assertOk(s.json("GET", "/v1/changes?limit=1000",
                                    headers=bearer(token(uid("root"), admin=True))))
        mine = [(c["user"], c["version"]) for c in feed["changes"] if c["item"] == item]
        self.assertEqual(mine, [(user, 1), (user, 2), (user, 3), (user, 4)])

    def test_missing_or_bad_token(self):
        s, item, user = self.srv, uid("item"), uid("user")
        good = token(user)
        h, p, sig = good.split(".")
        payload = json.loads(b64url_decode(p))
        tampered = dict(payload, sub=uid("user"))
        cases = {
            "no header": {},
            "empty bearer": {"Authorization": "Bearer "},
            "scheme only": {"Authorization": "Bearer"},
            "garbage": bearer("garbage"),
            "two parts": bearer(h + "." + p),
            "basic scheme": {"Authorization": "Basic dXNlcjpwYXNz"},
            "token without scheme": {"Authorization": good},
            "other secret": bearer(token(user, secret="not-" + SECRET)),
            "tampered payload": bearer(h + "." + b64url(json.dumps(tampered).encode()) + "." + sig),
            "no signature": bearer(h + "." + p + "."),
            "bad signature": bearer(h + "." + p + "." + sig[::-1]),
            "alg none": bearer(b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "." +
                               p + "."),
            "alg HS512 header": bearer(hs256(payload, SECRET, {"alg": "HS512", "typ": "JWT"})),
            "expired (hand-made)": bearer(hs256({"sub": user, "exp": int(time.time()) - 60},
                                                SECRET)),
        }
        for name, headers in cases.items():
            with self.subTest(case=name):
                self.assertUnauthenticated(self.put(s, item, "like", headers), name)
                self.assertUnauthenticated(
                    s.json("GET", "/v1/items/%s/reaction" % item, headers=headers), name)
        # nothing was written
        self.assertEqual(self.reaction_of(s, item, good)["version"], 0)
        self.assertCounts(s, item, ZERO, timeout=0)

    def test_crit_header_refused(self):
        """No JWS extension is understood, so a token whose header has crit is refused (RFC 7515
        section 4.1.11), whatever crit lists."""
        s, item, user = self.srv, uid("item"), uid("user")
        claims = {"sub": user, "exp": int(time.time()) + 300}
        for header in ({"alg": "HS256", "crit": ["exp"], "exp": 1},
                       {"alg": "HS256", "typ": "JWT", "crit": ["b64"], "b64": False},
                       {"alg": "HS256", "crit": []}):
            with self.subTest(header=header):
                resp = self.put(s, item, "like", bearer(hs256(claims, SECRET, header)))
                self.assertUnauthenticated(resp, "crit header")
                self.assertIn("crit", resp[2]["detail"])
        self.assertEqual(self.reaction_of(s, item, token(user))["version"], 0)
        # the same claims without crit are accepted
        self.assertOk(s.json("GET", "/v1/items/%s/reaction" % item,
                             headers=bearer(hs256(claims, SECRET, {"alg": "HS256"}))))

    def test_bearer_with_several_spaces(self):
        """Any run of spaces or tabs after the scheme (in any case) is taken, as nginx and OIDC
        servers do; a scheme glued to its token or without one is not."""
        s, item, user = self.srv, uid("item"), uid("user")
        tok = token(user)
        for value in ("Bearer  " + tok, "Bearer\t" + tok, "BEARER \t " + tok, "bearer " + tok + "  "):
            with self.subTest(value=value[:12]):
                resp = s.json("GET", "/v1/items/%s/reaction" % item,
                              headers={"Authorization": value})
                self.assertEqual(self.assertOk(resp)["version"], 0)
        for value in ("Bearer" + tok, "Bearer  ", "Bearer\t"):
            with self.subTest(value=value[:12]):
                resp = s.json("GET", "/v1/items/%s/reaction" % item,
                              headers={"Authorization": value})
                self.assertUnauthenticated(resp, value[:12])
                self.assertIn("Bearer", resp[2]["detail"])

    def test_expired_token(self):
        s, item, user = self.srv, uid("item"), uid("user")
        t0 = time.time()
        tok = token(user, ttl="1s")
        exp = json.loads(b64url_decode(tok.split(".")[1]))["exp"]
        self.assertLessEqual(abs(exp - (t0 + 1)), 2, "--ttl 1s sets exp one second ahead")
        time.sleep(2.1)
        self.assertUnauthenticated(self.put(s, item, "like", bearer(tok)), "expired token")
        self.assertUnauthenticated(
            s.json("GET", "/v1/items/%s/reaction" % item, headers=bearer(tok)), "expired token")
        self.assertEqual(self.reaction_of(s, item, token(user))["version"], 0)

    def test_x_user_id_is_ignored(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertUnauthenticated(self.put(s, item, "like", {"X-User-Id": user}))
        self.assertUnauthenticated(s.json("DELETE", "/v1/items/%s/reaction" % item, user=user))
        self.assertUnauthenticated(s.json("GET", "/v1/items/%s/reaction" % item, user=user))
        self.assertUnauthenticated(s.json("GET", "/v1/changes", user="admin"))
        self.assertUnauthenticated(s.json("POST", "/v1/admin/recount", {}, user="admin"))
        # a public read with X-User-Id carries no viewer: the header is not a user
        doc = self.assertOk(s.json("GET", "/v1/items/" + item, user=user))
        self.assertNotIn("viewer", doc)
        self.assertEqual(self.reaction_of(s, item, token(user))["version"], 0)

    def test_admin_endpoints_need_admin_role(self):
        s = self.srv
        user_tok, admin_tok = token(uid("user")), token(uid("root"), admin=True)
        # the role comes from the token, not from the name "admin"
        admin_named = token("admin")
        for method, path, body in (("GET", "/v1/changes", None),
                                   ("POST", "/v1/admin/recount", {})):
            with self.subTest(path=path):
                self.assertUnauthenticated(s.json(method, path, body))
                self.assertProblem(s.json(method, path, body, headers=bearer(user_tok)),
                                   403, "forbidden")
                self.assertProblem(s.json(method, path, body, headers=bearer(admin_named)),
                                   403, "forbidden", "sub=admin without the admin role")
                h = dict(bearer(user_tok), **{"X-User-Id": "admin"})
                self.assertProblem(s.json(method, path, body, headers=h), 403, "forbidden")
                self.assertOk(s.json(method, path, body, headers=bearer(admin_tok)))
        # a hand-made token with another role is not admin either
        other_role = hs256({"sub": uid("u"), "role": "Admin", "exp": int(time.time()) + 300},
                           SECRET)
        self.assertProblem(s.json("GET", "/v1/changes", headers=bearer(other_role)),
                           403, "forbidden")

    def test_public_reads_without_token(self):
        s, item, user = self.srv, uid("item"), uid("user")
        self.assertWrite(self.put(s, item, "dislike", bearer(token(user))),
                         item, "dislike", "none", 1, True)
        s.wait_counts(item, {"like": 0, "dislike": 1})  # counts may lag the write a moment
        doc = self.assertOk(s.json("GET", "/v1/items/" + item))
        self.assertEqual(doc, {"item": item, "counts": {"like": 0, "dislike": 1}})
        doc = self.assertOk(s.json("GET", "/v1/items?ids=%s,%s" % (item, uid("item"))))
        self.assertEqual([d.get("viewer") for d in doc["items"]], [None, None])
        self.assertEqual(doc["items"][0]["counts"], {"like": 0, "dislike": 1})
        for path in ("/healthz", "/readyz", "/metrics"):
            with self.subTest(path=path):
                st, _, body = s.request("GET", path)
                self.assertEqual(st, 200, body[:200])


class DevelopmentModeTest(TallyTestCase):

    def test_refuses_non_loopback_without_secret(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-auth-")
        try:
            rc, out, err = run_tallyd(["--listen", "0.0.0.0:0"] +
                                      store_args(os.path.join(tmp, "data")))
            self.assertEqual(rc, 1, "development mode on 0.0.0.0\n" + err)
            self.assertNotIn("listening on", out)
            self.assertTrue(err.strip(), "no message")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class WeakSecretTest(TallyTestCase):
    """A secret shorter than 32 bytes (RFC 7518 §3.2) is refused at start-up, naming its source."""

    def test_short_secret_in_the_environment_is_refused(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-auth-")
        try:
            for weak in ("a", " ", "x" * 31, "x" * 31 + "\n"):
                with self.subTest(secret=weak):
                    rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] +
                                              store_args(os.path.join(tmp, "data")),
                                              env=child_env({"TALLY_JWT_SECRET": weak}))
                    self.assertEqual(rc, 2, err)
                    self.assertNotIn("listening on", out)
                    self.assertIn("TALLY_JWT_SECRET", err)
                    self.assertIn("at least 32", err)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_repeated_or_blank_secret_is_refused(self):
        """40 spaces or 40 x A are long enough but no secret: refused at start (exit 2) from either
        source, and on SIGHUP the secret in force is kept."""
        tmp = tempfile.mkdtemp(prefix="tally-e2e-auth-")
        try:
            path = os.path.join(tmp, "secrets")
            for weak in (" " * 40, "A" * 40, " \t" * 20, "\x01" * 64):
                with self.subTest(secret=weak[:4]):
                    rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] +
                                              store_args(os.path.join(tmp, "data")),
                                              env=child_env({"TALLY_JWT_SECRET": weak}))
                    self.assertEqual(rc, 2, err)
                    self.assertNotIn("listening on", out)
                    self.assertIn("TALLY_JWT_SECRET", err)
                    with open(path, "w") as f:
                        f.write(new_secret("good") + "\n" + weak + "\n")
                    rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] +
                                              store_args(os.path.join(tmp, "data")) +
                                              ["--jwt-secret-file", path])
                    self.assertEqual(rc, 2, err)
                    self.assertIn("--jwt-secret-file", err)
                    self.assertIn("line 2", err)
            # on reload: refused, logged, the secret in force kept
            good = new_secret("kept")
            with open(path, "w") as f:
                f.write(good + "\n")
            s = Server(args=["--jwt-secret-file", path], env=child_env())
            try:
                with open(path, "w") as f:
                    f.write("A" * 40 + "\n")
                s.proc.popen.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 5 * SLOW
                while "secrets-reload" not in s.stderr() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertIn("repeated", s.stderr())
                user = uid("user")
                resp = s.json("GET", "/v1/items/%s/reaction" % uid("item"),
                              headers=bearer(token(user, secret=good)))
                self.assertEqual(self.assertOk(resp)["version"], 0)
                resp = s.json("GET", "/v1/items/%s/reaction" % uid("item"),
                              headers=bearer(hs256({"sub": user, "exp": int(time.time()) + 60},
                                                   "A" * 40)))
                self.assertProblem(resp, 401, "unauthenticated")
                s.stop()
            finally:
                s.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_short_secret_in_the_file_is_refused(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-auth-")
        try:
            path = os.path.join(tmp, "secrets")
            # a good first secret does not let a weak second one in
            for text in ("short\n", new_secret("good") + "\nshort\n", " \r\n"):
                with self.subTest(text=text):
                    with open(path, "w", newline="") as f:
                        f.write(text)
                    rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] +
                                              store_args(os.path.join(tmp, "data")) +
                                              ["--jwt-secret-file", path])
                    self.assertEqual(rc, 2, err)
                    self.assertNotIn("listening on", out)
                    self.assertIn("--jwt-secret-file", err)
            r = subprocess.run([TALLY, "token", "--user", "u"], capture_output=True, text=True,
                               env=child_env({"TALLY_JWT_SECRET": "a"}), timeout=30)
            self.assertNotEqual(r.returncode, 0, "tally token signs with a 1-byte secret")
            self.assertEqual(r.stdout, "")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ============================================================================================
class SecretFileTest(AuthCase):

    def _write(self, path, text):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def test_rotation_with_sighup(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-secrets-")
        path = os.path.join(tmp, "secrets")
        new, old = new_secret("new"), new_secret("old")
        self._write(path, "%s\n%s\n" % (new, old))
        s = start_public(child_env(), args=["--jwt-secret-file", path])
        try:
            item = uid("item")
            u_new, u_old, u_file = uid("user"), uid("user"), uid("user")
            t_new, t_old = token(u_new, secret=new), token(u_old, secret=old)
            # the tool signs with the file's first secret
            t_file = token(u_file, secret_file=path)
            h, p, sig = t_file.split(".")
            self.assertEqual(b64url_decode(sig),
                             hmac.new(new.encode(), (h + "." + p).encode(),
                                      hashlib.sha256).digest(),
                             "tally token --jwt-secret-file signs with the first line")
            # both secrets verify
            self.assertWrite(self.put(s, item, "like", bearer(t_new)), item, "like", "none", 1, True)
            self.assertWrite(self.put(s, item, "like", bearer(t_old)), item, "like", "none", 1, True)
            self.assertWrite(self.put(s, item, "dislike", bearer(t_file)),
                             item, "dislike", "none", 1, True)
            # a secret file means no development mode
            self.assertUnauthenticated(self.put(s, item, "like", {"X-User-Id": uid("user")}))
            self.assertUnauthenticated(self.put(s, item, "like", bearer(token(u_new, secret=new_secret("unknown")))))

            # rotate: only the new secret, then SIGHUP
            self._write(path, new + "\n")
            s.proc.popen.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 3 * SLOW
            while True:
                resp = s.json("GET", "/v1/items/%s/reaction" % item, headers=bearer(t_old))
                if resp[0] != 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertUnauthenticated(resp, "a token of the removed secret after SIGHUP")
            self.assertTrue(s.running, "SIGHUP stopped the server\n" + s.stderr())
            self.assertUnauthenticated(self.put(s, item, "none", bearer(t_old)))
            self.assertWrite(self.put(s, item, "none", bearer(t_new)),
                             item, "none", "like", 2, True)
            self.assertEqual(self.reaction_of(s, item, t_file)["reaction"], "dislike")
            self.assertCounts(s, item, {"like": 1, "dislike": 1})
            s.stop()
        finally:
            s.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_crlf_stripped(self):
        """A file written on Windows: each line's \\r\\n is not part of its secret."""
        tmp = tempfile.mkdtemp(prefix="tally-e2e-secrets-")
        path = os.path.join(tmp, "secret")
        first, second = new_secret("crlf-one"), new_secret("crlf-two")
        with open(path, "w", newline="") as f:
            f.write(first + "\r\n" + second + "\r\n")
        s = Server(args=["--jwt-secret-file", path], env=child_env())
        try:
            item, user = uid("item"), uid("user")
            self.assertWrite(self.put(s, item, "like", bearer(token(user, secret=second))),
                             item, "like", "none", 1, True)
            self.assertWrite(self.put(s, item, "dislike", bearer(token(user, secret=first))),
                             item, "dislike", "like", 2, True)
            self.assertUnauthenticated(
                self.put(s, item, "none", bearer(hs256({"sub": user, "exp": int(time.time()) + 300},
                                                      first + "\r"))),
                "the \\r is not part of the secret")
            s.stop()
        finally:
            s.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_one_trailing_newline_stripped(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-secrets-")
        path = os.path.join(tmp, "secret")
        secret = new_secret("only")
        self._write(path, secret + "\n")
        s = Server(args=["--jwt-secret-file", path], env=child_env())
        try:
            item, user = uid("item"), uid("user")
            self.assertWrite(self.put(s, item, "like", bearer(token(user, secret=secret))),
                             item, "like", "none", 1, True)
            self.assertUnauthenticated(
                self.put(s, item, "dislike", bearer(hs256({"sub": user, "exp": int(time.time()) + 300},
                                             secret + "\n"))),
                "the newline is not part of the secret")
            s.stop()
        finally:
            s.close()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
