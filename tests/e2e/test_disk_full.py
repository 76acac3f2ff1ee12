"""A store that runs out of space: writes get 503 `unavailable` with Retry-After and are not
applied, the server keeps serving reads and stays calm (no busy loop), nothing acknowledged
before is lost, and counts still equal the rows."""

import os
import re
import time
import threading

from harness import Server, TallyTestCase, embedded_only, metric

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
