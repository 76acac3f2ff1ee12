"""Operations, per docs/api.md (Change feed, Operations) and the operator's tool `build/tally`:
GET /metrics, GET /v1/changes (paging, long polling, retention), POST /v1/admin/recount,
`tally stats|verify|backup|token`.

Needs build/tally and build/corrupt_count (`make all build/corrupt_count`)."""

import base64
import calendar
import collections
import hashlib
import hmac
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (PG, SHARDS, one_shard, REPO_ROOT, SLOW, Server, SharedServerTestCase, TallyTestCase, child_env,
                     embedded_only, secret as new_secret, server_without_rate_limit,
                     significant_digits, tail, uid)

TALLY = os.path.join(REPO_ROOT, "build", "tally")
CORRUPT_COUNT = os.path.join(REPO_ROOT, "build", "corrupt_count")
ADMIN = {"X-User-Id": "admin"}
AT_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ENTRY_KEYS = {"cursor", "item", "user", "from", "to", "version", "at"}


# ---- the operator's tool ------------------------------------------------------------------
def run_tool(path, args, env=None, timeout=60):
    try:
        return subprocess.run([path] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, env=env if env is not None else child_env(),
                              cwd=REPO_ROOT, timeout=timeout)
    except FileNotFoundError:
        raise AssertionError("%s is missing: make all build/corrupt_count" % path)


def tally(*args, env=None, timeout=60):
    return run_tool(TALLY, args, env=env, timeout=timeout)


def corrupt_count(data_dir, item, kind, delta):
    r = run_tool(CORRUPT_COUNT, [data_dir, item, kind, str(delta)])
    if r.returncode != 0:
        raise AssertionError("corrupt_count failed (%s): %s %s" % (r.returncode, r.stdout, r.stderr))


def show(r):
    return "\n  exit %r\n  stdout %r\n  stderr %r" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


# ---- Prometheus text format ---------------------------------------------------------------
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$")
LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')
TYPE_RE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$")


class Metrics:
    """A parsed exposition. Raises AssertionError (with the line) on any format error."""

    def __init__(self, text):
        self.types = {}
        self.samples = {}  # (name, ((label, value), ...) sorted) -> float
        done, current = set(), None
        for n, line in enumerate(text.split("\n"), 1):
            if not line:
                continue
            where = "line %d: %r" % (n, line)
            if line.startswith("#"):
                m = TYPE_RE.match(line)
                if m:
                    if m.group(1) in self.types:
                        raise AssertionError("second # TYPE for a family, " + where)
                    self.types[m.group(1)] = m.group(2)
                elif not line.startswith("# HELP ") and line.startswith("# TYPE"):
                    raise AssertionError("malformed # TYPE, " + where)
                continue
            m = SAMPLE_RE.match(line)
            if not m:
                raise AssertionError("not `name{labels} value`, " + where)
            name, labels_text, value_text = m.groups()
            try:
                value = float(value_text)
            except ValueError:
                raise AssertionError("value is not a number, " + where)
            labels = self._labels(labels_text or "", where)
            family = self.family(name)
            if family is None:
                raise AssertionError("sample without a preceding # TYPE for its family, " + where)
            if family != current:
                if family in done:
                    raise AssertionError("samples of family %s are not together, %s" % (family, where))
                if current is not None:
                    done.add(current)
                current = family
            key = (name, tuple(sorted(labels.items())))
            if key in self.samples:
                raise AssertionError("duplicate sample, " + where)
            self.samples[key] = value

    @staticmethod
    def _labels(text, where):
        out, pos = {}, 0
        while pos < len(text):
            m = LABEL_RE.match(text, pos)
            if not m:
                raise AssertionError("malformed labels, " + where)
            if m.group(1) in out:
                raise AssertionError("label given twice, " + where)
            out[m.group(1)] = m.group(2)
            pos = m.end()
        return out

    def family(self, name):
        if name in self.types:
            return name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.types.get(base) in ("histogram", "summary"):
                if suffix == "_bucket" and self.types[base] != "histogram":
                    return None
                return base
        return None

    def get(self, name, default=None, **labels):
        return self.samples.get((name, tuple(sorted(labels.items()))), default)

    def value(self, name, **labels):
        """A sample that must exist."""
        v = self.get(name, **labels)
        if v is None:
            raise AssertionError("no sample %s%r" % (name, labels))
        return v

    def histograms(self, family):
        """{labels without le: [(le, count), ...] in exposition order}"""
        out = collections.OrderedDict()
        for (name, labels), v in self.samples.items():
            if name == family + "_bucket":
                d = dict(labels)
                le = d.pop("le", None)
                out.setdefault(tuple(sorted(d.items())), []).append((le, v))
        return out


def scrape(test, srv):
    st, hdrs, body = srv.request("GET", "/metrics")
    test.assertEqual(st, 200, body[:300])
    ctype = hdrs.get("content-type", "")
    test.assertEqual(ctype.split(";")[0].strip().lower(), "text/plain", "metrics content-type")
    test.assertIn("version=0.0.4", ctype.replace(" ", ""), "metrics content-type version")
    return Metrics(body.decode("utf-8"))


