"""Exports over HTTP (GET /v1/users/{user}/export, GET /v1/admin/export), on both stores:

- who may ask: the user and admins for a user's export (whatever --user-reactions says), admins for
  the whole store; anyone else 401/403;
- the lines equal the rows (admin) and the user's list (user), the closing line counts them;
- one snapshot: rows written while an export is being read are not in it;
- a round trip: an export imported into an empty store gives the same rows and counts (and, with
  TALLY_STORE=pg, from PostgreSQL to the embedded store and back);
- --max-exports: past it 503 with Retry-After; --export-timeout: a slow export is cut (no closing
  line, no end of body); SIGTERM cuts an export in progress. The bodies of these are megabytes, more
  than the sockets' buffers hold, so that an export really waits on its reader;
- a client that reads slowly does not grow the server's memory (RssAnon of /proc/<pid>/status) while
  200 000 rows are exported (100 000 on PostgreSQL).
"""

import http.client
import json
import os
import time
import unittest

from harness import (PG, SLOW, Server, TallyTestCase, metric, pg_only)
import harness

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
# The slow reader's export: 200 000 rows (100 000 on PostgreSQL, whose import of them takes twice as
# long), ~110 bytes a line: a body of 11-22 MB, against a bound of 4 MB on the server's growth.
BIG_ROWS = 100000 if PG else 200000
LONG_USER = "-" + "x" * 60
IMPORT_MAX = ["--import-max-size", "64M"]


def import_rows(srv, lines):
    """lines: dicts (import lines) through POST /v1/admin/import."""
    body = "".join(json.dumps(x) + "\n" for x in lines).encode()
    st, _, doc, raw = srv.json("POST", "/v1/admin/import", body=body,
                               headers={"X-User-Id": "admin", "Content-Type": "application/x-ndjson"})
    assert st == 200, (st, raw[:300])
    assert not doc["rejected"], doc["rejected"][:3]
    return doc


