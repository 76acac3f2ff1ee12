"""Failover under Patroni, for real: PostgreSQL's primary and its synchronous standby each under
Debian's `patroni`, one etcd (tests/pg/patronicluster.py), two tallyd nodes on the multi-host
URI (target_session_attrs=read-write) under keyed write load (keyed_load.py). The primary's
machine is lost — its patroni and its postmaster SIGKILLed together — and nothing else is done
by hand: Patroni's leader key expires in etcd, Patroni promotes the synchronous standby, the
nodes find it through the URI. Then: every acknowledged write present, no key applied twice,
the feed one entry per change, counts equal to a recount, and writes acknowledged again within
a bounded time of the promotion. And the trap the docs warn of: the postmaster killed alone
(its patroni alive) is started again in place on the same timeline, no failover, as long as
primary_start_timeout (Patroni's default, 300 s) has not run out.

Runs only with TALLY_PATRONI=1 (tests/run_all.sh's stage "patroni", ~1 minute: etcd, two
PostgreSQL servers with fsync on, ~10 s of failover); it needs no TALLY_STORE.
"""

import os
import random
import sys
import time
import unittest

from harness import Server, pgcluster_module, tail
from keyed_load import FAST, LoadCase

RUN = bool(os.environ.get("TALLY_PATRONI"))
LOAD_S = 20.0  # long enough that new writes go on well past the promotion (~10 s after the kill)
KILL_AT_S = 3.0
RECOVER_AFTER_PROMOTION_S = 10.0  # tallyd retries a connection once a second
READY_AGAIN_S = 20.0  # /readyz: 200 again once no write has failed for 10 s
OUTAGE_MAX_S = 35.0  # kill -> first acknowledged write: the leader key's ttl (10 s) and the above


def patroni_module():
    pgcluster_module()  # puts tests/pg on sys.path
    import patronicluster
    return patronicluster


@unittest.skipUnless(RUN, "PostgreSQL under Patroni: its own stage (TALLY_PATRONI=1; tests/run_all.sh)")
class PatroniFailoverTest(LoadCase):
    """One etcd and one cluster (a leader and its synchronous standby) for the class."""

    @classmethod
    def setUpClass(cls):
        cls.pc = patroni_module()
        cls.etcd = cls.cluster = None
        try:
            cls.etcd = cls.pc.start_etcd()
            cls.cluster = cls.pc.start_cluster("tally_s0", cls.etcd)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            cls.cluster.destroy()
        if cls.etcd is not None:
            cls.etcd.destroy()

    def test_postmaster_killed_alone_is_restarted_in_place(self):
        cluster = self.cluster
        lead = cluster.wait_leader()
        killed = lead.kill9_postmaster()
        deadline = time.monotonic() + 60
        seen = set()
        while True:
            roles = cluster.roles()
            seen.update(n for n, (r, _) in roles.items() if r in ("leader", "master", "primary"))
            pm = lead.postmaster_pid()
            if pm is not None and pm != killed and lead.try_sql("SELECT pg_is_in_recovery()") == "f" \
                    and cluster.leader() is lead:
                break
            self.assertLess(time.monotonic(), deadline,
                            "the postmaster was not started again (roles %r)\n%s" % (
                                roles, lead.log_tail()))
            time.sleep(0.2)
        self.assertEqual(seen, {lead.name}, "no other member led meanwhile")
        # (Patroni starts a crashed primary in recovery and promotes it again: a new timeline,
        # but on the same member, which kept the leader key throughout.)
        for m in cluster.members:
            if m is not lead and m.patroni_alive():
                self.assertEqual(m.sql("SELECT pg_is_in_recovery()"), "t", "%s promoted" % m.name)

    def test_primary_lost_patroni_promotes_sync_standby_nothing_lost(self):
        pc, cluster = self.pc, self.cluster
        seed = random.randrange(1 << 30)
        nodes = []
        try:
            old = cluster.wait_sync()
            standby = next(m for m in cluster.members if m is not old)
            # The setup the docs describe: durable commits, waited for by the standby.
            self.assertEqual(old.sql("SHOW fsync"), "on")
            self.assertEqual(old.sql("SHOW synchronous_commit"), "on")
            self.assertEqual(old.sql("SHOW synchronous_standby_names"), standby.name)
            self.assertEqual(old.sql("SELECT sync_state FROM pg_stat_replication "
                                     "WHERE application_name = '%s'" % standby.name), "sync")
            st, conf = old.api("/config")
            self.assertEqual(st, 200)
            self.assertIs(conf.get("synchronous_mode"), True, conf)
            self.assertEqual(cluster.roles()[standby.name][0], "sync_standby")

            db = cluster.create_database("tally")
            uri = cluster.uri(db)
            a = Server(args=FAST, store_uri=uri)
            nodes.append(a)
            nodes.append(a.node())
            for n in nodes:
                self.assertEqual(n.request("GET", "/readyz")[0], 200)
            times = {}

            def crash():
                times["killed"] = time.monotonic()
                old.kill9()  # its patroni and its postmaster: a machine lost
                new = cluster.wait_leader(exclude=old, timeout=60)
                times["promoted"] = time.monotonic()
                times["new"] = new

            ledgers, items, pairs, t_crash = self.run_load(nodes, crash, seed, load_s=LOAD_S,
                                                           kill_at_s=KILL_AT_S)
            new = times["new"]
            self.assertIs(new, standby, "Patroni promoted the synchronous standby")
            self.assertEqual(new.sql("SELECT pg_is_in_recovery()"), "f")
            # Alone, the new leader must not wait for a standby (synchronous_mode, not strict).
            self.assertEqual(new.sql("SHOW synchronous_standby_names"), "")
            for n in nodes:
                self.assertTrue(n.running, "a node died in the failover\n" + tail(n.stderr()))
            for n in nodes:
                # 503 "writes failing" for 10 s after the last write that failed in the outage
                deadline = time.monotonic() + READY_AGAIN_S
                while True:
                    st, _, raw = n.request("GET", "/readyz")
                    if st == 200 or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                self.assertEqual(st, 200, "/readyz on :%s: %r" % (n.port, raw))

            acked = sorted(w.acked_at for lg in ledgers for w in lg.writes if w.status == 200)
            after = [t for t in acked if t > times["promoted"]]
            self.assertTrue(after, "no write acknowledged after the promotion")
            outage = after[0] - times["killed"]
            recover = after[0] - times["promoted"]
            ctx = ("Patroni failover (kill -9 of the primary's patroni and postmaster; promoted "
                   "after %.1fs; first write after it %.1fs later; %d writes acknowledged, %d "
                   "after the promotion), seed %d"
                   % (times["promoted"] - times["killed"], recover, len(acked), len(after), seed))
            sys.stdout.write("  %s\n" % ctx)
            sys.stdout.flush()
            self.assertLessEqual(recover, RECOVER_AFTER_PROMOTION_S, ctx)
            self.assertLessEqual(outage, OUTAGE_MAX_S, ctx)
            self.assertGreater(len(after), 20, "new writes go on after the failover; " + ctx)
            self.verify(nodes, ledgers, items, pairs, t_crash, ctx)
            for n in reversed(nodes):
                n.stop()
        except pc.PgError as e:
            self.fail("Patroni cluster: %s" % e)
        finally:
            for n in reversed(nodes):
                n.close()


if __name__ == "__main__":
    unittest.main()