COUNTERS = ("tally_http_requests_total", "tally_writer_commits_total", "tally_writes_total",
            "tally_writes_failed_total", "tally_transitions_total", "tally_pipeline_folded_total",
            "tally_pipeline_count_updates_total", "tally_idempotent_replays_total",
            "tally_rate_limited_total", "tally_recount_corrections_total",
            "tally_recount_runs_total")
GAUGES = ("tally_writer_queue_depth", "tally_pipeline_lag_seconds", "tally_recount_drift",
          "tally_store_used_bytes", "tally_store_rows", "tally_store_items", "tally_log_entries",
          "tally_idempotency_records", "tally_store_file_bytes", "process_resident_memory_bytes")
HISTOGRAMS = ("tally_write_duration_seconds", "tally_writer_batch_commands",
              "tally_pipeline_batch_entries")


# ---- change feed helpers ------------------------------------------------------------------
def feed_path(after=None, limit=None, wait=None):
    q = []
    for k, v in (("after", after), ("limit", limit), ("wait", wait)):
        if v is not None:
            q.append("%s=%s" % (k, v))
    return "/v1/changes" + ("?" + "&".join(q) if q else "")


def as_tuple(e):
    return (e["item"], e["user"], e["from"], e["to"], e["version"])


class FeedCase(TallyTestCase):

    def page(self, srv, after=None, limit=None, wait=None, client=None):
        path = feed_path(after, limit, wait)
        resp = (client or srv).json("GET", path, headers=ADMIN)
        doc = self.assertOk(resp, "GET " + path)
        self.assertEqual(set(doc), {"changes", "next", "mode"}, "feed page members")
        self.assertEqual(doc["mode"], "one")
        self.assertIsInstance(doc["changes"], list)
        self.assertIsInstance(doc["next"], str)
        for e in doc["changes"]:
            self.assertEqual(set(e), ENTRY_KEYS, "feed entry members: %r" % e)
            self.assertIsInstance(e["cursor"], str)
            self.assertIsInstance(e["version"], int)
            self.assertRegex(e["at"], AT_RE, "`at` is ISO-8601 UTC with milliseconds and Z")
        if doc["changes"]:
            self.assertEqual(doc["next"], doc["changes"][-1]["cursor"], "next is the last cursor")
        elif after is not None:
            self.assertEqual(doc["next"], str(after), "an empty page's next is the cursor given")
        if limit is not None:
            self.assertLessEqual(len(doc["changes"]), int(limit), "page longer than limit")
        return doc

    def walk(self, srv, after=None, limit=1000, max_pages=10000):
        """Every entry after `after` (from the oldest without), and the last `next`."""
        entries, pages = [], []
        for _ in range(max_pages):
            doc = self.page(srv, after, limit)
            pages.append(doc["changes"])
            if not doc["changes"]:
                return entries, doc["next"], pages
            entries.extend(doc["changes"])
            after = doc["next"]
        self.fail("the feed did not end within %d pages" % max_pages)

    def tail(self, srv):
        return self.walk(srv)[1]

    def assertCursorsIncrease(self, cursors, msg=""):
        self.assertEqual(len(set(cursors)), len(cursors), "a cursor repeats " + msg)
        if all(c.isdigit() for c in cursors):  # opaque, but this build's are numbers
            nums = [int(c) for c in cursors]
            self.assertEqual(nums, sorted(nums), "cursors not strictly increasing " + msg)


