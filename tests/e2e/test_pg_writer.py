"""The PostgreSQL writer's round trips (docs/architecture.md § PostgreSQL, "Round trips"): a batch is
two round trips on the fold leader, its fold included — BEGIN, the locking reads and the fold's reads
(checkpoint, log) in one pipeline, the writes and COMMIT in a second. Runs only with TALLY_STORE=pg.

tally_db_transactions_total counts the writer's commits, tally_db_writer_round_trips_total the round
trips of its connection. Sequential writes make one batch each (the leader's idle polls every 50 ms
are batches too); once a second the sweep adds two.
"""

import time

from harness import Server, TallyTestCase, metric, pg_only, uid

FAST = ["--rate-limit", "off", "--recount-interval", "0"]
WRITES = 60
# two a batch, and the sweep's; four a batch (the fold's checkpoint and log scan each a round trip of
# their own, as before) is well above it
MAX_ROUND_TRIPS_PER_COMMIT = 2.5


@pg_only()
class WriterRoundTripsTest(TallyTestCase):

    def test_a_batch_is_two_round_trips_fold_included(self):
        with Server(args=FAST) as srv:
            deadline = time.monotonic() + 10
            while metric(srv, "tally_fold_leader") != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(metric(srv, "tally_fold_leader"), 1, "the only node did not take the fold")
            item = uid("rt")
            for i in range(3):  # warm: the readers' first transactions, the first fold
                self.assertOk(srv.put(item, uid("w"), "like"))
            rt0, tx0 = metric(srv, "tally_db_writer_round_trips_total"), metric(srv, "tally_db_transactions_total")
            for i in range(WRITES):
                self.assertOk(srv.put(item, uid("u"), "like" if i % 2 else "dislike",
                                      headers={"Idempotency-Key": uid("k")}))
            rt1, tx1 = metric(srv, "tally_db_writer_round_trips_total"), metric(srv, "tally_db_transactions_total")
            commits = tx1 - tx0
            self.assertGreaterEqual(commits, WRITES, "sequential writes are a batch each")
            per_commit = (rt1 - rt0) / commits
            self.assertLessEqual(per_commit, MAX_ROUND_TRIPS_PER_COMMIT,
                                 "%.2f round trips a commit (%d round trips, %d commits)"
                                 % (per_commit, rt1 - rt0, commits))
            # every write folded once (the fold's reads served from the first round trip)
            self.assertCounts(srv, item, {"like": 3 + WRITES // 2, "dislike": WRITES // 2}, timeout=3.0)