def open_export(srv, path, user="admin", timeout=60):
    """The answer to GET path, its body not read yet: (connection, response)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    conn.request("GET", path, headers={"X-User-Id": user} if user else {})
    return conn, conn.getresponse()


def export_lines(srv, path="/v1/admin/export", user="admin"):
    """A whole export: its status, headers and lines (parsed)."""
    conn, resp = open_export(srv, path, user)
    try:
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, [json.loads(x) for x in body.decode().splitlines() if x]
    finally:
        conn.close()


def rows_of(lines):
    """The import lines of an admin export, closing line checked and left out."""
    assert lines and lines[-1].get("export") == "complete", lines[-1:]
    assert lines[-1]["lines"] == len(lines) - 1, (lines[-1], len(lines))
    return lines[:-1]


def rss_anon_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/%d/status" % pid)


def counts_of(srv, items):
    out = {}
    for i in range(0, len(items), 100):
        part = items[i:i + 100]
        st, _, doc, raw = srv.json("GET", "/v1/items?ids=" + ",".join(part))
        assert st == 200, (st, raw[:300])
        for it in doc["items"]:
            out[it["item"]] = it["counts"]
    return out


def expected_counts(rows, kinds=("like", "dislike")):
    out = {}
    for r in rows:
        c = out.setdefault(r["item"], dict.fromkeys(kinds, 0))
        c[r["reaction"]] += 1
    return out


def settled(srv, timeout=20.0):
    """Waits until the fold has caught up with every write (tally_pipeline_lag_seconds is 0)."""
    deadline = time.monotonic() + timeout * SLOW
    while metric(srv, "tally_pipeline_lag_seconds") != 0:
        assert time.monotonic() < deadline, "the fold did not catch up"
        time.sleep(0.05)


def wait_counts(test, srv, want):
    deadline = time.monotonic() + 10 * SLOW
    while True:
        got = counts_of(srv, sorted(want))
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    test.assertEqual(got, want)


class EmbeddedServer(Server):
    """A server on the embedded store whatever TALLY_STORE says: the other end of a round trip from
    one store to the other."""

    def __init__(self, args=()):
        saved = harness.PG
        harness.PG = False
        try:
            super().__init__(args=args)
        finally:
            harness.PG = saved


def sample_rows(n_items=40, n_users=60, prefix="it"):
    rows = []
    for u in range(n_users):
        for i in range(n_items):
            k = (u * 7 + i * 3) % 5
            if k < 3:
                rows.append({"item": "%s%02d" % (prefix, i), "user": "u%03d" % u,
                             "reaction": "like" if k else "dislike"})
    return rows


class AccessTest(TallyTestCase):

    def test_who_may_ask(self):
        # --user-reactions public opens the list to anyone, never the export
        with Server(args=FAST + ["--user-reactions", "public"]) as s:
            self.assertOk(s.put("a1", "alice", "like"))
            self.assertProblem(s.json("GET", "/v1/users/alice/export"), 401, "unauthenticated")
            self.assertProblem(s.json("GET", "/v1/users/alice/export", user="bob"), 403, "forbidden")
            self.assertProblem(s.json("GET", "/v1/users/a%20b/export", user="bob"), 400, "invalid-user-id")
            self.assertProblem(s.json("GET", "/v1/admin/export"), 401, "unauthenticated")
            self.assertProblem(s.json("GET", "/v1/admin/export", user="alice"), 403, "forbidden")
            self.assertProblem(s.json("POST", "/v1/admin/export", {}, headers=ADMIN), 405, "method-not-allowed")
            for who in ("alice", "admin"):
                st, headers, _ = export_lines(s, "/v1/users/alice/export", who)
                self.assertEqual(st, 200, who)
                self.assertEqual(headers["content-type"], "application/x-ndjson")
            # HEAD answers as GET would, without starting an export
            st, headers, body = s.request("HEAD", "/v1/admin/export", headers=ADMIN)
            self.assertEqual((st, headers.get("content-type"), body), (200, "application/x-ndjson", b""))
            self.assertEqual(s.request("HEAD", "/v1/users/alice/export", headers={"X-User-Id": "bob"})[0], 403)
            self.assertEqual(metric(s, "tally_exports_started_total"), 2)
            # nothing of anyone else's leaks into a user's export
            self.assertEqual(export_lines(s, "/v1/users/bob/export", "bob")[2], [])


class ContentsTest(TallyTestCase):

    def test_admin_export_equals_rows(self):
        rows = sample_rows()
        with Server(args=FAST) as s:
            import_rows(s, rows)
            # a row set back to none is not exported
            self.assertOk(s.json("DELETE", "/v1/items/it00/reaction", user="u000"))
            st, headers, lines = export_lines(s)
            self.assertEqual(st, 200)
            self.assertEqual(headers["content-type"], "application/x-ndjson")
            want = [r for r in rows if not (r["item"] == "it00" and r["user"] == "u000")]
            got = rows_of(lines)
            key = lambda r: (r["item"], r["user"])  # noqa: E731
            self.assertEqual(sorted(got, key=key), sorted(want, key=key))
            self.assertEqual(got, sorted(got, key=key), "in key order")

    def test_user_export_equals_the_users_reactions(self):
        with Server(args=FAST) as s:
            want = {}
            for i in range(30):
                kind = "like" if i % 3 else "dislike"
                self.assertOk(s.put("p%02d" % i, "carol", kind))
                want["p%02d" % i] = kind
            self.assertOk(s.put("p05", "carol", "none"))
            del want["p05"]
            self.assertOk(s.put("p07", "dave", "like"))
            deadline = time.monotonic() + 5 * SLOW
            while True:  # the user's list follows the rows as the counts do
                st, _, lines = export_lines(s, "/v1/users/carol/export", "carol")
                self.assertEqual(st, 200)
                got = {x["item"]: x["reaction"] for x in lines}
                if got == want or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(got, want)
            self.assertTrue(all(set(x) == {"item", "reaction", "at"} for x in lines), lines[:3])
            ats = [x["at"] for x in lines]
            self.assertEqual(ats, sorted(ats, reverse=True), "newest first")

    def test_many_mode_lines_and_round_trip(self):
        args = FAST + ["--reaction-mode", "many", "--reactions", "like,love,laugh"]
        with Server(args=args) as a:
            import_rows(a, [{"item": "m1", "user": "u1", "reactions": ["like", "love"]},
                            {"item": "m1", "user": "u2", "reactions": ["laugh"]},
                            {"item": "m2", "user": "u1", "reactions": ["love"]}])
            rows = rows_of(export_lines(a)[2])
            self.assertEqual(sorted((r["item"], r["user"], sorted(r["reactions"])) for r in rows),
                             [("m1", "u1", ["like", "love"]), ("m1", "u2", ["laugh"]), ("m2", "u1", ["love"])])
            with Server(args=args) as b:
                import_rows(b, export_lines(a)[2])
                self.assertEqual(rows_of(export_lines(b)[2]), rows)
                want = {"m1": {"like": 1, "love": 1, "laugh": 1}, "m2": {"like": 0, "love": 1, "laugh": 0}}
                wait_counts(self, a, want)
                wait_counts(self, b, want)


class SnapshotTest(TallyTestCase):

    def test_rows_written_during_an_export_are_not_in_it(self):
        rows = [{"item": "s%05d" % i, "user": "u%d" % (i % 7), "reaction": "like"} for i in range(20000)]
        with Server(args=FAST + IMPORT_MAX) as s:
            import_rows(s, rows)
            conn, resp = open_export(s, "/v1/admin/export")
            try:
                first = resp.read(4096)  # the export has begun: its snapshot is taken
                self.assertTrue(first)
                self.assertOk(s.put("s99999", "late", "like"))  # sorts after every row
                self.assertOk(s.put("s00000", "u0", "none"))    # the first row, already sent
                self.assertOk(s.put("s15000", "u6", "none"))    # a row not sent yet
                rest = resp.read()
            finally:
                conn.close()
            got = rows_of([json.loads(x) for x in (first + rest).decode().splitlines()])
            self.assertEqual(got, rows, "the export is the store as it was when it began")
            after = rows_of(export_lines(s)[2])
            self.assertEqual(len(after), len(rows) - 1)


class RoundTripTest(TallyTestCase):

    def round_trip(self, a, b):
        rows = sample_rows(n_items=50, n_users=80)
        import_rows(a, rows)
        self.assertOk(a.put("it01", "writer", "like"))
        exported = export_lines(a)[2]
        self.assertEqual(len(rows_of(exported)), len(rows) + 1)
        doc = import_rows(b, exported)  # the closing line is skipped
        self.assertEqual(doc["applied"], len(rows) + 1)
        self.assertEqual(rows_of(export_lines(b)[2]), rows_of(exported))
        want = expected_counts(rows_of(exported))
        wait_counts(self, a, want)
        wait_counts(self, b, want)
        recount = self.assertOk(b.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
        self.assertEqual(recount["drift"], [])

    def test_voided_users_are_carried(self):
        # Runs once the build can void users (POST /v1/admin/users/{user}/void); skipped before.
        rows = sample_rows(n_items=20, n_users=10)
        with Server(args=FAST) as a, Server(args=FAST) as b:
            import_rows(a, rows)
            st, _, _, raw = a.json("POST", "/v1/admin/users/u001/void", headers=ADMIN)
            if st == 404:
                self.skipTest("voiding users is not in this build")
            self.assertEqual(st, 200, raw[:300])
            exported = export_lines(a)[2]
            self.assertIn({"user": "u001", "voided": True}, exported)
            self.assertEqual(len(rows_of(exported)), len(rows) + 1, "the voided line is counted in N")
            import_rows(b, exported)
            who = self.assertOk(b.json("GET", "/v1/admin/users/u001", headers=ADMIN))
            self.assertTrue(who["voided"], who)
            self.assertEqual(rows_of(export_lines(b)[2]), rows_of(exported))
            wait_counts(self, b, expected_counts([r for r in rows if r["user"] != "u001"]))

    def test_into_an_empty_store(self):
        with Server(args=FAST) as a, Server(args=FAST) as b:
            self.round_trip(a, b)

    @pg_only("the other store is PostgreSQL")
    def test_from_postgresql_to_embedded(self):
        with Server(args=FAST) as a, EmbeddedServer(args=FAST) as b:
            self.round_trip(a, b)

    @pg_only("the other store is PostgreSQL")
    def test_from_embedded_to_postgresql(self):
        with EmbeddedServer(args=FAST) as a, Server(args=FAST) as b:
            self.round_trip(a, b)


class LimitsTest(TallyTestCase):

    def test_max_exports(self):
        rows = [{"item": "c%05d" % i, "user": "u" + LONG_USER, "reaction": "like"} for i in range(20000)]
        with Server(args=FAST + IMPORT_MAX + ["--max-exports", "1"]) as s:
            import_rows(s, rows)
            conn, resp = open_export(s, "/v1/admin/export")
            try:
                self.assertEqual(resp.status, 200)
                first = resp.read(1024)  # held open, not read to its end
                st, headers, doc, raw = s.json("GET", "/v1/admin/export", headers=ADMIN)
                self.assertProblem((st, headers, doc, raw), 503, "overloaded")
                self.assertTrue(int(headers.get("retry-after", "0")) >= 1, headers)
                self.assertProblem(s.json("GET", "/v1/users/v/export", user="v"), 503, "overloaded")
                rest = resp.read()
            finally:
                conn.close()
            body = (first + rest).decode().splitlines()
            self.assertEqual(len(rows_of([json.loads(x) for x in body])), len(rows))
            deadline = time.monotonic() + 5 * SLOW
            while True:  # the slot is free once the export's thread has let go of its snapshot
                st, _, lines = export_lines(s)
                if st == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(st, 200)
            self.assertEqual(len(rows_of(lines)), len(rows))
            self.assertGreaterEqual(metric(s, "tally_exports_refused_total"), 2)
            # a client that leaves part-way frees its slot (and the snapshot) at once
            conn, resp = open_export(s, "/v1/admin/export")
            self.assertEqual(resp.status, 200)
            resp.read(1024)
            resp.close()  # the socket is the response's too
            conn.close()
            deadline = time.monotonic() + 5 * SLOW
            while metric(s, "tally_exports_running") != 0:
                self.assertLess(time.monotonic(), deadline, "the export of a client gone still runs")
                time.sleep(0.05)
            self.assertEqual(export_lines(s)[0], 200)
            self.assertGreaterEqual(metric(s, "tally_exports_cut_total"), 1)
            self.assertEqual(metric(s, "tally_exports_completed_total"), 3)

    def test_export_timeout_cuts(self):
        rows = [{"item": "t%05d" % i, "user": "u" + LONG_USER, "reaction": "like"} for i in range(50000)]
        with Server(args=FAST + IMPORT_MAX + ["--export-timeout", "1s"]) as s:
            import_rows(s, rows)
            conn, resp = open_export(s, "/v1/admin/export")
            got = b""
            cut = False
            try:
                self.assertEqual(resp.status, 200)
                t0 = time.monotonic()
                while time.monotonic() - t0 < 1.5:  # slower than the timeout allows
                    got += resp.read(2048)
                    time.sleep(0.01)
                got += resp.read()
            except http.client.IncompleteRead as e:
                got += e.partial
                cut = True
            finally:
                conn.close()
            self.assertTrue(cut, "a cut export does not end its body as a whole one does")
            self.assertNotIn(b'"export":"complete"', got)
            whole = [json.loads(x) for x in got.decode(errors="replace").splitlines()[:-1]]
            self.assertTrue(0 < len(whole) < len(rows), len(whole))
            self.assertEqual(whole, rows[:len(whole)], "what was sent is the start of the rows")
            self.assertIn("event=export kind=admin outcome=cut", s.stderr())
            # a fast one is whole
            st, _, lines = export_lines(s)
            self.assertEqual(len(rows_of(lines)), len(rows))


class ShutdownTest(TallyTestCase):

    def test_sigterm_cuts_an_export_in_progress(self):
        rows = [{"item": "d%05d" % i, "user": "u" + LONG_USER, "reaction": "like"} for i in range(20000)]
        with Server(args=FAST + IMPORT_MAX) as s:
            import_rows(s, rows)
            conn, resp = open_export(s, "/v1/admin/export")
            try:
                self.assertEqual(resp.status, 200)
                got = resp.read(4096)  # then not read while the server stops
                t0 = time.monotonic()
                s.stop()  # exit status 0
                self.assertLess(time.monotonic() - t0, 8 * SLOW)
                try:
                    got += resp.read()
                    cut = False
                except http.client.IncompleteRead as e:
                    got += e.partial
                    cut = True
            finally:
                conn.close()
            self.assertTrue(cut, "a cut export does not end its body as a whole one does")
            self.assertNotIn(b'"export":"complete"', got)
            self.assertIn("event=export kind=admin outcome=cut", s.logs[-1])


@unittest.skipIf(os.environ.get("TALLY_SANITIZED"),
                 "ASan keeps freed memory in its quarantine: the heap is measured on the release build")
class MemoryTest(TallyTestCase):
    # measures the server's resident memory: run alone (run_e2e.py -j)
    serial = True

    def test_slow_reader_does_not_grow_the_server(self):
        rows = [{"item": "r%06d" % i, "user": "user%03d%s" % (i % 500, LONG_USER), "reaction": "like"}
                for i in range(BIG_ROWS)]
        with Server(args=FAST + IMPORT_MAX) as s:
            import_rows(s, rows)
            settled(s)  # the fold of the import is done: what grows now is the export's
            export_lines(s)  # once, so that the allocator has what a page needs
            base_kb = rss_anon_kb(s.pid)
            conn, resp = open_export(s, "/v1/admin/export")
            peak_kb, read, got = base_kb, 0, []
            try:
                self.assertEqual(resp.status, 200)
                t0 = time.monotonic()
                while time.monotonic() - t0 < 2.0:  # ~200 KB/s: the body is 11-22 MB
                    part = resp.read(2048)
                    got.append(part)
                    read += len(part)
                    time.sleep(0.01)
                    peak_kb = max(peak_kb, rss_anon_kb(s.pid))
                got.append(resp.read())  # then at full speed
                peak_kb = max(peak_kb, rss_anon_kb(s.pid))
            finally:
                conn.close()
            body = b"".join(got)
            self.assertLess(read, len(body) // 4, "the slow part read a small share of the body")
            self.assertEqual(len(rows_of([json.loads(x) for x in body.decode().splitlines()])), len(rows))
            grown_kb = peak_kb - base_kb
            # a page is ~60 KB; the body ~12 MB: a server that rendered ahead of its reader would
            # hold megabytes
            self.assertLess(grown_kb, 4096, "RssAnon grew %d KB exporting %d bytes (base %d KB)"
                            % (grown_kb, len(body), base_kb))