# ============================================================================================
class MetricsTest(SharedServerTestCase):

    @embedded_only("asserts tally_store_file_bytes and tally_store_used_bytes, the embedded "
                   "store's files (the other families are covered on both by the tests below)")
    def test_format_and_families(self):
        self.srv.put(uid("item"), uid("user"), "like")
        m = scrape(self, self.srv)
        for name in COUNTERS:
            self.assertEqual(m.types.get(name), "counter", "# TYPE of " + name)
        for name in GAUGES:
            self.assertEqual(m.types.get(name), "gauge", "# TYPE of " + name)
        for name in HISTOGRAMS:
            self.assertEqual(m.types.get(name), "histogram", "# TYPE of " + name)
        for name in COUNTERS[1:] + GAUGES:
            v = m.value(name)
            self.assertGreaterEqual(v, 0, name)
            self.assertFalse(math.isnan(v), name)
        self.assertGreater(m.value("process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(m.value("tally_store_used_bytes"), 0)
        self.assertGreater(m.value("tally_store_file_bytes"), 0)
        # every requests_total sample carries route and status, status a 3-digit code
        req = [(dict(l), v) for (n, l), v in m.samples.items() if n == "tally_http_requests_total"]
        self.assertTrue(req, "no tally_http_requests_total samples after a write")
        for labels, v in req:
            self.assertEqual(set(labels), {"route", "status"}, labels)
            self.assertRegex(labels["status"], r"^[1-5]\d\d$")
            self.assertEqual(v, int(v))

    def test_values_in_their_shortest_form(self):
        """Every sample's value has the fewest digits that read back as the same double (what
        Python's repr prints): a sum of durations is 0.004048509, not 0.0040485090000000003."""
        for _ in range(5):
            self.srv.put(uid("item"), uid("user"), "like")
        st, _, body = self.srv.request("GET", "/metrics")
        self.assertEqual(st, 200)
        checked = 0
        for line in body.decode("utf-8").split("\n"):
            m = SAMPLE_RE.match(line)
            if not m or m.group(3) in ("NaN", "+Inf", "-Inf"):
                continue
            text = m.group(3)
            self.assertEqual(significant_digits(text), significant_digits(repr(float(text))),
                             "not the shortest form of its value: " + line)
            checked += "." in text
        self.assertGreater(checked, 0, "no sample with a fraction to look at")

    def test_histograms_cumulative(self):
        s = self.srv
        for _ in range(5):
            s.put(uid("item"), uid("user"), "dislike")
        m = scrape(self, s)
        for fam in HISTOGRAMS:
            groups = m.histograms(fam)
            self.assertTrue(groups, "no buckets for " + fam)
            for labels, buckets in groups.items():
                les = [le for le, _ in buckets]
                self.assertNotIn(None, les, "%s bucket without le" % fam)
                self.assertEqual(les[-1], "+Inf", "%s: the last bucket is +Inf" % fam)
                bounds = [float(le) for le in les]
                self.assertEqual(bounds, sorted(bounds), "%s: buckets in le order" % fam)
                self.assertEqual(len(set(bounds)), len(bounds), "%s: le repeats" % fam)
                counts = [v for _, v in buckets]
                for a, b in zip(counts, counts[1:]):
                    self.assertLessEqual(a, b, "%s buckets not cumulative: %r" % (fam, buckets))
                lbl = dict(labels)
                self.assertEqual(m.value(fam + "_count", **lbl), counts[-1],
                                 "%s_count equals the +Inf bucket" % fam)
                self.assertGreaterEqual(m.value(fam + "_sum", **lbl), 0)
            self.assertGreaterEqual(m.value(fam + "_count"), 5 if fam != "tally_pipeline_batch_entries" else 1)

    def test_counters_move_with_writes(self):
        s, item, user = self.srv, uid("item"), uid("user")
        key = uid("key")

        def rv(m, status):
            return m.get("tally_http_requests_total", 0, route="reaction", status=status)

        m0 = scrape(self, s)
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
        self.assertWrite(s.put(item, user, "like"), item, "like", "like", 1, False)
        self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "like", 2, True)
        first = s.put(item, user, "none", headers={"Idempotency-Key": key})
        self.assertWrite(first, item, "none", "dislike", 3, True)
        again = s.put(item, user, "none", headers={"Idempotency-Key": key})
        self.assertEqual((again[0], again[3]), (first[0], first[3]), "replay")
        self.assertEqual(again[1].get("idempotent-replayed"), "true")
        self.assertProblem(s.put(item, user, "bogus"), 400, "invalid-reaction")
        m1 = scrape(self, s)

        def delta(name, **labels):
            return m1.get(name, 0, **labels) - m0.get(name, 0, **labels)

        self.assertEqual(delta("tally_transitions_total"), 3, "only real changes are transitions")
        self.assertEqual(delta("tally_idempotent_replays_total"), 1)
        self.assertEqual(rv(m1, "200") - rv(m0, "200"), 5, "requests_total{reaction,200}")
        self.assertEqual(rv(m1, "400") - rv(m0, "400"), 1, "requests_total{reaction,400}")
        self.assertGreaterEqual(delta("tally_writes_total"), 3)
        claims = 2 if PG and SHARDS > 1 else 0  # the two keyed writes' claims, commands of their own
        self.assertLessEqual(delta("tally_writes_total"), 5 + claims)
        self.assertGreaterEqual(delta("tally_writer_commits_total"), 1)
        self.assertEqual(delta("tally_writes_failed_total"), 0)
        self.assertEqual(delta("tally_rate_limited_total"), 0)
        self.assertGreaterEqual(delta("tally_write_duration_seconds_count"), 3)
        self.assertGreater(delta("tally_write_duration_seconds_sum"), 0)
        # the fold catches up: exactly the 3 transitions are folded
        deadline = time.monotonic() + 3 * SLOW
        while delta("tally_pipeline_folded_total") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            m1 = scrape(self, s)
        self.assertEqual(delta("tally_pipeline_folded_total"), 3)
        self.assertGreaterEqual(m1.value("tally_log_entries"), 3)
        self.assertGreaterEqual(m1.value("tally_idempotency_records"), 1)
        # an idempotency replay or no-op write adds no transition later either
        self.assertCounts(s, item, {"like": 0, "dislike": 0})


# ============================================================================================
@one_shard("decimal cursors, next = the last cursor (a token with several shards: test_shards_feed.py)")
class ChangesTest(SharedServerTestCase, FeedCase):

    def test_access(self):
        s = self.srv
        self.assertProblem(s.json("GET", "/v1/changes"), 401, "unauthenticated")
        self.assertProblem(s.json("GET", "/v1/changes", user=uid("user")), 403, "forbidden")
        self.assertProblem(s.json("GET", "/v1/changes?limit=5", user="Admin"), 403, "forbidden")
        self.page(s)

    def test_bad_parameters(self):
        s = self.srv
        s.put(uid("item"), uid("user"), "like")
        newest = self.tail(s)
        self.assertTrue(newest.isdigit(), "this test needs numeric cursors: %r" % newest)
        bad = ["limit=0", "limit=1001", "limit=abc", "limit=-1", "limit=1.5", "limit=",
               "limit=99999999999999999999999",
               "wait=31", "wait=-1", "wait=x", "wait=1.5", "wait=",
               "after=abc", "after=-1", "after=", "after=%d" % (int(newest) + 1),
               "after=%d" % (int(newest) + 1000), "after=99999999999999999999999999"]
        for q in bad:
            with self.subTest(q=q):
                self.assertProblem(s.json("GET", "/v1/changes?" + q, headers=ADMIN),
                                   400, "invalid-parameter", q)
        for q in ["limit=1", "limit=1000", "wait=0", "after=" + newest, "after=0&limit=1"]:
            with self.subTest(q=q):
                self.assertOk(s.json("GET", "/v1/changes?" + q, headers=ADMIN), q)

    def test_scripted_sequence(self):
        s, item, user = self.srv, uid("item"), uid("user")
        start = self.tail(s)
        t0 = time.time()
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
        self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "like", 2, True)
        self.assertWrite(s.put(item, user, "dislike"), item, "dislike", "dislike", 2, False)
        self.assertWrite(s.json("DELETE", "/v1/items/%s/like" % item, user=user),
                         item, "dislike", "dislike", 2, False)
        self.assertWrite(s.json("DELETE", "/v1/items/%s/reaction" % item, user=user),
                         item, "none", "dislike", 3, True)
        self.assertWrite(s.json("DELETE", "/v1/items/%s/reaction" % item, user=user),
                         item, "none", "none", 3, False)
        t1 = time.time()
        doc = self.page(s, after=start)
        self.assertEqual([as_tuple(e) for e in doc["changes"]],
                         [(item, user, "none", "like", 1),
                          (item, user, "like", "dislike", 2),
                          (item, user, "dislike", "none", 3)])
        self.assertCursorsIncrease([e["cursor"] for e in doc["changes"]])
        ats = [e["at"] for e in doc["changes"]]
        self.assertEqual(ats, sorted(ats), "`at` in commit order")
        for a in ats:
            secs = calendar.timegm(time.strptime(a[:19], "%Y-%m-%dT%H:%M:%S"))
            self.assertTrue(t0 - 2 <= secs + int(a[20:23]) / 1000.0 <= t1 + 2,
                            "`at` %s is not the commit time (UTC)" % a)
        # the end: an empty page whose next is the cursor given
        end = self.page(s, after=doc["next"])
        self.assertEqual(end, {"changes": [], "next": doc["next"], "mode": "one"})
        # limit=1 pages through the same three
        got, after = [], start
        for _ in range(3):
            p = self.page(s, after=after, limit=1)
            self.assertEqual(len(p["changes"]), 1)
            got.extend(p["changes"])
            after = p["next"]
        self.assertEqual(got, doc["changes"])

    def test_pages_walk_whole_log(self):
        s = self.srv
        c = s.client()
        try:
            for i in range(105):  # more than the default limit, on several items
                status = c.json("PUT", "/v1/items/%s/reaction" % ("walk-%d" % (i % 7)),
                                {"reaction": "like" if i % 3 else "dislike"},
                                user=uid("user"))[0]
                self.assertEqual(status, 200)
        finally:
            c.close()
        whole = self.page(s, limit=1000)["changes"]
        self.assertGreaterEqual(len(whole), 105)
        self.assertLess(len(whole), 1000, "the test's log must fit one page")
        self.assertCursorsIncrease([e["cursor"] for e in whole])
        default = self.page(s)
        self.assertEqual(default["changes"], whole[:100], "default limit is 100, from the oldest")
        self.assertEqual(default["next"], whole[99]["cursor"])
        entries, _, pages = self.walk(s, limit=3)
        self.assertEqual(entries, whole, "pages of 3 walk the log with no gap and no overlap")
        for p in pages[:-2]:
            self.assertEqual(len(p), 3, "a page short of its limit before the end")
        self.assertEqual(pages[-1], [])
        self.assertEqual(entries[-1]["cursor"], whole[-1]["cursor"])
        # paging from the middle with after= continues exactly after that entry
        mid = whole[50]["cursor"]
        self.assertEqual(self.walk(s, after=mid, limit=7)[0], whole[51:])

    def test_long_poll(self):
        s, item, user = self.srv, uid("item"), uid("user")
        start = self.tail(s)
        # nothing arrives: an empty page when the wait runs out
        t0 = time.monotonic()
        doc = self.page(s, after=start, wait=1)
        took = time.monotonic() - t0
        self.assertEqual(doc, {"changes": [], "next": start, "mode": "one"})
        self.assertGreaterEqual(took, 0.9, "wait=1 answered before the wait ran out")
        self.assertLess(took, 1 + 4 * SLOW)
        # a change arrives: answered at once with it
        out = {}

        def poll():
            t = time.monotonic()
            try:
                out["resp"] = s.json("GET", feed_path(start, None, 20), headers=ADMIN)
            except Exception as e:  # noqa: BLE001 - reported by the test
                out["error"] = e
            out["at"] = time.monotonic()
            out["took"] = out["at"] - t

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        time.sleep(0.5)
        self.assertTrue(th.is_alive(), "wait=20 answered before any change: %r" % out)
        t_write = time.monotonic()
        self.assertWrite(s.put(item, user, "like"), item, "like", "none", 1, True)
        th.join(25)
        self.assertFalse(th.is_alive(), "the long poll never answered")
        self.assertNotIn("error", out)
        doc = self.assertOk(out["resp"])
        self.assertEqual([as_tuple(e) for e in doc["changes"]], [(item, user, "none", "like", 1)])
        self.assertLess(out["at"] - t_write, 2 * SLOW, "the poll was not woken by the commit")


