"""The periodic recount (--recount-interval), the access log (--access-log), and an import
file holding a 1 GB line (read without holding it)."""

import os
import re
import time

from harness import SLOW, Server, TallyTestCase, embedded_only
from test_ops import corrupt_count, tally, show


class PeriodicRecountTest(TallyTestCase):

    @embedded_only("corrupt_count edits a count in the embedded store's files")
    def test_drift_is_found_corrected_and_logged(self):
        with Server(args=["--recount-interval", "1s"]) as s:
            for u in ("a", "b"):
                self.assertEqual(s.put("pr-item", u, "like")[0], 200)
            s.stop()
            corrupt_count(s.data_dir, "pr-item", "like", 5)
            s.start()
            self.assertEqual(s.counts("pr-item"), {"like": 7, "dislike": 0})
            deadline = time.monotonic() + 8 * SLOW
            while time.monotonic() < deadline and s.counts("pr-item") != {"like": 2, "dislike": 0}:
                time.sleep(0.1)
            self.assertEqual(s.counts("pr-item"), {"like": 2, "dislike": 0}, "drift not corrected")
            metrics = s.json("GET", "/metrics")[3].decode()
            m = re.search(r"^tally_recount_corrections_total (\d+)", metrics, re.M)
            self.assertTrue(m and int(m.group(1)) >= 1, metrics[-500:])
            self.assertIn("event=drift item=pr-item", s.stderr())

    def test_off_means_no_recount(self):
        with Server(args=["--recount-interval", "0"]) as s:
            s.put("pr-off", "a", "like")
            time.sleep(1.2)
            metrics = s.json("GET", "/metrics")[3].decode()
            self.assertRegex(metrics, r"(?m)^tally_recount_runs_total 0$")

    def test_bad_interval_is_a_usage_error(self):
        s = Server(args=["--recount-interval", "soon"], start=False)
        try:
            with self.assertRaises(Exception):
                s.start()
        finally:
            s.close()


class AccessLogTest(TallyTestCase):

    def test_one_line_per_answer(self):
        s = Server(start=False)
        log = os.path.join(s.tmp, "access.log")
        s.args = ["--access-log", log]
        try:
            s.start()
            s.put("al-item", "u1", "like")
            s.json("GET", "/v1/items/al-item")
            s.json("GET", '/v1/items/a"b')
            s.json("GET", "/nowhere")
            s.stop()
            with open(log) as f:
                lines = f.read().splitlines()
            self.assertEqual(len(lines), 4, lines)
            pat = re.compile(r'^ts=\S+Z method=(\S+) route=(\S+) status=(\d+) bytes=\d+ us=\d+ peer=127\.0\.0\.1 '
                             r'target="(.*)"$')
            parsed = [pat.match(l) for l in lines]
            self.assertTrue(all(parsed), lines)
            self.assertEqual([(m.group(1), m.group(2), m.group(3)) for m in parsed],
                             [("PUT", "reaction", "200"), ("GET", "item", "200"), ("GET", "item", "400"),
                              ("GET", "not_found", "404")])
            self.assertEqual(parsed[2].group(4), '/v1/items/a\\"b')
        finally:
            s.close()


@embedded_only("the tally tool imports into a data directory")
class HugeLineImportTest(TallyTestCase):

    def test_a_1gb_line_is_rejected_by_number_and_the_rest_applied(self):
        s = Server(start=False)
        try:
            path = os.path.join(s.tmp, "huge.ndjson")
            with open(path, "wb") as f:
                f.write(b'{"item":"hl-a","user":"u1","reaction":"like"}\n')
                f.write(b"x")
                f.seek(1 << 30, os.SEEK_CUR)  # a sparse gigabyte of NUL bytes on the same line
                f.write(b"\n")
                f.write(b'{"item":"hl-a","user":"u2","reaction":"like"}\n')
            r = tally("import", "--data", s.data_dir, "--reactions", "like,dislike", path, timeout=300)
            self.assertEqual(r.returncode, 0, show(r))
            self.assertIn('"read":3', r.stdout)
            self.assertIn('"applied":2', r.stdout)
            self.assertIn('"rejected":1', r.stdout)
            self.assertIn("line 2: line longer than 65536 bytes", r.stderr)
            s.start()
            self.assertEqual(s.counts("hl-a"), {"like": 2, "dislike": 0})
        finally:
            s.close()
