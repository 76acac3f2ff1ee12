"""The cluster identity (docs/architecture.md § Shards, docs/postgresql.md § Shards): tallyd's single
store is shard 0 of 1 of a cluster; the first start writes its identity into the store, every later
start checks it, and a store that holds the identity of a cluster of another shape (here: a shard
of a two-shard cluster) makes tallyd exit 1 with a log line naming the difference. On both stores.

Needs build/tally and build/shards_open (`make all build/shards_open`): shards_open gives stores the
identities of a cluster of several shards (of embedded stores too, which tallyd serves one at a time)."""

import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import one_shard, PG, REPO_ROOT, PgDatabase, Server, ServerExited, TallyTestCase, child_env

TALLY = os.path.join(REPO_ROOT, "build", "tally")
SHARDS_OPEN = os.path.join(REPO_ROOT, "build", "shards_open")
LOGGED = re.compile(r"event=cluster-identity cluster=([0-9a-f]{32}) shards=(\d+) written=(\d+) checked=(\d+)")


def stored_identity(srv):
    """(cluster, shard, shards) as the stopped server's store holds them, read without tallyd: on
    PostgreSQL the record itself, on the embedded store through `tally verify`."""
    if PG:
        text = srv.db.sql("SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'cluster/identity'")
        doc = json.loads(text)
        assert doc["map"] == [[0, 4095, 0]], doc
        assert doc["version"] == 1, doc
        return doc["cluster"], doc["shard"], doc["shards"]
    r = subprocess.run([TALLY, "verify", "--data", srv.data_dir], capture_output=True, text=True,
                       timeout=60, env=child_env())
    assert r.returncode == 0, r.stderr
    m = re.search(r"^cluster: ([0-9a-f]{32}), shard (\d+) of (\d+)$", r.stdout, re.M)
    assert m, r.stdout
    return m.group(1), int(m.group(2)), int(m.group(3))


class ClusterIdentityTest(TallyTestCase):
    @one_shard("a single store is shard 0 of 1")
    def test_first_start_writes_the_identity_and_a_restart_keeps_it(self):
        with Server() as srv:
            self.assertEqual(srv.put("i1", "u1", "like")[0], 200)
            srv.stop()
            m = LOGGED.search(srv.logs[-1])
            self.assertIsNotNone(m, srv.logs[-1])
            cluster = m.group(1)
            self.assertEqual(m.group(2, 3, 4), ("1", "1", "0"))  # one shard, written
            self.assertEqual(stored_identity(srv), (cluster, 0, 1))
            srv.start()
            self.assertEqual(srv.counts("i1")["like"], 1)
            srv.stop()
            m = LOGGED.search(srv.logs[-1])
            self.assertIsNotNone(m, srv.logs[-1])
            self.assertEqual(m.group(1, 2, 3, 4), (cluster, "1", "0", "1"))  # checked, the same cluster
            self.assertEqual(stored_identity(srv), (cluster, 0, 1))

    @one_shard("a single store is shard 0 of 1")
    def test_a_store_of_another_cluster_makes_tallyd_exit_1(self):
        self.assertTrue(os.path.exists(SHARDS_OPEN), "make build/shards_open")
        srv = Server(start=False)
        other_dir = tempfile.mkdtemp(prefix="tally-e2e-shard-")
        other_db = PgDatabase() if PG else None
        try:
            here = srv.db.uri() if PG else srv.data_dir
            other = other_db.uri() if PG else os.path.join(other_dir, "data")
            # the server's store becomes shard 1 of a cluster of two
            r = subprocess.run([SHARDS_OPEN, other, here], capture_output=True, text=True, timeout=60,
                               env=child_env())
            self.assertEqual(r.returncode, 0, r.stderr)
            cluster = re.search(r"cluster ([0-9a-f]{32}) shards 2", r.stdout).group(1)
            with self.assertRaises(ServerExited) as cm:
                srv.start()
            self.assertEqual(cm.exception.returncode, 1, cm.exception.stderr)
            self.assertRegex(cm.exception.stderr,
                             r"level=error event=start-failed msg=\"cluster %s has 2 shards, this node lists 1"
                             % cluster)
            # nothing was written: the store still holds the two-shard identity
            if not PG:
                out = subprocess.run([TALLY, "verify", "--data", here], capture_output=True, text=True,
                                     timeout=60, env=child_env()).stdout
                self.assertIn("cluster: %s, shard 1 of 2" % cluster, out)
            else:
                doc = json.loads(srv.db.sql(
                    "SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'cluster/identity'"))
                self.assertEqual((doc["cluster"], doc["shard"], doc["shards"]), (cluster, 1, 2))
        finally:
            srv.close()
            shutil.rmtree(other_dir, ignore_errors=True)
            if other_db:
                other_db.drop()
