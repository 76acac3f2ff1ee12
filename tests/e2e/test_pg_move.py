"""Moving from the embedded store to PostgreSQL (`tally move`), and nodes of two schema versions
on one database (a rolling upgrade). Runs only with TALLY_STORE=pg.

- after the move, every row has its reaction and version, the counts are equal, a retried
  Idempotency-Key replays its stored answer, the change feed has the same entries at the same
  cursors and goes on after the last one, and a recount finds no drift;
- a database that is not empty is refused, and nothing in it changes;
- a database whose schema is newer starts an older node only when its schema_compatible_from
  allows it; a version-2 database gets tally_claims, and version-2 nodes may still run beside it.
"""

import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import (one_shard, REPO_ROOT, TALLYD, PgDatabase, Proc, Server, TallyTestCase, child_env, pg_only,
                     run_tallyd, tail, uid)

TALLY = os.path.join(REPO_ROOT, "build", "tally")
ADMIN = {"X-User-Id": "admin"}


class EmbeddedServer:
    """A tallyd on the embedded store in `data`, whatever TALLY_STORE says (the move's source)."""

    def __init__(self, data, workdir):
        self.proc = Proc([TALLYD, "--listen", "127.0.0.1:0", "--data", data, "--rate-limit", "off"], child_env(),
                         os.path.join(workdir, "embedded.log"))
        if self.proc.wait_listening_or_exit(20) != "listening":
            raise AssertionError("the embedded tallyd did not start\n" + tail(self.proc.stderr()))
        from harness import Client
        self.client = Client(self.proc.host, self.proc.port)

    def json(self, method, path, body=None, headers=None, user=None):
        return self.client.json(method, path, body, headers, user)

    def stop(self):
        self.client.close()
        self.proc.popen.terminate()
        self.proc.wait(20)
        self.proc.close()


def feed(srv):
    """Every entry of the change feed, page by page."""
    entries, after = [], None
    for _ in range(1000):
        path = "/v1/changes?limit=1000" + ("" if after is None else "&after=%s" % after)
        st, _, doc, raw = srv.json("GET", path, headers=ADMIN)
        assert st == 200, raw
        entries += doc["changes"]
        if not doc["changes"]:
            return entries
        after = doc["next"]
    raise AssertionError("the feed did not end")


def who_reacted(srv, item):
    """The whole list of who reacted to item, page by page."""
    out, after = [], None
    for _ in range(100):
        path = "/v1/items/%s/reactions?limit=7" % item + ("" if after is None else "&after=" + after)
        st, _, doc, raw = srv.json("GET", path, headers=ADMIN)
        assert st == 200, raw
        out += doc["reactions"]
        after = doc.get("next")
        if not after:
            return out
    raise AssertionError("the list did not end")


