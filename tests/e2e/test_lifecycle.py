"""Start-up, command line and shutdown, per docs/api.md § Start-up and § Authentication."""

import os
import random
import re
import shutil
import signal
import tempfile
import threading
import time
import unittest

from harness import (one_shard, LISTEN_RE, REPO_ROOT, SLOW, Server, TallyTestCase, child_env, embedded_only, run_tallyd,
                     store_args, uid)


class TmpDirCase(TallyTestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="tally-e2e-life-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def run_flags(self, *extra, data=None, listen="127.0.0.1:0", env=None):
        args = ["--listen", listen] + store_args(data or os.path.join(self.tmp, "data")) + list(extra)
        return run_tallyd(args, env=env)


class StartupTest(TmpDirCase):

    def test_listening_line_and_real_port(self):
        with Server() as s:
            out = s.proc.stdout()
            m = LISTEN_RE.search(out)
            self.assertIsNotNone(m, out)
            self.assertEqual(s.host, "127.0.0.1")
            self.assertGreater(s.port, 0)
            self.assertLess(s.port, 65536)
            st, _, _ = s.request("GET", "/healthz")
            self.assertEqual(st, 200)
            self.assertEqual(len([l for l in out.splitlines() if "listening on" in l]), 1,
                             "exactly one listening line: %r" % out)

    def test_two_servers_port_zero_get_different_ports(self):
        with Server() as a, Server() as b:
            self.assertNotEqual(a.port, b.port)
            self.assertEqual(a.request("GET", "/healthz")[0], 200)
            self.assertEqual(b.request("GET", "/healthz")[0], 200)

    @embedded_only("--data DIR is created if needed")
    def test_data_dir_is_created(self):
        data = os.path.join(self.tmp, "new")
        with Server(data_dir=data) as s:
            self.assertTrue(os.path.isdir(data))
            item, user = uid("item"), uid("user")
            self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)

    @embedded_only("--data DIR is created if needed")
    def test_nested_data_dir_is_created(self):
        # "--data DIR creates the directory if needed": parents included, like mkdir -p
        data = os.path.join(self.tmp, "a", "b", "c")
        with Server(data_dir=data) as s:
            self.assertTrue(os.path.isdir(data))
            item, user = uid("item"), uid("user")
            self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)

    def test_help(self):
        rc, out, err = run_tallyd(["--help"])
        self.assertEqual(rc, 0, err)
        text = out + err
        for flag in ("--listen", "--data", "--reactions"):
            self.assertIn(flag, text)

    def test_help_lists_contract_flags(self):
        # the API's contract names these flags; --help "lists every flag with its default"
        rc, out, err = run_tallyd(["--help"])
        self.assertEqual(rc, 0, err)
        missing = [f for f in ("--jwt-secret-file", "--idempotency-ttl", "--rate-limit",
                               "--hot-threshold") if f not in out + err]
        self.assertEqual(missing, [], "flags missing from --help:\n" + out + err)

    def test_help_says_what_a_small_max_connections_does_to_live_streams(self):
        rc, out, err = run_tallyd(["--help"])
        self.assertEqual(rc, 0, err)
        text = " ".join((out + err).split())
        self.assertIn("At 5000 or less, and without --max-live-streams, live streams get half of it", text)
        self.assertIn("the default becomes half of --max-connections when that is 5000 or less", text)

    def test_operations_doc_shows_this_help(self):
        """docs/operations.md shows `tallyd --help` as it is: a flag added, or its text changed,
        without the page following fails here (paste the output of build/tallyd --help)."""
        rc, out, err = run_tallyd(["--help"])
        self.assertEqual(rc, 0, err)
        with open(os.path.join(REPO_ROOT, "docs", "operations.md"), encoding="utf-8") as f:
            doc = f.read()
        m = re.search(r"```\n(usage: tallyd \[flags\]\n.*?)```", doc, re.S)
        self.assertIsNotNone(m, "no --help block in docs/operations.md")
        self.assertEqual(m.group(1), out)

    def test_unknown_flag(self):
        rc, out, err = self.run_flags("--frobnicate")
        self.assertEqual(rc, 2, err)
        self.assertIn("--frobnicate", err)

    def test_unknown_flag_alone(self):
        rc, out, err = run_tallyd(["--no-such-flag=1"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--no-such-flag", err)

    def test_bad_listen(self):
        for value in ("127.0.0.1", "127.0.0.1:99999", "127.0.0.1:port", ":", ""):
            with self.subTest(listen=value):
                rc, out, err = self.run_flags(listen=value)
                self.assertEqual(rc, 2, err)
                self.assertIn("listen", err)

    def test_missing_flag_value(self):
        rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data"])
        self.assertEqual(rc, 2, err)
        self.assertIn("data", err)

    def test_bad_reactions(self):
        cases = {
            "uppercase": "Like",
            "reserved none": "none",
            "reserved reaction": "like,reaction",
            "duplicate": "a,a",
            "17 kinds": ",".join("k%d" % i for i in range(17)),
            "33 bytes": "k" * 33,
            "empty": "",
            "empty entry": "like,,dislike",
            "trailing comma": "like,",
            "dash": "thumbs-up",
            "space": "like, dislike",
        }
        for name, value in cases.items():
            with self.subTest(name, reactions=value):
                rc, out, err = self.run_flags("--reactions", value)
                self.assertEqual(rc, 2, "stdout=%r stderr=%r" % (out, err))
                self.assertIn("reactions", err)

    def test_reactions_boundaries_ok(self):
        kinds = ["k%d" % i for i in range(15)] + ["z" * 32]
        with Server(args=["--reactions", ",".join(kinds)]) as s:
            doc = self.assertOk(s.item("x"))
            self.assertEqual(list(doc["counts"]), kinds)
            self.assertEqual(set(doc["counts"].values()), {0})
            item, user = uid("item"), uid("user")
            self.assertWrite(s.json("PUT", "/v1/items/%s/%s" % (item, "z" * 32), user=user),
                             item, "z" * 32, "none", 1, True)
        with Server(args=["--reactions", "a_1,b"]) as s:
            self.assertEqual(list(self.assertOk(s.item("x"))["counts"]), ["a_1", "b"])

    @embedded_only("the single-instance lock of --data; on PostgreSQL several nodes share one "
                   "database (test_pg_nodes)")
    def test_second_server_on_same_data_dir(self):
        with Server() as a:
            item, user = uid("item"), uid("user")
            self.assertWrite(a.put(item, user, "like"), item, "like", "none", 1, True)
            rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", a.data_dir])
            self.assertEqual(rc, 1, "second server: stdout=%r stderr=%r" % (out, err))
            self.assertTrue(err.strip(), "no message on stderr")
            # the first keeps serving, reads and writes
            self.assertTrue(a.running)
            self.assertEqual(a.request("GET", "/healthz")[0], 200)
            self.assertWrite(a.put(item, user, "dislike"), item, "dislike", "like", 2, True)
            self.assertCounts(a, item, {"like": 0, "dislike": 1})

    @embedded_only("the single-instance lock of --data")
    def test_lock_survives_deleting_files(self):
        """The instance lock is the directory itself: deleting the lock file of an earlier version
        (tallyd.lock), or any file, under a running server does not let a second one in."""
        tmp = tempfile.mkdtemp(prefix="tally-e2e-lock-")
        data = os.path.join(tmp, "data")
        try:
            os.mkdir(data)
            with open(os.path.join(data, "tallyd.lock"), "w"):
                pass  # as an earlier version left it
            with Server(data_dir=data) as a:
                item, user = uid("item"), uid("user")
                self.assertWrite(a.put(item, user, "like"), item, "like", "none", 1, True)
                os.unlink(os.path.join(data, "tallyd.lock"))
                rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", data])
                self.assertEqual(rc, 1, "second server after rm tallyd.lock: stdout=%r stderr=%r"
                                 % (out, err))
                self.assertIn("in use", err)
                self.assertFalse(os.path.exists(os.path.join(data, "tallyd.lock")),
                                 "the lock writes no file")
                os.unlink(os.path.join(data, "TALLY_STORE"))  # the marker is not the lock either
                rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", data])
                self.assertEqual(rc, 1, "second server after rm TALLY_STORE: %r" % err)
                self.assertTrue(a.running)
                self.assertWrite(a.put(item, user, "dislike"), item, "dislike", "like", 2, True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @embedded_only("--data DIR: another program's files in the directory")
    def test_refuses_a_directory_that_is_not_a_tally_store(self):
        """Another program's files, or a data.mdb that is not LMDB, are refused before anything is
        written: exit 1, a message, every byte as it was."""
        tmp = tempfile.mkdtemp(prefix="tally-e2e-foreign-")
        try:
            cases = {"other-files": {"notes.txt": b"mine"},
                     "garbage-mdb": {"data.mdb": b"x" * 8192, "lock.mdb": b"y" * 100}}
            for name, files in cases.items():
                with self.subTest(case=name):
                    data = os.path.join(tmp, name)
                    os.mkdir(data)
                    for f, content in files.items():
                        with open(os.path.join(data, f), "wb") as fh:
                            fh.write(content)
                    rc, out, err = run_tallyd(["--listen", "127.0.0.1:0", "--data", data])
                    self.assertEqual(rc, 1, "stdout=%r stderr=%r" % (out, err))
                    self.assertIn("not a tally store", err)
                    self.assertEqual(sorted(os.listdir(data)), sorted(files), "files were added")
                    for f, content in files.items():
                        with open(os.path.join(data, f), "rb") as fh:
                            self.assertEqual(fh.read(), content, "%s was changed" % f)
            # an empty directory becomes a store, marked as tally's
            data = os.path.join(tmp, "empty")
            os.mkdir(data)
            with Server(data_dir=data) as s:
                self.assertEqual(s.request("GET", "/healthz")[0], 200)
            with open(os.path.join(data, "TALLY_STORE")) as fh:
                self.assertTrue(fh.read().startswith("tally store"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @one_shard("one writer, feed and fold thread each (a thread per shard with several)")
    def test_engine_threads_are_named(self):
        """ps -L, top -H and gdb tell the engine's threads apart: /proc/PID/task/*/comm."""
        with Server() as s:
            self.assertEqual(s.put(uid("item"), uid("user"), "like")[0], 200)
            task_dir = "/proc/%d/task" % s.pid
            wanted = ("tally-writer", "tally-feed", "tally-trending", "tally-recount")
            deadline = time.monotonic() + 5 * SLOW  # a thread names itself once it runs
            while True:
                names = []
                for tid in os.listdir(task_dir):
                    try:
                        with open(os.path.join(task_dir, tid, "comm")) as f:
                            names.append(f.read().strip())
                    except OSError:
                        pass  # a thread that ended meanwhile (the row filter's fill)
                if all(w in names for w in wanted) or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            for want in ("tally-writer", "tally-feed", "tally-trending", "tally-recount"):
                self.assertEqual(names.count(want), 1, "%s among %r" % (want, sorted(names)))

    def test_development_mode_refuses_non_loopback(self):
        env = child_env()
        self.assertNotIn("TALLY_JWT_SECRET", env)
        rc, out, err = self.run_flags(listen="0.0.0.0:0", env=env)
        self.assertEqual(rc, 1, "stdout=%r stderr=%r" % (out, err))
        self.assertTrue(err.strip(), "no message on stderr")
        self.assertNotIn("listening on", out)

    def test_development_mode_warns(self):
        with Server() as s:
            err = s.stderr()
            self.assertTrue(re.search(r"(?i)develop|warn|x-user-id|jwt", err),
                            "no development-mode warning on stderr: %r" % err)


class ShutdownTest(TallyTestCase):

    def _signal_keeps_data(self, sig):
        with Server() as s:
            item, user = uid("item"), uid("user")
            self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
            self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "like", 2, True)
            other = uid("user")
            self.assertWrite(s.put(item, other, "dislike"), item, "dislike", "none", 1, True)
            s.stop(sig)  # asserts exit status 0
            s.start()
            self.assertEqual(s.reaction(item, user),
                             {"item": item, "reaction": "dislike", "version": 2})
            self.assertCounts(s, item, {"like": 0, "dislike": 2})
            self.assertWrite(s.put(item, user, "none"), item, "none", "dislike", 3, True)

    def test_sigterm_exit_0_and_data_kept(self):
        self._signal_keeps_data(signal.SIGTERM)

    def test_sigint_exit_0_and_data_kept(self):
        self._signal_keeps_data(signal.SIGINT)

    def test_stop_right_after_write(self):
        # the counts pipeline may lag; a graceful stop must not lose what it had not folded
        with Server() as s:
            item = uid("item")
            users = [uid("user") for _ in range(20)]
            for u in users:
                self.assertEqual(s.put(item, u, "like")[0], 200)
            s.stop()
            s.start()
            self.assertCounts(s, item, {"like": 20, "dislike": 0})

    def test_sigterm_under_load_keeps_acked_writes(self):
        with Server() as s:
            item = uid("item")
            acked = {}  # user -> (reaction, version)
            unanswered = {}  # user -> (reaction sent, error)
            errors = []
            stop = threading.Event()
            lock = threading.Lock()

            def worker(n):
                rnd = random.Random(n)
                users = ["%s-w%d-u%d" % (item, n, k) for k in range(4)]
                c = s.client(timeout=10)
                deadline = time.monotonic() + 8
                try:
                    while not stop.is_set() and time.monotonic() < deadline:
                        u = rnd.choice(users)
                        r = rnd.choice(["like", "dislike", "none"])
                        try:
                            st, _, doc, raw = c.json("PUT", "/v1/items/%s/reaction" % item,
                                                     {"reaction": r}, user=u)
                        except Exception as e:
                            # the server is going away: a request it had read must still be
                            # answered ("finish in-flight requests"), so an unanswered one
                            # must not have been applied
                            with lock:
                                unanswered[u] = (r, repr(e))
                            return
                        if st == 200:
                            with lock:
                                acked[u] = (doc["reaction"], doc["version"])
                        elif st not in (429, 503):
                            errors.append((st, raw[:200]))
                            return
                finally:
                    c.close()

            threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.7)
            s.stop(signal.SIGTERM)  # exit 0 even with requests in flight
            stop.set()
            for t in threads:
                t.join(15)
            self.assertEqual(errors, [])
            self.assertTrue(acked, "no write was acknowledged before SIGTERM")
            with lock:
                final = dict(acked)
                for u in unanswered:
                    final.setdefault(u, ("none", 0))
            s.start()
            tally = {"like": 0, "dislike": 0}
            for u, (r, v) in sorted(final.items()):
                doc = s.reaction(item, u)
                self.assertEqual((doc["reaction"], doc["version"]), (r, v),
                                 "user %s: acknowledged write lost, or an unanswered write "
                                 "applied (unanswered: %r)" % (u, unanswered.get(u)))
                if r != "none":
                    tally[r] += 1
            self.assertCounts(s, item, tally, timeout=3)


if __name__ == "__main__":
    unittest.main()