@one_shard("decimal cursors, next = the last cursor (a token with several shards: test_shards_feed.py)")
class ChangesConcurrentTest(FeedCase):

    def test_pages_equal_acknowledged_changes(self):
        with server_without_rate_limit() as s:
            items = [uid("ci") for _ in range(3)]
            nthreads, per_thread = 4, 2
            run_for = 2.0
            acked, errors = [], []
            lock = threading.Lock()
            stop = threading.Event()

            def writer(n):
                rnd = random.Random(n)
                users = [uid("cu%d" % n) for _ in range(per_thread)]
                c = s.client(timeout=30)
                mine = []
                try:
                    deadline = time.monotonic() + run_for
                    while time.monotonic() < deadline and not stop.is_set():
                        item, user = rnd.choice(items), rnd.choice(users)
                        r = rnd.choice(["like", "dislike", "none"])
                        st, _, doc, raw = c.json("PUT", "/v1/items/%s/reaction" % item,
                                                 {"reaction": r}, user=user)
                        if st == 200:
                            if doc["changed"]:
                                mine.append((item, user, doc["previous"], doc["reaction"],
                                             doc["version"]))
                        elif st not in (429, 503):
                            raise AssertionError("write -> %s %r" % (st, raw[:200]))
                except Exception as e:  # noqa: BLE001 - reported by the test
                    with lock:
                        errors.append(repr(e))
                finally:
                    c.close()
                    with lock:
                        acked.extend(mine)

            threads = [threading.Thread(target=writer, args=(n,), daemon=True)
                       for n in range(nthreads)]
            for t in threads:
                t.start()
            feed, pages, after = [], 0, None
            reader = s.client(timeout=30)
            deadline = time.monotonic() + 30 * SLOW
            try:
                while time.monotonic() < deadline:
                    writers_done = not any(t.is_alive() for t in threads)
                    t_page = time.monotonic()
                    try:
                        doc = self.page(s, after=after, limit=50, wait=1, client=reader)
                    except OSError as e:
                        raise AssertionError(
                            "page %d (after=%s, writers done: %s) failed after %.3fs: %r\n%s"
                            % (pages, after, writers_done, time.monotonic() - t_page, e,
                               tail(s.stderr())))
                    pages += 1
                    feed.extend(doc["changes"])
                    after = doc["next"]
                    if writers_done and not doc["changes"]:
                        break
                else:
                    self.fail("the reader did not catch up in time")
            finally:
                stop.set()
                reader.close()
                for t in threads:
                    t.join(30)
            self.assertEqual(errors, [])
            self.assertGreaterEqual(len(acked), 20, "too few changes to mean anything")
            self.assertCursorsIncrease([e["cursor"] for e in feed])
            got = collections.Counter(as_tuple(e) for e in feed)
            want = collections.Counter(acked)
            self.assertEqual(sorted(got - want), [], "in the feed but never acknowledged")
            self.assertEqual(sorted(want - got), [], "acknowledged but missing from the feed")
            self.assertEqual(max(got.values()), 1, "an entry appears twice")
            # per (user, item): versions 1, 2, 3... in feed order, each from = the previous to
            chains = collections.defaultdict(list)
            for e in feed:
                chains[(e["user"], e["item"])].append(e)
            for key, es in chains.items():
                self.assertEqual([e["version"] for e in es], list(range(1, len(es) + 1)), key)
                prev = "none"
                for e in es:
                    self.assertEqual(e["from"], prev, "broken chain for %r" % (key,))
                    prev = e["to"]
            # the counts agree with the last reaction of each chain
            for item in items:
                want_counts = {"like": 0, "dislike": 0}
                for (u, i), es in chains.items():
                    if i == item and es[-1]["to"] != "none":
                        want_counts[es[-1]["to"]] += 1
                self.assertCounts(s, item, want_counts)


