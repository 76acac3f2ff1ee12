"""The feature version (docs/operations.md "Feature versions"): voiding users and item policies are
used only once every node runs a build that knows them. Each node registers the highest feature
version it supports (and heartbeats it each second on PostgreSQL); the version in force is raised to
the lowest one supported by the nodes seen in the last 5 s, never lowered.

- both stores: a fresh store reaches this build's version at once with one node (metrics, log line);
- PostgreSQL: a node that supports less (its record written into the database, as such a node would
  write it) holds the version back: voids, restores and policy changes are refused with
  409 feature-unavailable naming both versions, and change nothing, until that node is gone;
- PostgreSQL: a node below the version in force refuses to start (exit 1, naming both versions),
  and a running node that finds itself passed stops with status 1;
- PostgreSQL: a store used with policies before it held a version starts at their version.
"""

import re
import time

from harness import Server, TallyTestCase, check_sanitizer, metric, pg_only, run_tallyd, tail, uid

ADMIN = {"X-User-Id": "admin"}
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
SUPPORTED = 2  # FEATURE_VERSION_SUPPORTED in src/engine/features.h
ALIVE_S = 5    # FEATURES_ALIVE_MS


def wait_metric(srv, name, want, timeout):
    deadline = time.monotonic() + timeout
    while True:
        got = metric(srv, name)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def now_ms_sql(offset_ms=0):
    return "((extract(epoch from clock_timestamp()) * 1000)::bigint + %d)" % offset_ms


def put_node(db, node, supported, offset_ms):
    """The record a node supporting `supported` writes, stamped now + offset_ms."""
    db.sql("INSERT INTO tally_aux VALUES ('feature/n/%s', convert_to('%d ' || %s, 'UTF8')) ON CONFLICT (key) "
           "DO UPDATE SET value = excluded.value" % (node, supported, now_ms_sql(offset_ms)))


class FreshStoreTest(TallyTestCase):

    def test_a_fresh_store_reaches_the_version_at_once(self):
        with Server(args=FAST) as srv:
            self.assertEqual(metric(srv, "tally_feature_version"), SUPPORTED)
            self.assertEqual(metric(srv, "tally_feature_version_supported"), SUPPORTED)
            self.assertEqual(metric(srv, "tally_feature_nodes"), 1)
            self.assertEqual(metric(srv, "tally_feature_nodes_behind"), 0)
            self.assertRegex(srv.stderr(), r"event=feature-version in_force=%d supported=%d" % (SUPPORTED, SUPPORTED))
            user, item = uid("u"), uid("i")
            self.assertOk(srv.put(item, user, "like"))
            st, _, doc, _ = srv.json("POST", "/v1/admin/users/%s/void" % user, headers=ADMIN)
            self.assertEqual((st, doc), (200, {"voided": 1}))
            st, _, _, _ = srv.json("PUT", "/v1/admin/policies/%s" % item, {"closed": True}, headers=ADMIN)
            self.assertEqual(st, 200)


