"""The test infrastructure itself (tests/pg/pgcluster.py), without tallyd: when these fail, the
PostgreSQL stage's other failures are about the machine, not about tally. Runs only with
TALLY_STORE=pg."""

import os
import subprocess
import time
import unittest

from harness import PgDatabase, TallyTestCase, pg_cluster, pg_only, pgcluster_module


def psql_uri(uri, sql, timeout=20):
    pgc = pgcluster_module()
    r = subprocess.run([os.path.join(pgc.PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v",
                        "ON_ERROR_STOP=1", uri, "-c", sql], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode().strip(), r.stderr.decode()


@pg_only()
class ClusterTest(TallyTestCase):

    def test_run_cluster_and_fresh_databases(self):
        c = pg_cluster()
        self.assertTrue(c.alive())
        self.assertEqual(c.sql("SHOW listen_addresses"), "127.0.0.1")
        self.assertEqual(c.sql("SHOW fsync"), "off")
        self.assertEqual(c.sql("SELECT current_setting('server_version_num')::int / 10000"), "15")
        a, b = PgDatabase(), PgDatabase()
        try:
            self.assertNotEqual(a.name, b.name)
            a.sql("CREATE TABLE t (k int)")
            self.assertEqual(psql_uri(a.uri(), "SELECT count(*) FROM t")[:2], (0, "0"))
            rc, _, err = psql_uri(b.uri(), "SELECT count(*) FROM t")
            self.assertNotEqual(rc, 0, "databases are not apart")
        finally:
            a.drop()
            b.drop()
        self.assertEqual(c.sql("SELECT count(*) FROM pg_database WHERE datname IN ('%s','%s')"
                               % (a.name, b.name)), "0", "dropped")

    def test_runs_as_postgres_in_its_own_directory(self):
        c = pg_cluster()
        st = os.stat(c.data)
        if os.geteuid() == 0:
            import pwd
            self.assertEqual(pwd.getpwuid(st.st_uid).pw_name, "postgres")
        self.assertTrue(c.data.startswith(c.tmp))
        with open("/proc/%d/status" % c.pid) as f:
            uid_line = [l for l in f if l.startswith("Uid:")][0]
        self.assertNotEqual(int(uid_line.split()[1]), 0, "the postmaster runs as root")

    def test_sync_standby_kill9_promote_two_host_uri(self):
        pgc = pgcluster_module()
        p = pgc.start_primary(name="infra-p", fsync=True)
        s = None
        try:
            self.assertEqual(p.sql("SHOW fsync"), "on")
            s = pgc.start_sync_standby(p, name="infra-s")
            db = pgc.create_database(p)
            p.sql("CREATE TABLE t (k int PRIMARY KEY)", db)
            p.sql("INSERT INTO t VALUES (1)", db)  # waits for the standby's flush (not replay)
            deadline = time.monotonic() + 10
            while True:  # replayed a moment later
                rc, out, _ = psql_uri(s.uri(db), "SELECT count(*) FROM t")
                if (rc, out) == (0, "1") or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual((rc, out), (0, "1"), "replicated to the standby")
            self.assertEqual(s.sql("SELECT pg_is_in_recovery()"), "t")
            uri = pgc.two_host_uri([p, s], db)
            self.assertIn("target_session_attrs=read-write", uri)
            self.assertEqual(psql_uri(uri, "SELECT inet_server_port()")[1], str(p.port))
            pid = p.pid
            p.kill9()
            self.assertFalse(os.path.exists("/proc/%d" % pid) and
                             open("/proc/%d/stat" % pid).read().split()[2] != "Z",
                             "the postmaster survived kill -9")
            t0 = time.monotonic()
            pgc.promote(s)
            self.assertLess(time.monotonic() - t0, 30)
            # commits must not wait for the old primary as a standby
            s.sql("INSERT INTO t VALUES (2)", db, timeout=10)
            self.assertEqual(s.sql("SHOW synchronous_standby_names"), "")
            rc, out, err = psql_uri(uri, "SELECT inet_server_port(), count(*) FROM t")
            self.assertEqual((rc, out), (0, "%d|2" % s.port), err)
        finally:
            for c in (s, p):
                if c is not None:
                    c.destroy()
        for c in (s, p):
            self.assertFalse(os.path.exists(c.tmp), "directory removed")
        self.assertFalse(p.alive() or s.alive())

    def test_stop_and_start_keep_the_port(self):
        pgc = pgcluster_module()
        c = pgc.start_primary(name="infra-r")
        try:
            port = c.port
            db = pgc.create_database(c)
            c.sql("CREATE TABLE t (k int)", db)
            c.stop("fast")
            self.assertFalse(c.alive())
            c.start()
            self.assertEqual(c.port, port)
            self.assertEqual(c.sql("SELECT count(*) FROM t", db), "0")
        finally:
            c.destroy()


if __name__ == "__main__":
    unittest.main()
