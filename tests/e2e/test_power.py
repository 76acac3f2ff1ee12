"""Power loss, proved by ordering: kill -9 keeps the page cache, so it cannot show that an
acknowledged write reached the disk. This test runs tallyd under an LD_PRELOAD shim
(tests/tools/syncorder.c, test-only) that records, in one global order, every request read from
a socket, every response written to one, and every fdatasync of the store's journal (the commit
point: a batch's record is appended to journal-0 or journal-1 and synced before LMDB commits it,
src/store/lmdb/lmdb_journal.c). Each 2xx answer to a write that changed something must leave only
after a journal sync that began after its request arrived. An answer with "changed":false reports
a row that an earlier commit already made durable (the writer commits batches one after another,
each synced before the next begins), and a transaction that wrote nothing has no record — so those
need no sync of their own; they are counted, not checked. What a power loss leaves of the B-tree is
the journal's other half: test_crash.JournalRecoveryTest.

The shim is loaded into the release build (ASan insists on being the first library loaded)."""

import os
import threading
import unittest

from harness import REPO_ROOT, Server, child_env, embedded_only

SHIM = os.path.join(REPO_ROOT, "build", "syncorder.so")
RELEASE = os.path.join(REPO_ROOT, "build", "tallyd")
WRITE_METHODS = ("PUT", "POST", "DELETE")


def check_order(lines):
    """Returns (violations, acknowledged changes, commits) for a syncorder log."""
    syncs = []  # (begin seq, end seq)
    open_sync = None
    pending = {}  # fd -> (seq, method) of the request not yet answered
    pairs = []
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "JB":
            open_sync = int(parts[1])
        elif parts[0] == "JE" and open_sync is not None:
            syncs.append((open_sync, int(parts[1])))
            open_sync = None
        elif parts[0] == "R" and len(parts) > 3 and parts[3].isalpha() and parts[3].isupper():
            # the start of a request (a later read of the same request, its body, starts otherwise)
            pending[parts[1]] = (int(parts[2]), parts[3])
        elif parts[0] == "W" and parts[1] in pending:
            req_seq, method = pending.pop(parts[1])
            pairs.append((req_seq, method, int(parts[2]), parts[3], parts[4] if len(parts) > 4 else "-"))
    violations, acked = [], 0
    for req_seq, method, resp_seq, status, changed in pairs:
        if method not in WRITE_METHODS or not status.startswith("2") or changed == "n":
            continue
        acked += 1
        if not any(req_seq < b and e < resp_seq for b, e in syncs):
            violations.append((req_seq, method, resp_seq, status))
    return violations, acked, len(syncs)


class ShimServer(Server):
    def argv(self, args=None):
        return [RELEASE] + super().argv(args)[1:]


class PowerLossOrderTest(unittest.TestCase):

    def test_checker_catches_an_early_answer(self):
        # A synthetic log where the answer leaves before the journal's sync ends.
        bad = ["R 5 1 PUT /v", "JB 2", "W 5 3 200 c", "JE 4"]
        good = ["R 5 1 PUT /v", "R 5 2 {\"rea", "SB 3", "SE 4", "JB 5", "JE 6", "W 5 7 200 c"]
        stale = ["JB 1", "JE 2", "R 5 3 PUT /v", "W 5 4 200 c"]  # a sync from before the request
        other = ["R 5 1 PUT /v", "SB 2", "SE 3", "MB 4", "ME 5", "W 5 6 200 c"]  # not the journal's
        unchanged = ["JB 1", "JE 2", "R 5 3 PUT /v", "W 5 4 200 n"]
        self.assertEqual(check_order(unchanged), ([], 0, 1))
        self.assertEqual(len(check_order(bad)[0]), 1)
        self.assertEqual(check_order(good), ([], 1, 1))
        self.assertEqual(len(check_order(stale)[0]), 1)
        self.assertEqual(len(check_order(other)[0]), 1)

    @embedded_only("the power-loss shim watches the embedded store's journal syncs; on PostgreSQL durability "
                   "is the server's commit (test_pg_failover)")
    @unittest.skipUnless(os.path.exists(SHIM) and os.path.exists(RELEASE), "needs build/syncorder.so")
    def test_every_acknowledged_write_follows_its_sync(self):
        srv = ShimServer(args=["--rate-limit", "off"], start=False)
        log = os.path.join(srv.tmp, "syncorder.log")
        srv.env = child_env({"LD_PRELOAD": SHIM, "SYNCORDER_LOG": log})
        try:
            srv.start()
            errors = []

            def client(t):
                c = srv.client()
                try:
                    for i in range(40):
                        user = "u%d-%d" % (t, i % 7)
                        kind = ("like", "dislike", "none")[(t + i) % 3]
                        st, _, _, raw = c.json("PUT", "/v1/items/p%d/reaction" % (i % 3),
                                               {"reaction": kind}, user=user)
                        if st != 200:
                            errors.append((st, raw[:200]))
                        if i % 10 == 0:
                            c.json("GET", "/v1/items/p0")
                finally:
                    c.close()

            threads = [threading.Thread(target=client, args=(t,)) for t in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            self.assertEqual(errors, [])
            srv.stop()
            with open(log) as f:
                lines = f.read().splitlines()
            violations, acked, commits = check_order(lines)
            changes = sum(1 for l in lines if l.startswith("W ") and l.endswith(" c"))
            unchanged = sum(1 for l in lines if l.startswith("W ") and l.endswith(" n"))
            self.assertEqual(changes + unchanged, 8 * 40, "every write's answer is in the log")
            self.assertEqual(acked, changes)
            self.assertGreater(acked, 50, "the workload changes rows (else nothing is checked)")
            self.assertEqual(violations, [], "answers that left before a sync covering them")
            self.assertGreater(commits, 0)
            # Group commit: fewer commits than acknowledged writes under concurrency.
            print("  %d acknowledged changes, %d unchanged, %d commits" % (acked, unchanged, commits))
        finally:
            srv.close()


if __name__ == "__main__":
    unittest.main()
