"""Crashes under write load with Idempotency-Keys, on PostgreSQL. Runs only with
TALLY_STORE=pg.

- kill -9 of one of two tallyd nodes (the run's cluster);
- failover: a primary with a synchronous standby (fsync on, streaming replication), two tallyd
  nodes on a two-host URI with target_session_attrs=read-write; kill -9 of the primary's
  postmaster, pg_ctl promote of the standby (and synchronous_standby_names reset on it: a
  promoted standby keeps it, and its commits would wait for a standby that does not exist).

The load and the checks are keyed_load.py's: 8 client threads for ~5 s, each write retried
with its key (503, 409 idempotency-key-in-use, connection errors; on the other node too) for up
to ~20 s; then every acknowledged write present, no key applied twice, the feed one entry per
change, the counts caught up and a recount with drift [].
"""

import random
import time
import unittest

from harness import Server, pg_only, pgcluster_module, tail
from keyed_load import FAST, LoadCase


# ============================================================================================
@pg_only()
class NodeKillTest(LoadCase):

    def test_kill9_of_one_node_under_load(self):
        seed = random.randrange(1 << 30)
        with Server(args=FAST) as a:
            b = a.node()
            try:
                ledgers, items, pairs, t_crash = self.run_load([a, b], a.kill9, seed)
                self.assertTrue(b.running, "the surviving node died\n" + tail(b.stderr()))
                self.verify([b], ledgers, items, pairs, t_crash, "kill -9 of node a, seed %d" % seed)
                a.start()  # the killed node comes back on the same database: same answers
                self.verify([a, b], ledgers, items, pairs, t_crash,
                            "after node a restarted, seed %d" % seed)
            finally:
                if b.running:
                    b.stop()
                b.close()


@pg_only()
class FailoverTest(LoadCase):

    def test_primary_killed_standby_promoted_nothing_lost(self):
        pgc = pgcluster_module()
        seed = random.randrange(1 << 30)
        primary = standby = None
        nodes = []
        try:
            primary = pgc.start_primary(name="fo-primary", fsync=True)
            standby = pgc.start_sync_standby(primary, name="fo-standby")
            db = pgc.create_database(primary)
            uri = pgc.two_host_uri([primary, standby], db)
            a = Server(args=FAST, store_uri=uri)
            nodes.append(a)
            nodes.append(a.node())
            for n in nodes:
                self.assertEqual(n.request("GET", "/readyz")[0], 200)
            times = {}

            def crash():
                primary.kill9()
                times["killed"] = time.monotonic()
                pgc.promote(standby)  # and RESET synchronous_standby_names on it
                times["promoted"] = time.monotonic()

            ledgers, items, pairs, t_crash = self.run_load(nodes, crash, seed)
            self.assertEqual(standby.sql("SELECT pg_is_in_recovery()"), "f", "standby promoted")
            for n in nodes:
                self.assertTrue(n.running, "a node died in the failover\n" + tail(n.stderr()))
            ctx = "failover (kill -9 primary, promote after %.1fs), seed %d" % (
                times["promoted"] - times["killed"], seed)
            self.verify(nodes, ledgers, items, pairs, t_crash, ctx)
            for n in reversed(nodes):
                n.stop()
        finally:
            for n in reversed(nodes):
                n.close()
            for c in (standby, primary):
                if c is not None:
                    c.destroy()


if __name__ == "__main__":
    unittest.main()
