"""A store that runs out of space: writes get 503 `unavailable` with Retry-After and are not
applied, the server keeps serving reads and stays calm (no busy loop), nothing acknowledged
before is lost, and counts still equal the rows."""

import errno
import os
import re
import shutil
import subprocess
import tempfile
import time
import threading

from harness import REPO_ROOT, SLOW, Server, TallyTestCase, child_env, embedded_only, metric, uid

MAP = "16M"  # the smallest --map-size; a few tens of thousands of rows fill it


@embedded_only("--map-size: the embedded store's map filling up (PostgreSQL has no map)")
class DiskFullTest(TallyTestCase):

    def test_full_store_answers_503_and_loses_nothing(self):
        with Server(args=["--map-size", MAP, "--rate-limit", "off"]) as s:
            acked = {}
            full = []
            lock = threading.Lock()
            stop = threading.Event()

            def writer(t):
                c = s.client()
                try:
                    for i in range(20000):
                        if stop.is_set():
                            return
                        user = ("u%d-%d-" % (t, i)).ljust(120, "x")  # long ids fill the map sooner
                        st, hdrs, doc, raw = c.json("PUT", "/v1/items/df-%d/reaction" % (i % 50),
                                                    {"reaction": "like"}, user=user)
                        with lock:
                            if st == 200:
                                acked[(i % 50, user)] = doc["version"]
                            elif st == 503:
                                full.append((hdrs.get("retry-after"), doc))
                                if len(full) > 20:
                                    stop.set()
                            else:
                                full.append(("unexpected", st, raw[:200]))
                                stop.set()
                finally:
                    c.close()

            threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
            deadline = time.monotonic() + 120
            for th in threads:
                th.start()
            for th in threads:
                th.join(max(1, deadline - time.monotonic()))
            stop.set()
            self.assertTrue(full, "the store never filled up (%d writes acknowledged)" % len(acked))
            for entry in full:
                self.assertEqual(len(entry), 2, entry)
                retry_after, doc = entry
                self.assertEqual(retry_after, "1")
                self.assertEqual(doc["type"], "urn:tally:error:unavailable")
            # Still serving, and calm: the writer does not spin on its failing commits.
            self.assertEqual(s.json("GET", "/healthz")[0], 200)
            # Not ready while writes fail: an orchestrator takes the node out of rotation.
            st, _, doc, raw = s.json("GET", "/readyz")
            self.assertEqual(st, 503, raw)
            self.assertIn("writes failing", doc.get("reason", ""))
            self.assertEqual(metric(s, "tally_writes_failing"), 1)
            pid = s.proc.popen.pid
            def cpu():
                with open("/proc/%d/stat" % pid) as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                return int(parts[11]) + int(parts[12])
            before = cpu()
            time.sleep(2)
            ticks = cpu() - before
            self.assertLess(ticks, 0.5 * 2 * os.sysconf("SC_CLK_TCK"), "tallyd kept a core busy while full")
            # Everything acknowledged is there; counts equal the rows that were acknowledged.
            per_item = {}
            for (item, user), version in acked.items():
                per_item[item] = per_item.get(item, 0) + 1
            for item in range(50):
                got = s.counts("df-%d" % item)
                self.assertEqual(got["like"], per_item.get(item, 0), "df-%d" % item)
            sample = list(acked.items())[:: max(1, len(acked) // 200)]
            for (item, user), version in sample:
                doc = s.reaction("df-%d" % item, user)
                self.assertEqual((doc["reaction"], doc["version"]), ("like", version))
            errors = s.stderr()
            self.assertIn("event=commit-failed", errors)
            self.assertLess(len(re.findall("event=commit-failed", errors)), len(full) + 60,
                            "commit failures are not retried in a loop")


def _mount_tmpfs(path, size):
    """A tmpfs of `size` at path (needs root); returns an error text, or None when mounted."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return None if r.returncode == 0 else r.stdout.decode("utf-8", "replace").strip() or "mount failed"


def _fill(path):
    """Writes a file at path until the filesystem is full (returns its size)."""
    n = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                w = os.write(f.fileno(), chunk)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    break
                raise
            if w <= 0:
                break
            n += w
        # a last few bytes into the final partial block, so that not one byte is left
        for size in (4096, 512, 1):
            while True:
                try:
                    os.write(f.fileno(), b"\0" * size)
                except OSError:
                    break
    return n


@embedded_only("the embedded store's journal on a full disk (PostgreSQL keeps no local journal)")
class StartOnFullDiskTest(TallyTestCase):
    """A node whose data disk is 100 % full at a restart: it starts, serves reads, says why it
    is not ready, refuses writes with 503 and Retry-After, and recovers by itself once space
    frees (the journal's start is retried)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tally-e2e-full-")
        self.mnt = os.path.join(self.tmp, "mnt")
        why = _mount_tmpfs(self.mnt, "24m")
        if why:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.skipTest("cannot mount a small tmpfs (needs root): %s" % why)

    def tearDown(self):
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _check_full_start(self, crash, write_while_full):
        data = os.path.join(self.mnt, "data")
        filler = os.path.join(self.mnt, "filler")
        with Server(data_dir=data, args=["--map-size", "16M", "--rate-limit", "off"]) as s:
            item = uid("full")
            before = [uid("u") for _ in range(5)]
            for u in before:
                self.assertEqual(s.put(item, u, "like")[0], 200)
            s.wait_counts(item, {"like": 5, "dislike": 0})
            if crash:
                s.kill9()  # the journal's base and records stay: the start replays them
            else:
                s.stop()
            _fill(filler)
            s.start()
            # Reads: everything acknowledged before.
            self.assertEqual(s.counts(item)["like"], 5)
            for u in before:
                self.assertEqual(s.reaction(item, u)["reaction"], "like")
            self.assertEqual(s.json("GET", "/healthz")[0], 200)
            st, hdrs, doc, raw = s.json("GET", "/readyz")
            self.assertEqual(st, 503, raw)
            self.assertIn("no space", doc.get("reason", "").lower(), raw)
            self.assertEqual(hdrs.get("retry-after"), "1")
            self.assertIn("event=journal-start-deferred", s.stderr())
            u = uid("u")
            if write_while_full:
                # Writes: 503 unavailable with Retry-After, not applied.
                resp = s.put(item, u, "like")
                self.assertProblem(resp, 503, "unavailable")
                self.assertEqual(resp[1].get("retry-after"), "1")
                self.assertEqual(s.reaction(item, u)["reaction"], "none")
            # Space frees: the journal starts by itself (no write needed), writes go through.
            os.unlink(filler)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and "event=journal-started" not in s.stderr():
                time.sleep(0.1)
            self.assertIn("event=journal-started", s.stderr())
            if not write_while_full:  # (a refused write keeps /readyz at 503 for 10 s: "writes failing")
                self.assertEqual(s.json("GET", "/readyz")[0], 200)
            else:
                self.assertNotIn("no space", s.json("GET", "/readyz")[2].get("reason", "").lower())
            self.assertEqual(s.put(item, u, "like")[0], 200)
            self.assertCounts(s, item, {"like": 6, "dislike": 0})
            # Its feature version could not be registered at start (a write): it is, once space
            # frees, by a retry every 5 s.
            self.assertIn("event=feature-version-deferred", s.stderr())
            deadline = time.monotonic() + 10 * SLOW
            while time.monotonic() < deadline and "event=feature-version in_force=" not in s.stderr():
                time.sleep(0.2)
            self.assertIn("event=feature-version in_force=2 ", s.stderr())
            # Durable from there on: a crash keeps it.
            s.kill9()
            s.start()
            self.assertCounts(s, item, {"like": 6, "dislike": 0})

    def test_starts_on_a_full_disk_after_a_clean_stop(self):
        self._check_full_start(crash=False, write_while_full=False)

    def test_starts_on_a_full_disk_after_a_crash(self):
        self._check_full_start(crash=True, write_while_full=True)

    def test_a_store_without_identity_starts_on_a_full_disk(self):
        """A store from before cluster identities (made here by `tally import`, which writes none)
        restarted on a full disk: its identity cannot be written, and tallyd starts all the same
        (it serves reads, as any store on a full disk); the next start with space writes it."""
        data = os.path.join(self.mnt, "data")
        filler = os.path.join(self.mnt, "filler")
        tally = os.path.join(REPO_ROOT, "build", "tally")
        lines = os.path.join(self.tmp, "import.ndjson")
        with open(lines, "w") as f:
            f.write('{"item":"i1","user":"u1","reaction":"like"}\n')
        r = subprocess.run([tally, "import", "--data", data, "--reactions", "like,dislike", lines],
                           capture_output=True, text=True, timeout=60, env=child_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        _fill(filler)
        with Server(data_dir=data, args=["--map-size", "16M"]) as s:
            self.assertEqual(s.counts("i1")["like"], 1)
            self.assertIn("event=cluster-identity-deferred", s.stderr())
            s.stop()
            os.unlink(filler)
            s.start()
            self.assertRegex(s.stderr(), r"event=cluster-identity cluster=[0-9a-f]{32} shards=1 written=1")
            self.assertEqual(s.counts("i1")["like"], 1)