@one_shard("decimal cursors, next = the last cursor (a token with several shards: test_shards_feed.py)")
class ChangesShutdownTest(FeedCase):

    def test_sigterm_answers_waiting_poll(self):
        with Server() as s:
            s.put(uid("item"), uid("user"), "like")
            start = self.tail(s)
            out = {}

            def poll():
                try:
                    out["resp"] = s.json("GET", feed_path(start, None, 30), headers=ADMIN)
                except Exception as e:  # noqa: BLE001 - reported by the test
                    out["error"] = repr(e)
                out["at"] = time.monotonic()

            th = threading.Thread(target=poll, daemon=True)
            th.start()
            time.sleep(0.5 * SLOW)
            self.assertTrue(th.is_alive(), "wait=30 answered early: %r" % out)
            t0 = time.monotonic()
            s.stop()  # SIGTERM; asserts exit status 0
            stopped = time.monotonic() - t0
            th.join(10)
            self.assertFalse(th.is_alive(), "the waiting poll was never answered")
            self.assertNotIn("error", out, "the waiting poll was not answered before exit")
            doc = self.assertOk(out["resp"])
            self.assertEqual(doc, {"changes": [], "next": start, "mode": "one"})
            self.assertLess(out["at"] - t0, 5 * SLOW, "the poll waited out its wait")
            self.assertLess(stopped, 10 * SLOW)