@pg_only()
class MoveTest(TallyTestCase):

    @one_shard("tally move fills one database")
    def test_move_keeps_rows_versions_counts_keys_and_cursors(self):
        work = tempfile.mkdtemp(prefix="tally-move-")
        data = os.path.join(work, "data")
        rnd = random.Random(7)
        items = [uid("mv-item") for _ in range(6)]
        users = [uid("mv-user") for _ in range(25)]
        try:
            src = EmbeddedServer(data, work)
            keyed = {}  # (user, key) -> (path, body, answer bytes)
            for n in range(300):
                item, user = rnd.choice(items), rnd.choice(users)
                kind = rnd.choice(["like", "dislike"])
                key = "k-%d" % n
                path = "/v1/items/%s/reaction:toggle" % item
                st, _, _, raw = src.json("POST", path, {"reaction": kind}, user=user,
                                         headers={"Idempotency-Key": key})
                self.assertEqual(st, 200, raw)
                keyed[(user, key)] = (path, {"reaction": kind}, raw)
            time.sleep(0.3)  # the counts catch up
            before_rows = {(i, u): src.json("GET", "/v1/items/%s/reaction" % i, user=u)[2]
                           for i in items for u in users}
            before_counts = {i: src.json("GET", "/v1/items/%s" % i)[2]["counts"] for i in items}
            before_feed = feed(src)
            before_lists = {i: who_reacted(src, i) for i in items}
            src.stop()

            db = PgDatabase()
            out = subprocess.run([TALLY, "move", "--data", data, "--store", db.uri()], capture_output=True,
                                 text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            report = json.loads(out.stdout)
            self.assertEqual(report["log_entries"], len(before_feed))
            self.assertEqual(report["keys"], len(keyed))
            again = subprocess.run([TALLY, "move", "--data", data, "--store", db.uri()], capture_output=True,
                                   text=True, timeout=120)
            self.assertEqual(again.returncode, 1, "a database that is not empty is refused")
            self.assertIn("not empty", again.stderr)

            with Server(args=["--rate-limit", "off"], store=db) as dst:
                for (i, u), doc in before_rows.items():
                    self.assertEqual(dst.json("GET", "/v1/items/%s/reaction" % i, user=u)[2], doc, (i, u))
                for i, counts in before_counts.items():
                    self.assertEqual(dst.json("GET", "/v1/items/%s" % i)[2]["counts"], counts, i)
                for (user, key), (path, body, raw) in list(keyed.items())[:40]:
                    st, hdrs, _, got = dst.json("POST", path, body, user=user, headers={"Idempotency-Key": key})
                    self.assertEqual((st, got), (200, raw), "a key stored before the move replays")
                    self.assertEqual(hdrs.get("idempotent-replayed"), "true")
                self.assertEqual(feed(dst), before_feed, "the same entries at the same cursors")
                for i, entries in before_lists.items():  # built after the copy, at the same positions
                    self.assertEqual(who_reacted(dst, i), entries, i)
                st, _, doc, raw = dst.json("PUT", "/v1/items/%s/reaction" % items[0], {"reaction": "like"},
                                           user=uid("mv-new"))
                self.assertEqual(st, 200, raw)
                entries = feed(dst)
                self.assertEqual(int(entries[-1]["cursor"]), int(before_feed[-1]["cursor"]) + 1,
                                 "the feed goes on after the last cursor moved")
                deadline = time.monotonic() + 5
                while True:
                    st, _, doc, raw = dst.json("POST", "/v1/admin/recount", {}, headers=ADMIN)
                    if (st == 200 and doc["drift"] == []) or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                self.assertEqual((st, doc["drift"]), (200, []), raw)
            db.drop()
        finally:
            shutil.rmtree(work, ignore_errors=True)


@pg_only()
class RollingUpgradeTest(TallyTestCase):

    def test_an_older_node_runs_beside_a_newer_schema_only_when_allowed(self):
        with Server(args=["--rate-limit", "off"]) as srv:
            self.assertOk(srv.json("PUT", "/v1/items/ru/reaction", {"reaction": "like"}, user="u1"))
            # a newer tallyd upgraded the schema and says this version's nodes may still run beside it
            srv.db.sql("UPDATE tally_meta SET value = '4' WHERE name = 'schema_version'")
            node = srv.node()
            try:
                self.assertOk(node.json("PUT", "/v1/items/ru/reaction", {"reaction": "like"}, user="u2"))
                self.assertIn("event=pg-schema-newer", node.stderr())
            finally:
                node.close()
            # a change the old nodes cannot live with: they refuse to start
            srv.db.sql("UPDATE tally_meta SET value = '4' WHERE name = 'schema_compatible_from'")
            rc, _, err = run_tallyd(["--listen", "127.0.0.1:0"] + srv.store_args())
            self.assertEqual(rc, 1, err)
            self.assertIn("newer than this tallyd", err)

    def test_schema_2_gets_its_claims_table_and_version_2_nodes_run_beside(self):
        with Server(args=["--rate-limit", "off"]) as srv:
            self.assertOk(srv.json("PUT", "/v1/items/c2/reaction", {"reaction": "like"}, user="u1"))
            srv.stop()
            srv.db.sql("DROP TABLE tally_claims; UPDATE tally_meta SET value = '2' WHERE name IN "
                       "('schema_version', 'schema_compatible_from')")
            srv.start()
            self.assertIn("event=pg-schema-upgraded from=2 to=3 claims=created", srv.stderr())
            self.assertEqual(srv.db.sql("SELECT count(*) FROM tally_claims"), "0")
            self.assertEqual(srv.db.sql("SELECT value FROM tally_meta WHERE name IN ('schema_version',"
                                        " 'schema_compatible_from') ORDER BY name"), "2\n3")
            self.assertOk(srv.json("PUT", "/v1/items/c2/reaction", {"reaction": "like"}, user="u2"))


if __name__ == "__main__":
    unittest.main()