@pg_only()
class NodesTest(TallyTestCase):

    def reset_versions(self, srv):
        """The database as a build before the feature version left it: no feature/ records."""
        srv.stop()
        srv.db.sql("DELETE FROM tally_aux WHERE key LIKE 'feature/%'")

    def assertRefused(self, resp, need_detail=True):
        st, _, doc, _ = resp
        self.assertEqual(st, 409, doc)
        self.assertEqual(doc["type"], "urn:tally:error:feature-unavailable")
        self.assertRegex(doc["detail"], r"feature version %d; the version in force is 1" % SUPPORTED)

    def test_an_older_node_holds_the_version_back_until_it_is_gone(self):
        with Server(args=FAST) as a:
            user, item = uid("u"), uid("i")
            self.assertOk(a.put(item, user, "like"))
            self.reset_versions(a)
            put_node(a.db, "old-1", 1, 3600 * 1000)  # alive (its clock ahead) until the test says
            a.start()
            b = a.node()
            try:
                for n in (a, b):
                    self.assertEqual(metric(n, "tally_feature_version"), 1)
                    self.assertEqual(metric(n, "tally_feature_nodes_behind"), 1)
                self.assertRegex(a.stderr(), r"event=feature-version-held in_force=1 supported=%d" % SUPPORTED)
                # refused, and nothing changed: the user counts, no policy
                self.assertRefused(b.json("POST", "/v1/admin/users/%s/void" % user, headers=ADMIN))
                self.assertRefused(a.json("POST", "/v1/admin/users/%s/restore" % user, headers=ADMIN))
                self.assertRefused(a.json("PUT", "/v1/admin/policies/%s" % item, {"closed": True}, headers=ADMIN))
                self.assertRefused(b.json("DELETE", "/v1/admin/policies/%s" % item, headers=ADMIN))
                st, _, doc, _ = a.json("GET", "/v1/admin/users/%s" % user, headers=ADMIN)
                self.assertEqual((st, doc["voided"]), (200, False))
                self.assertEqual(a.json("GET", "/v1/admin/policies", headers=ADMIN)[2], {"policies": []})
                self.assertCounts(a, item, {"like": 1, "dislike": 0})
                self.assertEqual(a.db.sql("SELECT count(*) FROM tally_aux WHERE key LIKE 'void/%' OR key LIKE "
                                          "'policy/%'"), "0")
                # the old node stops: last seen a minute ago, past the bound; raised within a heartbeat or
                # two once a node has itself heartbeated for the bound without a failure
                put_node(a.db, "old-1", 1, -60 * 1000)
                for n in (a, b):
                    self.assertEqual(wait_metric(n, "tally_feature_version", SUPPORTED, ALIVE_S + 4.0), SUPPORTED)
                self.assertRegex(a.stderr() + b.stderr(), r"event=feature-version-raised from=1 to=%d" % SUPPORTED)
                st, _, doc, _ = b.json("POST", "/v1/admin/users/%s/void" % user, headers=ADMIN)
                self.assertEqual((st, doc), (200, {"voided": 1}))
                self.assertCounts(a, item, {"like": 0, "dislike": 0}, timeout=3.0)
                self.assertEqual(a.json("PUT", "/v1/admin/policies/%s" % item, {"closed": True},
                                        headers=ADMIN)[0], 200)
                # never lowered: an old node seen again does not take it back; it could not start
                put_node(a.db, "old-1", 1, 3600 * 1000)
                time.sleep(1.5)
                self.assertEqual(metric(a, "tally_feature_version"), SUPPORTED)
                self.assertEqual(a.json("DELETE", "/v1/admin/policies/%s" % item, headers=ADMIN)[0], 204)
                b.stop()
            finally:
                b.close()

    def test_a_node_below_the_version_in_force_refuses_to_start_and_a_passed_node_stops(self):
        with Server(args=FAST) as a:
            self.assertEqual(metric(a, "tally_feature_version"), SUPPORTED)
            # a newer build raised the version past this one (with this node taken for gone)
            a.db.sql("UPDATE tally_aux SET value = convert_to('%d', 'UTF8') WHERE key = 'feature/v'"
                     % (SUPPORTED + 1))
            rc, out, err = run_tallyd(["--listen", "127.0.0.1:0"] + a.store_args() + FAST)
            self.assertEqual(rc, 1, "a node below the version in force\n" + tail(err))
            self.assertRegex(err, r"feature version in force is %d and this build supports %d"
                             % (SUPPORTED + 1, SUPPORTED))
            # the running node finds itself passed at its next heartbeat and stops, status 1
            rc = a.proc.wait(5.0)
            err = a._retire()
            self.assertEqual(rc, 1, "the passed node\n" + tail(err))
            check_sanitizer(err)  # stopped as on SIGTERM: a clean shutdown
            self.assertRegex(err, r"event=feature-version-passed in_force=%d supported=%d"
                             % (SUPPORTED + 1, SUPPORTED))
            # never lowered by a node that supports less
            self.assertEqual(a.db.sql("SELECT convert_from(value, 'UTF8') FROM tally_aux WHERE key = 'feature/v'"),
                             str(SUPPORTED + 1))

    def test_a_store_used_with_policies_before_starts_at_their_version(self):
        with Server(args=FAST) as a:
            item = uid("i")
            self.assertEqual(a.json("PUT", "/v1/admin/policies/%s" % item, {"closed": True}, headers=ADMIN)[0], 200)
            self.reset_versions(a)
            # a node that supports less is seen (alive), yet the store already holds policies: only builds
            # that knew them wrote them, so the version starts there and is never lowered
            put_node(a.db, "old-2", 1, 3600 * 1000)
            a.start()
            self.assertEqual(metric(a, "tally_feature_version"), SUPPORTED)
            self.assertEqual(a.json("DELETE", "/v1/admin/policies/%s" % item, headers=ADMIN)[0], 204)