@one_shard("decimal cursors, next = the last cursor (a token with several shards: test_shards_feed.py)")
class ChangesRetentionTest(FeedCase):

    def test_expired_cursor(self):
        with Server(args=["--log-retention", "1s"]) as s:
            for _ in range(3):
                s.put(uid("item"), uid("user"), "like")
            old = self.page(s)["changes"]
            self.assertEqual(len(old), 3)
            cursors = [e["cursor"] for e in old]
            time.sleep(3)
            item, user = uid("item"), uid("user")
            s.put(item, user, "dislike")
            # right after the write: the entry after the last old cursor is still there
            doc = self.page(s, after=cursors[-1])
            self.assertEqual([as_tuple(e) for e in doc["changes"]],
                             [(item, user, "none", "dislike", 1)])
            deadline = time.monotonic() + 5 * SLOW
            while True:
                resp = s.json("GET", "/v1/changes?after=0", headers=ADMIN)
                if resp[0] != 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertProblem(resp, 410, "cursor-expired", "after=0 once the oldest are pruned")
            self.assertProblem(s.json("GET", "/v1/changes?after=" + cursors[0], headers=ADMIN),
                               410, "cursor-expired")
            # without after: from the oldest retained, none of the pruned ones
            doc = self.page(s)
            self.assertFalse({e["cursor"] for e in doc["changes"]} & set(cursors),
                             "pruned entries still served")
            if doc["changes"]:
                self.assertEqual([as_tuple(e) for e in doc["changes"]],
                                 [(item, user, "none", "dislike", 1)])
            m = scrape(self, s)
            self.assertLessEqual(m.value("tally_log_entries"), 1)


# ============================================================================================
class RecountTest(TallyTestCase):

    def test_access_and_bad_bodies(self):
        with Server() as s:
            path = "/v1/admin/recount"
            self.assertProblem(s.json("POST", path, {}), 401, "unauthenticated")
            self.assertProblem(s.json("POST", path, {}, user=uid("user")), 403, "forbidden")
            self.assertProblem(s.json("POST", path, {"items": "x"}, headers=ADMIN),
                               400, "invalid-json")
            self.assertProblem(s.json("POST", path, "{not json", headers=ADMIN),
                               400, "invalid-json")
            self.assertProblem(s.json("POST", path, [], headers=ADMIN), 400, "invalid-json")
            for bad in (["a b"], [""], [".."], ["x" * 129], [1], ["ok", None]):
                with self.subTest(items=bad):
                    self.assertProblem(s.json("POST", path, {"items": bad}, headers=ADMIN),
                                       400, "invalid-item-id")
            doc = self.assertOk(s.json("POST", path, {}, headers=ADMIN))
            self.assertEqual(doc, {"checked": 0, "corrected": 0, "drift": [],
                                   "list_mismatches": 0})

    @embedded_only("corrupt_count edits a count in the embedded store's files")
    def test_drift_found_and_corrected(self):
        a, b, c, d = (uid("rc") for _ in range(4))
        with Server() as s:
            for u in range(3):
                s.put(a, "u%d" % u, "like")
            s.put(a, "u3", "dislike")
            s.put(b, "u0", "like")
            s.put(c, "u0", "dislike")
            s.put(c, "u1", "dislike")
            s.put(d, "u0", "like")
            s.put(d, "u0", "none")  # touched, back to zero
            want_a = {"like": 3, "dislike": 1}
            self.assertCounts(s, a, want_a)
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
            self.assertEqual(doc, {"checked": 4, "corrected": 0, "drift": [],
                                   "list_mismatches": 0})
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {"items": [a, b]},
                                       headers=ADMIN))
            self.assertEqual(doc, {"checked": 2, "corrected": 0, "drift": [],
                                   "list_mismatches": 0})
            self.assertEqual(scrape(self, s).value("tally_recount_drift"), 0)

            s.stop()
            corrupt_count(s.data_dir, a, "like", 5)
            s.start()
            self.assertEqual(s.counts(a), {"like": 8, "dislike": 1}, "the corrupted count is served")
            m0 = scrape(self, s)
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
            self.assertEqual(doc, {"checked": 4, "corrected": 1,
                                   "drift": [{"item": a, "kind": "like", "counted": 3,
                                              "stored": 8}], "list_mismatches": 0})
            self.assertCounts(s, a, want_a)
            self.assertCounts(s, b, {"like": 1, "dislike": 0}, timeout=0)
            self.assertCounts(s, c, {"like": 0, "dislike": 2}, timeout=0)
            m1 = scrape(self, s)
            self.assertEqual(m1.value("tally_recount_drift"), 1, "drift of the last run")
            self.assertEqual(m1.value("tally_recount_corrections_total")
                             - m0.value("tally_recount_corrections_total"), 1)
            self.assertEqual(m1.value("tally_recount_runs_total")
                             - m0.value("tally_recount_runs_total"), 1)
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
            self.assertEqual(doc, {"checked": 4, "corrected": 0, "drift": [],
                                   "list_mismatches": 0})
            self.assertEqual(scrape(self, s).value("tally_recount_drift"), 0)
            # a correction is not a transition: the change feed does not see it
            self.assertEqual(m1.value("tally_transitions_total"), 0)
            st, _, feed, raw = s.json("GET", "/v1/changes?limit=1000", headers=ADMIN)
            self.assertEqual(st, 200, raw[:300])
            self.assertEqual(len(feed["changes"]), 9, "the writes' transitions only")
            # the correction is durable
            s.restart()
            self.assertEqual(s.counts(a), want_a)


