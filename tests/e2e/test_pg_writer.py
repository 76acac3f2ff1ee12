"""The PostgreSQL writer's round trips (docs/architecture.md § PostgreSQL, "Round trips"): a batch is
two round trips — BEGIN and the locking reads in one pipeline, the writes and COMMIT in a second —
and the fold runs apart, in transactions of its own on the fold's connection (two round trips each:
BEGIN, the checkpoint's lock and the log scan; the counts, the lists, the checkpoint and COMMIT).
Runs only with TALLY_STORE=pg.

tally_writer_commits_total counts the writer's batches, tally_db_writer_round_trips_total the round
trips of its connection, tally_db_fold_round_trips_total the fold's. Sequential writes make one
batch each; once a second the sweep adds two.

The write sessions' statements are prepared once per connection and sent by name after that
(planned once, not with every batch): the server's statement log (log_statement, set through the
store URI for this node's sessions only) shows them as "execute tally_wN", not as unnamed ones.
"""

import time

from harness import SHARDS, PgDatabase, Server, TallyTestCase, metric, pg_only, uid
from test_shards import shard_map, shard_of

FAST = ["--rate-limit", "off", "--recount-interval", "0"]
WRITES = 60
# two a batch, and the sweep's; four a batch (the fold's checkpoint and log scan each a round trip of
# their own, as before) is well above it
MAX_ROUND_TRIPS_PER_COMMIT = 2.5


@pg_only()
class WriterRoundTripsTest(TallyTestCase):

    def test_a_batch_is_two_round_trips_and_the_fold_runs_apart(self):
        with Server(args=FAST) as srv:
            deadline = time.monotonic() + 10
            while metric(srv, "tally_fold_leader") != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(metric(srv, "tally_fold_leader"), 1, "the only node did not take the fold")
            item = uid("rt")
            for i in range(3):  # warm: the readers' first transactions, the first fold
                self.assertOk(srv.put(item, uid("w"), "like"))
            rt0, tx0 = metric(srv, "tally_db_writer_round_trips_total"), metric(srv, "tally_writer_commits_total")
            f0, folds0 = metric(srv, "tally_db_fold_round_trips_total"), metric(srv, "tally_pipeline_folds_total")
            for i in range(WRITES):
                self.assertOk(srv.put(item, uid("u"), "like" if i % 2 else "dislike",
                                      headers={"Idempotency-Key": uid("k")}))
            rt1, tx1 = metric(srv, "tally_db_writer_round_trips_total"), metric(srv, "tally_writer_commits_total")
            commits = tx1 - tx0
            self.assertGreaterEqual(commits, WRITES, "sequential writes are a batch each")
            per_commit = (rt1 - rt0) / commits
            self.assertLessEqual(per_commit, MAX_ROUND_TRIPS_PER_COMMIT,
                                 "%.2f round trips a commit (%d round trips, %d commits)"
                                 % (per_commit, rt1 - rt0, commits))
            # every write folded once, by the fold's own transactions on its own connection
            self.assertCounts(srv, item, {"like": 3 + WRITES // 2, "dislike": WRITES // 2}, timeout=3.0)
            folds = metric(srv, "tally_pipeline_folds_total") - folds0
            self.assertGreater(folds, 0, "nothing was folded")
            self.assertGreater(metric(srv, "tally_db_fold_round_trips_total") - f0, folds,
                               "the folds ran on the fold's connection")
            # the two write sessions, named in pg_stat_activity
            names = srv.db.sql("SELECT string_agg(application_name, ',' ORDER BY application_name) FROM "
                               "pg_stat_activity WHERE datname = current_database() AND application_name "
                               "LIKE 'tallyd %'")
            self.assertEqual(names, "tallyd fold,tallyd writer")

    def test_the_write_sessions_statements_are_prepared_once(self):
        db = PgDatabase()
        try:
            with open(db.cluster.log, "rb") as f:
                start = f.seek(0, 2)
            # this node's sessions log every statement they run (the others' do not)
            with Server(args=FAST, store=db, store_uri=db.uri(options="-c%20log_statement%3Dall")) as srv:
                # with several shards, an item of this database's (shard 0), whose sessions log
                item = next(i for i in (uid("pp") for _ in range(256))
                            if SHARDS == 1 or shard_of(shard_map(db), i) == 0)
                for i in range(WRITES // 3):
                    self.assertOk(srv.put(item, uid("u"), "like", headers={"Idempotency-Key": uid("k")}))
                self.assertCounts(srv, item, {"like": WRITES // 3, "dislike": 0}, timeout=3.0)
            with open(db.cluster.log, "rb") as f:
                f.seek(start)
                log = f.read().decode("utf-8", "replace")
            # a batch's lock of its idempotency records: as text the first time, by name after that
            lock_keys = 'SELECT "user", key, expires_ms'
            by_name = sum(1 for line in log.splitlines() if "execute tally_w" in line and lock_keys in line)
            as_text = sum(1 for line in log.splitlines() if "execute <unnamed>" in line and lock_keys in line)
            self.assertGreaterEqual(by_name, WRITES // 3 - 2, "the batches' statements were not sent by name")
            self.assertLessEqual(as_text, 2, "the statement was sent as text %d times" % as_text)
        finally:
            db.drop()
