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

With two shards, each its own Patroni cluster (a leader and its synchronous standby) on the one
etcd: shard 1's primary machine is lost under keyed load on two nodes; Patroni promotes its
standby; every acknowledged write of both shards is present, no key applied twice, counts equal a
recount; and shard 0 never stopped: a probe writing to shard 0's items is answered 200 throughout,
and /readyz stays 200, naming shard 1 while it fails.

Runs only with TALLY_PATRONI=1 (tests/run_all.sh's stage "patroni", ~1 minute: etcd, two
PostgreSQL servers with fsync on, ~10 s of failover); it needs no TALLY_STORE.
"""

import os
import json
import random
import sys
import threading
import time
import unittest

from harness import SLOW, Server, pgcluster_module, tail
from keyed_load import FAST, LoadCase
from test_shards import shard_of

RUN = bool(os.environ.get("TALLY_PATRONI"))
PROBE_GAP_MAX_S = 2.0  # shard 0's probe: the longest wait between two of its acknowledged writes
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


def named_shard_1(raw):
    doc = json.loads(raw)
    return 1 in doc.get("unreachable_shards", []) + doc.get("failing_shards", [])


class UriDb:
    """A database by its URI, as Server's shard_dbs takes one."""

    def __init__(self, uri):
        self._uri = uri

    def uri(self):
        return self._uri


@unittest.skipUnless(RUN, "PostgreSQL under Patroni: its own stage (TALLY_PATRONI=1; tests/run_all.sh)")
class PatroniShardsTest(LoadCase):
    """One etcd and two Patroni clusters, one per shard (scopes tally_s0 and tally_s1)."""

    @classmethod
    def setUpClass(cls):
        cls.pc = patroni_module()
        cls.etcd = None
        cls.clusters = []
        try:
            cls.etcd = cls.pc.start_etcd()
            for k in range(2):
                cls.clusters.append(cls.pc.start_cluster("tally_s%d" % k, cls.etcd))
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for c in reversed(cls.clusters):
            c.destroy()
        if cls.etcd is not None:
            cls.etcd.destroy()

    def probe(self, node, items, users, until, out):
        """Writes to shard 0's items, unkeyed, one every 50 ms, and asks /readyz: (time, write
        status, readyz status, readyz body) each time."""
        c = node.client(timeout=10)
        n = 0
        try:
            while time.monotonic() < until:
                item, user = items[n % len(items)], users[n % len(users)]
                kind = ("like", "dislike")[(n // len(users)) % 2]
                try:
                    st, _, _ = c.request("PUT", "/v1/items/%s/reaction" % item,
                                         body=('{"reaction":"%s"}' % kind).encode(),
                                         headers={"X-User-Id": user, "Content-Type": "application/json"})
                    rst, _, raw = c.request("GET", "/readyz")
                except OSError as e:
                    st, rst, raw = None, None, repr(e).encode()
                    c.close()
                    c = node.client(timeout=10)
                out.append((time.monotonic(), st, rst, raw))
                n += 1
                time.sleep(0.05)
        finally:
            c.close()

    def test_a_shards_primary_lost_the_other_shard_goes_on(self):
        pc = self.pc
        seed = random.randrange(1 << 30)
        nodes = []
        try:
            for c in self.clusters:
                c.wait_sync()
                c.create_database("tally")
            uris = [c.uri("tally") for c in self.clusters]
            a = Server(args=FAST, store_uri=uris[0], shard_dbs=[UriDb(uris[1])])
            nodes.append(a)
            nodes.append(a.node())
            ident = self.clusters[0].wait_leader().sql(
                "SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'cluster/identity'", db="tally")
            ranges = [tuple(r) for r in json.loads(ident)["map"]]
            on = {0: [], 1: []}
            for i in range(200):
                name = "ps%d-%d" % (seed, i)
                on[shard_of(ranges, name)].append(name)
            self.assertTrue(len(on[0]) >= 4 and len(on[1]) >= 2, on)
            load_items = on[0][:2] + on[1][:2]
            probe_items = on[0][2:4]
            probe_users = [u for u in ("pu%d" % i for i in range(100)) if shard_of(ranges, u) == 0][:4]
            old = self.clusters[1].wait_sync()
            times, seen = {}, []
            prober = threading.Thread(target=self.probe, daemon=True,
                                      args=(nodes[1], probe_items, probe_users,
                                            time.monotonic() + LOAD_S + 5, seen))
            prober.start()

            def crash():
                times["killed"] = time.monotonic()
                old.kill9()  # shard 1's primary: its patroni and its postmaster
                times["new"] = self.clusters[1].wait_leader(exclude=old, timeout=60)
                times["promoted"] = time.monotonic()

            ledgers, items, pairs, t_crash = self.run_load(nodes, crash, seed, load_s=LOAD_S,
                                                           kill_at_s=KILL_AT_S, items=load_items)
            prober.join(LOAD_S + 30)
            self.assertFalse(prober.is_alive(), "the probe is stuck")
            ctx = "shard 1 failed over (promoted after %.1fs), seed %d" % (
                times["promoted"] - times["killed"], seed)
            sys.stdout.write("  %s\n" % ctx)
            sys.stdout.flush()
            # shard 0 never stopped: every probe write acknowledged, none waiting long, ready all along
            window = [s for s in seen if times["killed"] <= s[0] <= times["promoted"]]
            self.assertGreater(len(window), 10, ctx)
            self.assertEqual([s for s in seen if s[1] != 200], [], "shard 0's writes in the failover; " + ctx)
            gaps = [b[0] - a_[0] for a_, b in zip(seen, seen[1:])]
            self.assertLess(max(gaps), PROBE_GAP_MAX_S * SLOW, ctx)
            self.assertEqual([s for s in seen if s[2] != 200], [], "/readyz in the failover; " + ctx)
            named = [s for s in window if named_shard_1(s[3])]
            self.assertTrue(named, "/readyz never named shard 1; " + ctx)
            for n in nodes:
                self.assertTrue(n.running, "a node died in the failover\n" + tail(n.stderr()))
            self.verify(nodes, ledgers, items, pairs, t_crash, ctx)
            acked1 = [w for lg in ledgers for w in lg.writes
                      if w.status == 200 and w.item in on[1] and w.acked_at > times["promoted"]]
            self.assertTrue(acked1, "shard 1's items written again after the promotion; " + ctx)
            for n in reversed(nodes):
                n.stop()
        except pc.PgError as e:
            self.fail("Patroni cluster: %s" % e)
        finally:
            for n in reversed(nodes):
                n.close()


if __name__ == "__main__":
    unittest.main()