# ============================================================================================
@embedded_only("corrupt_count edits a count in the embedded store's files")
class CorruptCountTest(TallyTestCase):
    """A count record that the log contradicts (a negative count on the disk) is an error of the
    store: the write whose fold would take it below zero gets 503 and changes nothing, the server
    keeps running (it used to abort on an assert), the log names the corruption, and a recount
    repairs it."""

    def test_corrupt_count_is_an_error_not_an_abort(self):
        s = Server()
        try:
            a, b = uid("item"), uid("item")
            self.assertEqual(s.put(a, "u1", "like")[0], 200)
            self.assertCounts(s, a, {"like": 1, "dislike": 0})
            s.stop()
            corrupt_count(s.data_dir, a, "like", "=-3")  # past the store's checks
            r = run_tool(CORRUPT_COUNT, [s.data_dir, a, "like", "-5"])
            self.assertEqual(r.returncode, 1, "the store's API refuses a negative count" + show(r))
            self.assertIn("store-corrupt", r.stderr)
            s.start()
            st, headers, doc, raw = s.put(a, "u2", "like")
            self.assertEqual(st, 503, raw[:300])
            self.assertTrue(s.running, "the server stopped on a corrupt record\n" + s.stderr())
            self.assertIn("event=store-corrupt", s.stderr())
            self.assertEqual(s.put(b, "u2", "like")[0], 200, "other items are written")
            self.assertCounts(s, b, {"like": 1, "dislike": 0})
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {"items": [a]}, headers=ADMIN))
            self.assertEqual(doc["corrected"], 1, doc)
            self.assertEqual(s.put(a, "u2", "like")[0], 200)
            self.assertCounts(s, a, {"like": 2, "dislike": 0})
            s.stop()
        finally:
            s.close()


