"""Start-up and running as a service, per docs/api.md § Start-up and § Installing and running as a
service: --config FILE (the command line wins; mistakes exit 2 naming file, line and flag),
--version, --log-format json, SIGHUP reload (a rate limit, the CORS origins, the access log; a
broken file changes nothing), sd_notify on a NOTIFY_SOCKET of the test's own, and the build and
start-time metrics. Also `tally --config` and `tally --version`."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import (PG, REPO_ROOT, TALLYD, Server, TallyTestCase, child_env, embedded_only,
                     run_tallyd, store_args, uid)

TALLY = os.path.join(REPO_ROOT, "build", "tally")
VERSION_RE = r"^%s (\d[0-9A-Za-z.~-]*(\+g[0-9a-f]{7,})?)\n$"
A, B = "https://a.example", "https://b.example"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def wait_for(predicate, timeout=10.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def allowed_origin(srv, origin):
    """The Access-Control-Allow-Origin answered to a read from origin (None when absent)."""
    st, hdrs, _ = srv.request("GET", "/v1/items/%s" % uid("o"), headers={"Origin": origin})
    return hdrs.get("access-control-allow-origin")


class ConfigTestCase(TallyTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tally-config-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def conf(self, text, name="tallyd.conf"):
        path = os.path.join(self.tmp, name)
        write(path, text)
        return path


class TestConfigFile(ConfigTestCase):
    def test_file_is_honoured(self):
        path = self.conf("# a comment\n\ncors-origin = %s   # allowed\nrate-limit = off\n" % A)
        with Server(args=["--config", path]) as s:
            self.assertEqual(allowed_origin(s, A), A)
            self.assertIsNone(allowed_origin(s, B))

    def test_repeatable_flag_repeats_and_command_line_replaces_it(self):
        path = self.conf("cors-origin = %s\ncors-origin = https://c.example\n" % A)
        with Server(args=["--config", path]) as s:
            self.assertEqual(allowed_origin(s, "https://c.example"), "https://c.example")
            self.assertEqual(allowed_origin(s, A), A)
        with Server(args=["--config", path, "--cors-origin", B]) as s:
            self.assertEqual(allowed_origin(s, B), B)
            self.assertIsNone(allowed_origin(s, A), "the command line replaces the file's values")

    def test_command_line_wins_for_the_store_too(self):
        # the file names a store the command line (the harness's --data or --store) replaces:
        # data and store are one setting
        path = self.conf("data = %s\n" % os.path.join(self.tmp, "never"))
        with Server(args=["--config", path]) as s:
            self.assertEqual(s.put(uid("i"), "u1", "like")[0], 200)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never")),
                         "the file's data directory was used although the command line gave a store")

    def assertRefused(self, text_or_path, line, flag, args=()):
        path = text_or_path if text_or_path.startswith("/") else self.conf(text_or_path)
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--config", path] + list(args) +
                                  store_args(os.path.join(self.tmp, "data")))
        self.assertEqual(rc, 2, err)
        where = "%s:%d" % (path, line) if line else path
        self.assertIn(where, err)
        if flag:
            self.assertIn(flag, err)
        return err

    def test_mistakes_exit_2_naming_file_line_and_flag(self):
        self.assertRefused("rate-limit = off\nno-such-flag = 1\n", 2, "no-such-flag")
        self.assertRefused("\n\nrate-limit = fast\n", 3, "--rate-limit")
        self.assertRefused("who-reacted = users\nwho-reacted = admin\n", 2, "--who-reacted")
        self.assertRefused("--listen = 127.0.0.1:0\n", 1, None)
        self.assertRefused("listen 127.0.0.1:0\n", 1, None)
        self.assertRefused("request-timeout =\n", 1, "request-timeout")
        self.assertRefused("config = /etc/other\n", 1, "--config")
        # a bad value is refused even when the command line replaces it
        self.assertRefused("cors-origin = nope\n", 1, "--cors-origin", args=["--cors-origin", A])
        missing = os.path.join(self.tmp, "missing.conf")
        err = self.assertRefused(missing, 0, "--config")
        self.assertIn("No such file", err)
        err = self.assertRefused(self.tmp, 0, "--config")  # a directory cannot be read as a file
        self.assertIn("directory", err)

    @embedded_only("data and store both in one file (store needs a PostgreSQL URI)")
    def test_data_and_store_in_one_file_exit_2(self):
        path = self.conf("data = %s\nstore = postgresql://u@127.0.0.1:1/db\n" % os.path.join(self.tmp, "d"))
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--config", path])
        self.assertEqual(rc, 2, err)
        self.assertIn("%s:2" % path, err)


class TestVersion(unittest.TestCase):
    def test_both_programs(self):
        for prog, path in (("tallyd", TALLYD), ("tally", TALLY)):
            r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, VERSION_RE % prog)
        with open(os.path.join(REPO_ROOT, "VERSION")) as f:
            version = f.read().strip()
        r = subprocess.run([TALLYD, "--version"], capture_output=True, text=True, timeout=30)
        self.assertTrue(r.stdout.split()[1].startswith(version), r.stdout)


def json_lines(test, text):
    lines = [l for l in text.split("\n") if l.strip()]
    test.assertTrue(lines, "no lines on stderr")
    objs = []
    for l in lines:
        try:
            obj = json.loads(l)
        except ValueError:
            test.fail("a line that is not JSON: %r" % l)
        for key in ("ts", "level", "event", "msg"):
            test.assertIn(key, obj, l)
        objs.append(obj)
    return objs


class TestLogFormat(ConfigTestCase):
    def test_json_lines_of_a_run(self):
        s = Server(args=["--log-format", "json", "--access-log", "-", "--rate-limit", "1/s:1"])
        try:
            item = uid("i")
            s.put(item, "u1", "like")
            s.put(item, "u1", "dislike")  # 429: the access log's line for it
            s.request("GET", "/v1/items/%s?x=%%22q%%22" % item)
            rc, err = s.signal_and_wait(signal.SIGTERM)
            self.assertEqual(rc, 0, err)
            objs = json_lines(self, err)
        finally:
            s.close()
        events = [o["event"] for o in objs]
        self.assertIn("access", events)
        self.assertIn("shutdown", events)
        statuses = [o.get("status") for o in objs if o["event"] == "access"]
        self.assertIn(429, statuses)

    def test_fatal_errors_in_json(self):
        for args in (["--listen", "nonsense"], ["--no-such-flag"], ["--listen", "127.0.0.1:0", "--config",
                                                                    os.path.join(self.tmp, "gone.conf")]):
            rc, out, err = run_tallyd(["--log-format", "json"] + args + store_args(os.path.join(self.tmp, "d")))
            self.assertEqual(rc, 2, err)
            objs = json_lines(self, err)
            self.assertEqual(objs[-1]["level"], "error")
        # a fatal error after the flags: the port is taken
        with Server() as s:
            rc, out, err = run_tallyd(["--log-format", "json", "--listen", "%s:%d" % (s.host, s.port)] +
                                      store_args(os.path.join(self.tmp, "d2")))
            self.assertEqual(rc, 1, err)
            self.assertIn("cannot listen", json_lines(self, err)[-1]["msg"])

    def test_bad_format_exit_2(self):
        rc, out, err = run_tallyd(["--log-format", "xml", "--listen", "127.0.0.1:0"] +
                                  store_args(os.path.join(self.tmp, "d")))
        self.assertEqual(rc, 2, err)
        self.assertIn("--log-format", err)


class TestFlagNames(ConfigTestCase):
    def test_abbreviations_refused_and_secrets_never_echoed(self):
        data = store_args(os.path.join(self.tmp, "d"))
        for args in (["--list", "127.0.0.1:0"], ["--thread", "4"], ["--listen=127.0.0.1:0", "--log-f", "json"]):
            rc, out, err = run_tallyd(args + data)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn("unknown flag", err)
        for args in (["--sotre=postgresql://u:hunter2pw@h/db"], ["postgresql://u:hunter2pw@h/db"]):
            rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + args + data)
            self.assertEqual(rc, 2, (args, err))
            self.assertNotIn("hunter2pw", err)

    def test_store_repeats_once_per_shard_up_to_256(self):
        many = []
        for i in range(257):
            many += ["--store", "postgresql://h%d/db" % i]
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + many)
        self.assertEqual(rc, 2, err)
        self.assertIn("256 shards at most", err)
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--store", "postgresql://h1/db",
                                   "--data", "/nonexistent", "--store", "postgresql://h2/db"])
        self.assertEqual(rc, 2, err)
        self.assertIn("not both", err)


class TestReload(ConfigTestCase):
    def reload(self, s, event):
        n = s.stderr().count(event)
        os.kill(s.pid, signal.SIGHUP)
        wait_for(lambda: s.stderr().count(event) > n, what=event + " after SIGHUP")

    def test_sighup_changes_rate_limit_and_origins_and_a_bad_file_changes_nothing(self):
        path = self.conf("rate-limit = off\ncors-origin = %s\n" % A)
        with Server(args=["--config", path]) as s:
            item = uid("i")
            for k in range(4):
                self.assertEqual(s.put(item, "u1", ["like", "dislike"][k % 2])[0], 200)
            write(path, "rate-limit = 1/s:1\ncors-origin = %s\nthreads = 1\n" % B)
            self.reload(s, "event=reloaded")
            self.assertIn("event=config-changed flag=--rate-limit", s.stderr())
            self.assertIn("event=restart-needed flag=--threads", s.stderr())
            self.assertEqual(allowed_origin(s, B), B)
            self.assertIsNone(allowed_origin(s, A))
            codes = [s.put(item, "u2", ["like", "dislike"][k % 2])[0] for k in range(3)]
            self.assertIn(429, codes, "the rate limit given on reload applies")

            write(path, "rate-limit = off\ncors-origin = %s\nbogus = 1\n" % A)
            self.reload(s, "event=reload-failed")
            self.assertIn("%s:3" % path, s.stderr().split("event=reload-failed")[-1])
            self.assertEqual(allowed_origin(s, B), B, "a broken file changed the origins")
            self.assertIsNone(allowed_origin(s, A))
            codes = [s.put(item, "u3", ["like", "dislike"][k % 2])[0] for k in range(3)]
            self.assertIn(429, codes, "a broken file changed the rate limit")

            # the limit turned off again, live
            write(path, "rate-limit = off\ncors-origin = %s\n" % B)
            self.reload(s, "event=reloaded")
            codes = [s.put(item, "u4", ["like", "dislike"][k % 2])[0] for k in range(4)]
            self.assertEqual(codes, [200] * 4)
            self.assertTrue(s.running)

    def test_sighup_changes_trusted_proxies_and_public_max_age(self):
        log = os.path.join(self.tmp, "access-proxies.log")
        path = self.conf("access-log = %s\npublic-max-age = 1s\n" % log)
        fwd = {"X-Forwarded-For": "203.0.113.7"}
        with Server(args=["--config", path]) as s:
            st, h, _ = s.request("GET", "/v1/items/before", headers=fwd)
            self.assertEqual(st, 200)
            self.assertIn("max-age=1", h.get("cache-control", ""))
            wait_for(lambda: "/v1/items/before" in open(log).read(), what="the first access line")
            line = [l for l in open(log) if "/v1/items/before" in l][-1]
            self.assertIn("peer=127.0.0.1 ", line, "an untrusted peer's header was read")
            write(path, "access-log = %s\npublic-max-age = 7s\ntrusted-proxies = 127.0.0.1/32\n" % log)
            self.reload(s, "event=reloaded")
            self.assertIn("event=config-changed flag=--trusted-proxies", s.stderr())
            st, h, _ = s.request("GET", "/v1/items/after", headers=fwd)
            self.assertEqual(st, 403, "development mode refuses a forwarded client that is not loopback")
            st, h, _ = s.request("GET", "/v1/items/after2", headers={"X-Forwarded-For": "127.0.0.9"})
            self.assertEqual(st, 200)
            self.assertIn("max-age=7", h.get("cache-control", ""))
            wait_for(lambda: "/v1/items/after2" in open(log).read(), what="the access line after reload")
            line = [l for l in open(log) if "/v1/items/after2" in l][-1]
            self.assertIn("peer=127.0.0.9 proxy=127.0.0.1", line)

    def test_refused_secret_keeps_the_old_one_and_the_rest_applies(self):
        import base64, hashlib, hmac
        from harness import secret as new_secret

        def b64(d):
            return base64.urlsafe_b64encode(d).rstrip(b"=").decode()

        def tok(user, secret):
            h = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
            p = b64(json.dumps({"sub": user, "exp": int(time.time()) + 300}).encode())
            sig = hmac.new(secret.encode(), (h + "." + p).encode(), hashlib.sha256).digest()
            return {"Authorization": "Bearer " + h + "." + p + "." + b64(sig)}

        good, weak = new_secret("kept"), "A" * 40
        good_path, weak_path = os.path.join(self.tmp, "good"), os.path.join(self.tmp, "weak")
        write(good_path, good + "\n")
        write(weak_path, weak + "\n")
        path = self.conf("jwt-secret-file = %s\nrate-limit = off\n" % good_path)
        with Server(args=["--config", path], env=child_env()) as s:
            item = uid("i")
            write(path, "jwt-secret-file = %s\nrate-limit = 1/s:1\n" % weak_path)
            self.reload(s, "event=reloaded")
            err = s.stderr()
            self.assertIn("event=secrets-reload", err)
            self.assertIn("event=config-kept flag=--jwt-secret-file", err)
            self.assertNotIn("event=config-changed flag=--jwt-secret-file", err)
            self.assertIn("event=config-changed flag=--rate-limit", err, "the other settings apply")
            st = s.request("GET", "/v1/items/%s/reaction" % item, headers=tok("u1", good))[0]
            self.assertEqual(st, 200, "the secret in force was kept")
            self.assertEqual(s.request("GET", "/v1/items/%s/reaction" % item, headers=tok("u1", weak))[0], 401)
            codes = [s.request("PUT", "/v1/items/%s/reaction" % item, body={"reaction": r},
                               headers=tok("u2", good))[0] for r in ("like", "dislike", "like")]
            self.assertIn(429, codes, "the rate limit of the same reload applies")
            # the next reload with a good secret file applies it (the kept values were not lost)
            write(path, "jwt-secret-file = %s\nrate-limit = off\n" % good_path)
            n = s.stderr().count("event=secrets-reloaded")
            self.reload(s, "event=reloaded")
            self.assertGreater(s.stderr().count("event=secrets-reloaded"), n)
            st = s.request("GET", "/v1/items/%s/reaction" % item, headers=tok("u1", good))[0]
            self.assertEqual(st, 200)

    def test_switch_to_tokens_is_not_logged_as_changed(self):
        secret_path = os.path.join(self.tmp, "s")
        write(secret_path, "x" * 10 + "\n")
        path = self.conf("cors-origin = %s\n" % A)
        with Server(args=["--config", path]) as s:
            write(path, "cors-origin = %s\njwt-secret-file = %s\n" % (B, secret_path))
            self.reload(s, "event=reloaded")
            err = s.stderr()
            self.assertIn("event=restart-needed flag=--jwt-secret-file", err)
            self.assertNotIn("event=config-changed flag=--jwt-secret-file", err)
            self.assertEqual(allowed_origin(s, B), B)
            self.assertEqual(s.request("GET", "/v1/items/x/reaction", headers={"X-User-Id": "u"})[0], 200,
                             "still development mode")

    def test_command_line_value_never_changes_on_reload(self):
        path = self.conf("cors-origin = %s\n" % A)
        with Server(args=["--config", path, "--cors-origin", B]) as s:
            write(path, "cors-origin = https://c.example\n")
            self.reload(s, "event=reloaded")
            self.assertEqual(allowed_origin(s, B), B)
            self.assertIsNone(allowed_origin(s, "https://c.example"))

    def test_access_log_reopened_after_rotation(self):
        log = os.path.join(self.tmp, "access.log")
        path = self.conf("access-log = %s\n" % log)
        with Server(args=["--config", path]) as s:
            s.request("GET", "/v1/items/first")
            wait_for(lambda: "first" in open(log).read(), what="the first access line")
            os.rename(log, log + ".1")
            self.reload(s, "event=reloaded")
            s.request("GET", "/v1/items/second")
            wait_for(lambda: os.path.exists(log) and "second" in open(log).read(),
                     what="the access line in the new file")
            self.assertNotIn("second", open(log + ".1").read())

    def test_reload_without_config_file_keeps_running(self):
        with Server(args=["--cors-origin", A]) as s:
            self.reload(s, "event=sighup")
            self.assertEqual(allowed_origin(s, A), A)


class TestNotify(ConfigTestCase):
    def recv_until(self, sock, want, timeout=10.0):
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                msg = sock.recv(4096).decode()
            except socket.timeout:
                break
            got.append(msg)
            if want in msg.split("\n"):
                return got
        raise AssertionError("no %s among %r" % (want, got))

    def test_ready_reloading_stopping(self):
        addr = os.path.join(self.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(addr)
        path = self.conf("rate-limit = off\n")
        try:
            s = Server(args=["--config", path], env=child_env({"NOTIFY_SOCKET": addr}))
            try:
                got = self.recv_until(sock, "READY=1")
                ready = [m for m in got if "READY=1" in m.split("\n")][0]
                self.assertIn("STATUS=", ready)
                self.assertIn("%s:%d" % (s.host, s.port), ready, "READY=1 after the listening line")
                os.kill(s.pid, signal.SIGHUP)
                got = self.recv_until(sock, "READY=1")
                joined = "\n".join(got)
                self.assertIn("RELOADING=1", joined)
                self.assertRegex(joined, r"MONOTONIC_USEC=\d+")
                s.signal_and_wait(signal.SIGTERM)
                self.recv_until(sock, "STOPPING=1")
            finally:
                s.close()
        finally:
            sock.close()

    def test_without_notify_socket_nothing_changes(self):
        env = child_env()
        env.pop("NOTIFY_SOCKET", None)
        with Server(env=env) as s:
            self.assertEqual(s.put(uid("i"), "u1", "like")[0], 200)


class TestBuildMetrics(ConfigTestCase):
    def test_build_info_and_start_time(self):
        before = time.time()
        with Server() as s:
            st, _, body = s.request("GET", "/metrics")
            text = body.decode()
        m = re.search(r'^tally_build_info\{version="([^"]+)",store="(lmdb|postgresql)",mode="(one|many)"\} 1$',
                      text, re.M)
        self.assertIsNotNone(m, text[:2000])
        r = subprocess.run([TALLYD, "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(m.group(1), r.stdout.split()[1])
        self.assertEqual(m.group(2), "postgresql" if PG else "lmdb")
        t = re.search(r"^tally_start_time_seconds (\S+)$", text, re.M)
        self.assertIsNotNone(t)
        self.assertTrue(before - 1 <= float(t.group(1)) <= time.time() + 1)


class TestToolConfig(ConfigTestCase):
    @embedded_only("tally stats reads an embedded store")
    def test_tally_reads_tallyd_config(self):
        data = os.path.join(self.tmp, "data")
        path = self.conf("listen = 127.0.0.1:0\ndata = %s\nrate-limit = off\n" % data)
        with Server(args=["--config", path], data_dir=data) as s:
            s.put(uid("i"), "u1", "like")
        r = subprocess.run([TALLY, "stats", "--config", path], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["rows"], 1)
        write(path, "data = %s\nnope = 1\n" % data)
        r = subprocess.run([TALLY, "stats", "--config", path], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("%s:2" % path, r.stderr)