class ToolTest(TallyTestCase):

    def test_help_and_unknown_command(self):
        r = tally("--help")
        self.assertEqual(r.returncode, 0, show(r))
        for sub in ("stats", "verify", "backup", "token"):
            with self.subTest(sub=sub):
                self.assertIn(sub, r.stdout + r.stderr)
                h = tally(sub, "--help")
                self.assertEqual(h.returncode, 0, show(h))
                self.assertIn(sub, h.stdout)
        r = tally("bogus")
        self.assertEqual(r.returncode, 2, show(r))
        self.assertIn("bogus", r.stderr)

    def _populate(self, s):
        """3 items, 5 rows, 6 transitions, 1 idempotency record."""
        a, b, c = uid("ti"), uid("ti"), uid("ti")
        for u in ("u1", "u2", "u3"):
            s.put(a, u, "like")
        s.put(b, "u1", "like")
        s.put(b, "u1", "none")
        s.put(c, "u1", "dislike", headers={"Idempotency-Key": "k1"})
        return a, b, c

    @embedded_only("tally stats/verify work on a data directory (and corrupt_count)")
    def test_stats_and_verify(self):
        with Server() as s:
            a, b, c = self._populate(s)
            self.assertCounts(s, a, {"like": 3, "dislike": 0})
            m = scrape(self, s)
            s.stop()
            r = tally("stats", "--data", s.data_dir)
            self.assertEqual(r.returncode, 0, show(r))
            st = json.loads(r.stdout)
            self.assertEqual(set(st), {"rows", "items", "log_entries", "log_bytes",
                                       "idempotency_records", "store_used_bytes", "checkpoint"})
            self.assertEqual((st["rows"], st["items"], st["log_entries"],
                              st["idempotency_records"]), (5, 3, 6, 1), r.stdout)
            self.assertEqual(st["checkpoint"], 6, "everything is folded")
            self.assertGreater(st["log_bytes"], 0)
            self.assertGreater(st["store_used_bytes"], 0)
            self.assertEqual((m.value("tally_store_rows"), m.value("tally_store_items"),
                              m.value("tally_log_entries"), m.value("tally_idempotency_records")),
                             (5, 3, 6, 1), "the metrics agree with tally stats")
            r = tally("verify", "--data", s.data_dir)
            self.assertEqual(r.returncode, 0, show(r))
            self.assertEqual(r.stdout.strip().splitlines()[-1], "checked 3 items, 0 drift")

            corrupt_count(s.data_dir, a, "like", 5)
            r = tally("verify", "--data", s.data_dir)
            self.assertEqual(r.returncode, 1, show(r))
            lines = r.stdout.strip().splitlines()
            self.assertIn("drift item=%s kind=like counted=3 stored=8" % a, lines, show(r))
            self.assertEqual([l for l in lines if l.startswith("drift ")],
                             ["drift item=%s kind=like counted=3 stored=8" % a])
            self.assertEqual(lines[-1], "checked 3 items, 1 drift")

            s.start()  # the server's recount repairs it, and verify agrees
            doc = self.assertOk(s.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
            self.assertEqual(doc["corrected"], 1)
            s.stop()
            r = tally("verify", "--data", s.data_dir)
            self.assertEqual(r.returncode, 0, show(r))

    @embedded_only("tally stats/verify on a data directory")
    def test_stats_on_missing_store_fails(self):
        tmp = tempfile.mkdtemp(prefix="tally-e2e-nostore-")
        try:
            for sub in ("stats", "verify"):
                r = tally(sub, "--data", os.path.join(tmp, "nothing"))
                self.assertNotEqual(r.returncode, 0, show(r))
                self.assertTrue(r.stderr.strip(), "no message" + show(r))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @embedded_only("tally backup copies a data directory (PostgreSQL has its own backups)")
    def test_backup_under_write_load(self):
        items = [uid("bi") for _ in range(4)]
        users = [[uid("bu%d" % n) for _ in range(3)] for n in range(2)]
        with server_without_rate_limit() as s:
            for it in items:  # something to copy even if the load is slow to start
                s.put(it, users[0][0], "like")
            stop = threading.Event()
            written, errors = [0], []

            def load(n):
                rnd = random.Random(n)
                c = s.client()
                try:
                    while not stop.is_set():
                        st, _, _, raw = c.json(
                            "PUT", "/v1/items/%s/reaction" % rnd.choice(items),
                            {"reaction": rnd.choice(["like", "dislike", "none"])},
                            user=rnd.choice(users[n]))
                        if st == 200:
                            written[0] += 1
                        elif st not in (429, 503):
                            errors.append("%s %r" % (st, raw[:200]))
                            return
                except Exception as e:  # noqa: BLE001 - reported by the test
                    errors.append(repr(e))
                finally:
                    c.close()

            threads = [threading.Thread(target=load, args=(n,), daemon=True) for n in range(2)]
            for t in threads:
                t.start()
            out = os.path.join(s.tmp, "backup")
            try:
                time.sleep(0.3)
                before = written[0]
                r = tally("backup", "--data", s.data_dir, out)
                after = written[0]
                time.sleep(0.1)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)
            self.assertEqual(errors, [])
            self.assertEqual(r.returncode, 0, show(r))
            self.assertGreater(after, before, "no write ran during the backup")
            self.assertTrue(os.path.isdir(out), "backup OUT not created")
            v = tally("verify", "--data", out)
            self.assertEqual(v.returncode, 0, show(v))
            # OUT exists: refused, and OUT is left alone
            again = tally("backup", "--data", s.data_dir, out)
            self.assertEqual(again.returncode, 1, show(again))
            self.assertTrue(again.stderr.strip(), "no message" + show(again))
            empty = os.path.join(s.tmp, "empty")
            os.mkdir(empty)
            r2 = tally("backup", "--data", s.data_dir, empty)
            self.assertEqual(r2.returncode, 1, "an existing (empty) OUT" + show(r2))
            self.assertEqual(tally("verify", "--data", out).returncode, 0)

            with Server(data_dir=out) as b:
                for it in items:
                    want = {"like": 0, "dislike": 0}
                    for u in users[0] + users[1]:
                        r = b.reaction(it, u)["reaction"]
                        if r != "none":
                            want[r] += 1
                    self.assertEqual(b.counts(it), want, "backup: counts of %s vs its rows" % it)


class TokenTest(TallyTestCase):

    def test_token(self):
        secret = new_secret("s3cr3t")
        env = child_env({"TALLY_JWT_SECRET": secret})
        now = time.time()
        for args, role, ttl in ((["--user", "alice"], None, 3600),
                                (["--user", "root", "--admin"], "admin", 3600),
                                (["--user", "bob", "--ttl", "90s"], None, 90),
                                (["--user", "bob", "--ttl", "15m", "--admin"], "admin", 900)):
            with self.subTest(args=args):
                r = tally("token", *args, env=env)
                self.assertEqual(r.returncode, 0, show(r))
                tok = r.stdout.strip()
                self.assertEqual(r.stdout, tok + "\n")
                parts = tok.split(".")
                self.assertEqual(len(parts), 3, tok)
                header = json.loads(b64url_decode(parts[0]))
                payload = json.loads(b64url_decode(parts[1]))
                self.assertEqual(header.get("alg"), "HS256")
                sig = hmac.new(secret.encode(), (parts[0] + "." + parts[1]).encode(),
                               hashlib.sha256).digest()
                self.assertEqual(b64url_decode(parts[2]), sig, "HS256 signature")
                self.assertEqual(payload["sub"], args[1])
                self.assertEqual(payload.get("role"), role)
                self.assertLessEqual(abs(payload["exp"] - (now + ttl)), 30, payload)
        r = tally("token", "--user", "alice")  # no secret at all
        self.assertNotEqual(r.returncode, 0, show(r))
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
