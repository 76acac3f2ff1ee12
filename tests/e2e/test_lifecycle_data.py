"""Data life cycle, per docs/api.md (Data life cycle; Change feed; Operations) and the operator's
tool: POST /v1/admin/import (NDJSON and CSV, skip or abort), DELETE /v1/admin/users/{user},
DELETE /v1/admin/items/{item}, and `tally import|export|erase-user|verify` offline.

Needs build/tally (`make all`). Development mode: `X-User-Id: admin` is the admin."""

import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (REPO_ROOT, SHARDS, SLOW, Server, SharedServerTestCase, TallyTestCase, child_env,
                     embedded_only, uid)

TALLY = os.path.join(REPO_ROOT, "build", "tally")
ADMIN = {"X-User-Id": "admin"}
NDJSON = {"X-User-Id": "admin", "Content-Type": "application/x-ndjson"}
CSV = {"X-User-Id": "admin", "Content-Type": "text/csv"}
KINDS = ("like", "dislike")
ZERO = {"like": 0, "dislike": 0}


def tally(*args, timeout=120):
    try:
        return subprocess.run([TALLY] + list(args), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=child_env(), cwd=REPO_ROOT,
                              timeout=timeout)
    except FileNotFoundError:
        raise AssertionError("%s is missing: make all" % TALLY)


def show(r):
    return "\n  exit %r\n  stdout %r\n  stderr %r" % (r.returncode, r.stdout[-1500:],
                                                     r.stderr[-1500:])


def ndjson(records):
    return "".join(json.dumps({"item": i, "user": u, "reaction": r}, separators=(",", ":"))
                   + "\n" for i, u, r in records)


def csv_text(records, eol="\n"):
    return "item,user,reaction" + eol + "".join("%s,%s,%s%s" % (i, u, r, eol)
                                                for i, u, r in records)


class Model:
    """What applying records one after the other does: rows, versions, applied/unchanged."""

    def __init__(self):
        self.rows = {}  # (item, user) -> (reaction, version)

    def apply(self, records):
        applied = unchanged = 0
        transitions = []
        for item, user, r in records:
            cur, ver = self.rows.get((item, user), ("none", 0))
            if cur == r:
                unchanged += 1
                continue
            applied += 1
            self.rows[(item, user)] = (r, ver + 1)
            transitions.append((item, user, cur, r, ver + 1))
        return applied, unchanged, transitions

    def counts(self, item):
        c = dict(ZERO)
        for (it, _), (r, _) in self.rows.items():
            if it == item and r != "none":
                c[r] += 1
        return c

    def live(self):
        """The set of rows that are not none, as export prints them."""
        return {(i, u, r) for (i, u), (r, _) in self.rows.items() if r != "none"}


class DataCase(TallyTestCase):

    def do_import(self, srv, body, headers=NDJSON, query=""):
        return srv.json("POST", "/v1/admin/import" + query, body=body, headers=headers)

    def assertImport(self, resp, read, applied, unchanged, rejected_lines=(), msg=""):
        doc = self.assertOk(resp, msg)
        self.assertEqual(set(doc), {"read", "applied", "unchanged", "rejected"}, msg)
        got_lines = [r.get("line") for r in doc["rejected"]]
        self.assertEqual(got_lines, list(rejected_lines), "rejected line numbers " + msg)
        for r in doc["rejected"]:
            self.assertEqual(set(r), {"line", "error"}, r)
            self.assertIsInstance(r["error"], str)
            self.assertTrue(r["error"], "an empty error for line %r" % r["line"])
        self.assertEqual((doc["applied"], doc["unchanged"]), (applied, unchanged),
                         "applied, unchanged " + msg)
        if read is not None:
            self.assertEqual(doc["read"], read, "read " + msg)
        return doc

    def assertNoDrift(self, srv):
        doc = self.assertOk(srv.json("POST", "/v1/admin/recount", {}, headers=ADMIN))
        self.assertEqual(doc["drift"], [], "recount found drift")
        return doc

    def assertRows(self, srv, model, items=None, limit=60):
        """Spot-checks rows (reaction and version) and every item's counts against the model."""
        pairs = sorted(model.rows)
        if items is not None:
            pairs = [p for p in pairs if p[0] in items]
        for item, user in pairs[:limit]:
            r, v = model.rows[(item, user)]
            self.assertEqual(srv.reaction(item, user),
                             {"item": item, "reaction": r, "version": v}, (item, user))
        for item in sorted({i for i, _ in pairs}):
            self.assertCounts(srv, item, model.counts(item))

    def feed_tail(self, srv):
        after = None
        for _ in range(10000):
            path = "/v1/changes?limit=1000" + ("&after=" + after if after else "")
            st, _, doc, raw = srv.json("GET", path, headers=ADMIN)
            self.assertEqual(st, 200, raw[:300])
            if not doc["changes"]:
                return doc["next"], []
            after = doc["next"]
        self.fail("feed did not end")

    def feed_after(self, srv, after):
        out = []
        for _ in range(10000):
            path = "/v1/changes?limit=1000" + ("&after=" + after if after else "")
            st, _, doc, raw = srv.json("GET", path, headers=ADMIN)
            self.assertEqual(st, 200, raw[:300])
            if not doc["changes"]:
                return out
            out.extend((e["item"], e["user"], e["from"], e["to"], e["version"])
                       for e in doc["changes"])
            after = doc["next"]
        self.fail("feed did not end")


# ============================================================================================
class ImportTest(DataCase, SharedServerTestCase):

    server_args = ("--rate-limit", "off")

    def records(self, n_items=4, n_users=6, seed=1):
        rnd = random.Random(seed)
        items = [uid("imp") for _ in range(n_items)]
        users = [uid("u") for _ in range(n_users)]
        return items, users, rnd

    def test_ndjson_applies_in_order(self):
        items, users, rnd = self.records()
        recs = [(rnd.choice(items), rnd.choice(users), rnd.choice(KINDS + ("none",)))
                for _ in range(60)]
        recs += [(items[0], users[0], "like"), (items[0], users[0], "dislike"),
                 (items[0], users[0], "dislike"), (items[1], uid("new"), "none")]
        model = Model()
        applied, unchanged, transitions = model.apply(recs)
        cursor, _ = self.feed_tail(self.srv)
        resp = self.do_import(self.srv, ndjson(recs))
        self.assertImport(resp, len(recs), applied, unchanged)
        self.assertRows(self.srv, model)
        # imported transitions are ordinary transitions: in the change feed, in file order
        got = [e for e in self.feed_after(self.srv, cursor) if e[0] in items]
        if SHARDS > 1:  # one order per shard, so per item; shards' entries interleave by commit
            got = sorted(got, key=lambda e: items.index(e[0]))
            transitions = sorted(transitions, key=lambda e: items.index(e[0]))  # stable: file order kept
        self.assertEqual(got, transitions, "the change feed after the import")
        self.assertNoDrift(self.srv)

    def test_csv_applies_in_order(self):
        items, users, rnd = self.records(seed=2)
        recs = [(rnd.choice(items), rnd.choice(users), rnd.choice(KINDS + ("none",)))
                for _ in range(50)]
        model = Model()
        applied, unchanged, _ = model.apply(recs)
        resp = self.do_import(self.srv, csv_text(recs), headers=CSV)
        self.assertImport(resp, len(recs), applied, unchanged)
        self.assertRows(self.srv, model)
        # CRLF line ends and quoted fields, charset parameter
        more = [(items[0], uid("crlf"), "like"), (items[1], uid("crlf"), "dislike")]
        body = "item,user,reaction\r\n" + "".join('"%s","%s",%s\r\n' % r for r in more)
        resp = self.do_import(self.srv, body,
                              headers=dict(CSV, **{"Content-Type": "text/csv; charset=utf-8"}))
        self.assertImport(resp, 2, 2, 0)
        model.apply(more)
        self.assertRows(self.srv, model)
        self.assertNoDrift(self.srv)

    def test_rerun_changes_nothing(self):
        items, users, _ = self.records(seed=3)
        recs = [(i, u, KINDS[(n + m) % 2]) for n, i in enumerate(items)
                for m, u in enumerate(users)]
        model = Model()
        applied, unchanged, _ = model.apply(recs)
        self.assertEqual((applied, unchanged), (len(recs), 0))
        self.assertImport(self.do_import(self.srv, ndjson(recs)), len(recs), len(recs), 0)
        cursor, _ = self.feed_tail(self.srv)
        self.assertImport(self.do_import(self.srv, ndjson(recs)), len(recs), 0, len(recs),
                          msg="the same file again")
        self.assertImport(self.do_import(self.srv, csv_text(recs), headers=CSV),
                          len(recs), 0, len(recs), msg="the same records as CSV")
        self.assertEqual([e for e in self.feed_after(self.srv, cursor) if e[0] in items], [],
                         "a re-run made transitions")
        self.assertRows(self.srv, model)
        self.assertNoDrift(self.srv)

    def test_bad_lines_rejected_others_applied(self):
        item, u1, u2, u3 = uid("bad"), uid("u"), uid("u"), uid("u")
        good = lambda it, u, r: json.dumps({"item": it, "user": u, "reaction": r})
        lines = [
            good(item, u1, "like"),                                   # 1
            good(item, u2, "love"),                                   # 2 unknown kind
            good("a b", u2, "like"),                                  # 3 invalid item id
            good(item, "..", "like"),                                 # 4 invalid user id
            '{"item":"%s","user":"%s","reac' % (item, u2),            # 5 truncated JSON
            "x" * (70 * 1024),                                        # 6 a line over 64 KiB
            good(item, u2, "dislike"),                                # 7
            good("x" * 129, u3, "like"),                              # 8 item id too long
            '["%s","%s","like"]' % (item, u3),                        # 9 not an object
            '{"item":"%s","user":"%s"}' % (item, u3),                 # 10 no reaction
            '{"item":"%s","user":"%s","reaction":1}' % (item, u3),    # 11 not a string
            good(item, u3, "like"),                                   # 12
            good(item, u1, "none"),                                   # 13
            good(item, u3, "reaction"),                               # 14 reserved, not a kind
        ]
        bad = [2, 3, 4, 5, 6, 8, 9, 10, 11, 14]
        resp = self.do_import(self.srv, "\n".join(lines) + "\n")
        doc = self.assertImport(resp, None, 4, 0, bad)
        self.assertEqual(self.srv.reaction(item, u1), {"item": item, "reaction": "none",
                                                       "version": 2})
        self.assertEqual(self.srv.reaction(item, u2)["reaction"], "dislike")
        self.assertEqual(self.srv.reaction(item, u3)["reaction"], "like")
        self.assertCounts(self.srv, item, {"like": 1, "dislike": 1})
        # every line is a record read: applied, unchanged or rejected (the over-long one too,
        # as the truncated one is)
        self.assertEqual(doc["read"], len(lines), "read: %r" % doc)
        self.assertEqual(doc["read"], doc["applied"] + doc["unchanged"] + len(doc["rejected"]),
                         "read = applied + unchanged + rejected: %r" % doc)

    def test_bad_csv_lines(self):
        item, u1, u2 = uid("badcsv"), uid("u"), uid("u")
        body = ("item,user,reaction\n"
                "%s,%s,like\n"          # 2
                "%s,%s\n"               # 3 two fields
                "%s,%s,like,extra\n"    # 4 four fields
                "%s,%s,wow\n"           # 5 unknown kind
                "%s,a b,like\n"         # 6 invalid user
                "%s,%s,dislike\n"       # 7
                ) % (item, u1, item, u2, item, u2, item, u2, item, item, u2)
        resp = self.do_import(self.srv, body, headers=CSV)
        self.assertImport(resp, 6, 2, 0, [3, 4, 5, 6])
        self.assertCounts(self.srv, item, {"like": 1, "dislike": 1})

    def test_csv_bom_and_rfc4180(self):
        """A UTF-8 byte order mark (Excel writes one) and RFC 4180: quoted fields, doubled quotes,
        CRLF, a quoted field holding a line break (one record over several lines, refused as a
        whole: no id holds a line break), and the records after it read in step."""
        it = uid("rfc")
        u = [uid("u") for _ in range(6)]
        body = ("\ufeffitem,user,reaction\r\n"          # 1 the header, after a BOM
                '"%s","%s","like"\r\n'                  # 2 every field quoted
                '%s,"%s",dislike\n'                      # 3 one quoted
                '"%s","bad\r\nuser",like\r\n'            # 4-5 one record, a line break in a field
                '%s,"x\n%s,%s,like\n",like\n'            # 6-8 one record: line 7 is inside quotes
                '"a""b",%s,like\n'                       # 9 a doubled quote: a"b, no item id
                '%s,%s,"dis""like"\n'                    # 10 dis"like: no such reaction
                '%s,%s,like\n'                           # 11
                '%s,"%s" ,like\n'                        # 12 text after a closing quote
                '%s,%s"x,like\n'                         # 13 a quote inside an unquoted field
                '"%s","%s",""\n'                         # 14 an empty quoted reaction
                ) % (it, u[0], it, u[1], it, it, it, u[2], u[3], it, u[3], it, u[3], it, u[4], it, u[4],
                     it, u[5])
        resp = self.do_import(self.srv, body.encode("utf-8"), headers=CSV)
        self.assertImport(resp, 10, 3, 0, [4, 6, 9, 10, 12, 13, 14])
        self.assertEqual(self.srv.reaction(it, u[0])["reaction"], "like")
        self.assertEqual(self.srv.reaction(it, u[1])["reaction"], "dislike")
        self.assertEqual(self.srv.reaction(it, u[2])["reaction"], "none",
                         "a line inside a quoted field was taken for a record")
        self.assertEqual(self.srv.reaction(it, u[3])["reaction"], "like")
        self.assertCounts(self.srv, it, {"like": 2, "dislike": 1})
        # a quoted header; a quoted field still open at the end of the input is refused
        body = '"item","user","reaction"\n%s,%s,dislike\n%s,"%s,like\n' % (it, u[0], it, u[5])
        self.assertImport(self.do_import(self.srv, body, headers=CSV), 2, 1, 0, [3])
        self.assertEqual(self.srv.reaction(it, u[0])["reaction"], "dislike")
        # a BOM elsewhere than at the start is no header
        resp = self.do_import(self.srv, "item,user,\ufeffreaction\n", headers=CSV)
        self.assertImport(resp, 0, 0, 0, [1])

    def test_abort_on_error(self):
        item, u1, u2 = uid("abort"), uid("u"), uid("u")
        lines = [json.dumps({"item": item, "user": u1, "reaction": "like"}),
                 json.dumps({"item": item, "user": u2, "reaction": "like"}),
                 json.dumps({"item": item, "user": u2, "reaction": "meh"}),
                 '{"item":"%s"' % item]
        cursor, _ = self.feed_tail(self.srv)
        resp = self.do_import(self.srv, "\n".join(lines) + "\n", query="?on-error=abort")
        doc = self.assertProblem(resp, 400, "import-rejected")
        self.assertIsInstance(doc.get("rejected"), list, doc)
        self.assertEqual([r.get("line") for r in doc["rejected"]], [3, 4])
        self.assertTrue(all(isinstance(r.get("error"), str) and r["error"]
                            for r in doc["rejected"]))
        self.assertCounts(self.srv, item, ZERO, timeout=0.5)
        self.assertEqual(self.srv.reaction(item, u1)["version"], 0, "applied despite abort")
        self.assertEqual([e for e in self.feed_after(self.srv, cursor) if e[0] == item], [])
        # CSV too
        resp = self.do_import(self.srv, "item,user,reaction\n%s,%s,like\n%s,,like\n"
                              % (item, u1, item), headers=CSV, query="?on-error=abort")
        doc = self.assertProblem(resp, 400, "import-rejected")
        self.assertEqual([r.get("line") for r in doc["rejected"]], [3])
        self.assertCounts(self.srv, item, ZERO, timeout=0.5)
        # the good lines alone, still with abort: all applied
        resp = self.do_import(self.srv, "\n".join(lines[:2]) + "\n", query="?on-error=abort")
        self.assertImport(resp, 2, 2, 0)
        self.assertCounts(self.srv, item, {"like": 2, "dislike": 0})
        # skip spelled out is the default
        resp = self.do_import(self.srv, "\n".join(lines) + "\n", query="?on-error=skip")
        self.assertImport(resp, 4, 0, 2, [3, 4])

    def test_bad_on_error_parameter(self):
        item, u = uid("param"), uid("u")
        body = json.dumps({"item": item, "user": u, "reaction": "like"}) + "\n"
        for q in ("?on-error=bogus", "?on-error=", "?on-error=ABORT"):
            with self.subTest(query=q):
                self.assertProblem(self.do_import(self.srv, body, query=q),
                                   400, "invalid-parameter")
        self.assertCounts(self.srv, item, ZERO, timeout=0.5)

    def test_content_types(self):
        item, u = uid("ctype"), uid("u")
        body = json.dumps({"item": item, "user": u, "reaction": "like"}) + "\n"
        for ctype in ("application/json", "text/plain", "application/ndjson-x", "text/csvx",
                      None):
            with self.subTest(content_type=ctype):
                h = dict(ADMIN)
                if ctype:
                    h["Content-Type"] = ctype
                self.assertProblem(self.srv.json("POST", "/v1/admin/import", body=body,
                                                 headers=h), 415, "unsupported-media-type")
        self.assertCounts(self.srv, item, ZERO, timeout=0.5)
        resp = self.do_import(self.srv, body, headers=dict(
            ADMIN, **{"Content-Type": "application/x-ndjson; charset=utf-8"}))
        self.assertImport(resp, 1, 1, 0)

    def test_admin_only(self):
        body = json.dumps({"item": "x", "user": "y", "reaction": "like"}) + "\n"
        h = {"Content-Type": "application/x-ndjson"}
        self.assertProblem(self.srv.json("POST", "/v1/admin/import", body=body, headers=h),
                           401, "unauthenticated")
        self.assertProblem(self.srv.json("POST", "/v1/admin/import", body=body,
                                         headers=dict(h, **{"X-User-Id": uid("u")})),
                           403, "forbidden")
        for path in ("/v1/admin/users/" + uid("u"), "/v1/admin/items/" + uid("i")):
            with self.subTest(path=path):
                self.assertProblem(self.srv.json("DELETE", path), 401, "unauthenticated")
                self.assertProblem(self.srv.json("DELETE", path, user=uid("u")), 403,
                                   "forbidden")
        self.assertProblem(self.srv.json("DELETE", "/v1/admin/users/a%20b", headers=ADMIN),
                           400, "invalid-user-id")
        self.assertProblem(self.srv.json("DELETE", "/v1/admin/items/" + "x" * 129,
                                         headers=ADMIN), 400, "invalid-item-id")

    def test_large_import_has_no_4k_limit(self):
        items = [uid("big") for _ in range(20)]
        recs = [(items[n % 20], "bu%d" % n, KINDS[n % 2]) for n in range(3000)]
        model = Model()
        model.apply(recs)
        body = ndjson(recs)
        self.assertGreater(len(body), 100000)
        self.assertImport(self.do_import(self.srv, body), 3000, 3000, 0)
        for item in items[:5]:
            self.assertCounts(self.srv, item, model.counts(item))
        self.assertNoDrift(self.srv)


# ============================================================================================
class EraseDeleteTest(DataCase, SharedServerTestCase):

    server_args = ("--rate-limit", "off")

    def test_erase_user(self):
        s = self.srv
        victim, other = uid("victim"), uid("other")
        items = [uid("er") for _ in range(6)]
        model = Model()
        recs = [(items[0], victim, "like"), (items[1], victim, "dislike"),
                (items[2], victim, "like"), (items[2], victim, "none"),
                (items[3], victim, "dislike"), (items[3], victim, "like"),
                (items[4], victim, "like")]
        recs += [(it, other, "like") for it in items]
        for item, user, r in recs:
            self.assertEqual(s.put(item, user, r)[0], 200)
        model.apply(recs)
        self.assertRows(s, model)
        cursor, _ = self.feed_tail(s)
        resp = s.json("DELETE", "/v1/admin/users/" + victim, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 4})
        erase = [(it, victim, "none") for it in items[:5]]
        _, _, transitions = model.apply(erase)
        self.assertRows(s, model)
        self.assertEqual(s.reaction(items[5], victim),
                         {"item": items[5], "reaction": "none", "version": 0})
        got = sorted(e for e in self.feed_after(s, cursor) if e[1] == victim)
        self.assertEqual(got, sorted(transitions), "erasure transitions in the change feed")
        # idempotent
        resp = s.json("DELETE", "/v1/admin/users/" + victim, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 0})
        self.assertRows(s, model)
        # a user who never reacted
        resp = s.json("DELETE", "/v1/admin/users/" + uid("nobody"), headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 0})
        # the erased user may react again, and versions keep rising
        self.assertWrite(s.put(items[0], victim, "like"), items[0], "like", "none", 3, True)
        self.assertNoDrift(s)

    def test_erase_user_deletes_idempotency_records(self):
        s = self.srv
        victim, bystander, item = uid("victim"), uid("by"), uid("idem")
        key = "k-" + uid("k")
        first = s.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": "like"},
                       user=victim, headers={"Idempotency-Key": key})
        self.assertWrite(first, item, "like", "none", 1, True)
        by = s.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": "dislike"},
                    user=bystander, headers={"Idempotency-Key": key})
        self.assertWrite(by, item, "dislike", "none", 1, True)
        # before: the key is bound
        self.assertProblem(s.json("PUT", "/v1/items/%s/reaction" % item,
                                  {"reaction": "dislike"}, user=victim,
                                  headers={"Idempotency-Key": key}),
                           409, "idempotency-key-mismatch")
        self.assertEqual(self.assertOk(s.json("DELETE", "/v1/admin/users/" + victim,
                                              headers=ADMIN)), {"changed": 1})
        # after: the key is unknown, so another body is applied, not 409
        resp = s.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": "dislike"},
                      user=victim, headers={"Idempotency-Key": key})
        self.assertWrite(resp, item, "dislike", "none", 3, True)
        self.assertNotIn("idempotent-replayed", resp[1])
        # the other user's record with the same key is untouched
        again = s.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": "dislike"},
                       user=bystander, headers={"Idempotency-Key": key})
        self.assertEqual(again[1].get("idempotent-replayed"), "true", "bystander's key lost")
        self.assertEqual(again[3], by[3])
        self.assertCounts(s, item, {"like": 0, "dislike": 2})

    def test_delete_item(self):
        s = self.srv
        item, keep = uid("del"), uid("keep")
        users = [uid("u") for _ in range(7)]
        model = Model()
        recs = [(item, u, KINDS[n % 2]) for n, u in enumerate(users)]
        recs += [(item, users[0], "none"), (keep, users[1], "like")]
        for r in recs:
            self.assertEqual(s.put(*r)[0], 200)
        model.apply(recs)
        self.assertCounts(s, item, model.counts(item))
        resp = s.json("DELETE", "/v1/admin/items/" + item, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 6})
        model.apply([(item, u, "none") for u in users])
        self.assertCounts(s, item, ZERO)
        self.assertEqual(self.assertOk(s.item(item)), {"item": item, "counts": ZERO})
        self.assertRows(s, model)
        self.assertCounts(s, keep, {"like": 1, "dislike": 0}, timeout=0)
        resp = s.json("DELETE", "/v1/admin/items/" + item, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 0})
        resp = s.json("DELETE", "/v1/admin/items/" + uid("never"), headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 0})
        self.assertNoDrift(s)

    def test_erase_and_delete_many_rows(self):
        # more rows than one writer command clears (chunks of 1000 in this build)
        s = self.srv
        victim, item = uid("many"), uid("wide")
        recs = [("w%d-%s" % (n, victim), victim, KINDS[n % 2]) for n in range(2500)]
        recs += [(item, "wu%d-%s" % (n, item), KINDS[n % 2]) for n in range(2300)]
        self.assertImport(self.do_import(s, ndjson(recs)), len(recs), len(recs), 0)
        # the import folded (the item's rows come last in it) before anything is erased: else
        # the item's zero below could be the import not yet counted rather than the deletion
        self.assertCounts(s, item, {"like": 1150, "dislike": 1150})
        resp = s.json("DELETE", "/v1/admin/users/" + victim, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 2500})
        resp = s.json("DELETE", "/v1/admin/items/" + item, headers=ADMIN)
        self.assertEqual(self.assertOk(resp), {"changed": 2300})
        # the deletion follows the erasure in the log, and the fold keeps the log's order
        self.assertCounts(s, item, ZERO)
        for n in (0, 999, 1000, 1001, 2499):
            self.assertCounts(s, "w%d-%s" % (n, victim), ZERO, timeout=0)
        self.assertNoDrift(s)

    def test_erase_while_others_write(self):
        s = self.srv
        victim = uid("busy")
        items = [uid("cw") for _ in range(12)]
        # the victim has many rows (several erase commands) on the items the others write
        recs = [(items[n % 12] if n < 12 else "cw%d-%s" % (n, victim), victim, KINDS[n % 2])
                for n in range(6000)]
        self.assertImport(self.do_import(s, ndjson(recs)), len(recs), len(recs), 0)
        lock = threading.Lock()
        last = {}  # (item, user) -> last acknowledged reaction
        errors = []
        stop = threading.Event()

        def writer(n):
            user = "cwu%d-%s" % (n, victim)
            rnd = random.Random(n)
            c = s.client()
            try:
                for i in range(400):
                    if stop.is_set() and i >= 20:
                        break
                    item = rnd.choice(items)
                    r = rnd.choice(KINDS + ("none",))
                    resp = c.json("PUT", "/v1/items/%s/reaction" % item, {"reaction": r},
                                  user=user)
                    if resp[0] != 200:
                        raise AssertionError("write -> %s %r" % (resp[0], resp[3][:200]))
                    with lock:
                        last[(item, user)] = r
            except BaseException as e:
                errors.append(e)
            finally:
                c.close()

        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(6)]
        for t in threads:
            t.start()
        time.sleep(0.1)
        resp = s.json("DELETE", "/v1/admin/users/" + victim, headers=ADMIN)
        stop.set()
        for t in threads:
            t.join(60 * SLOW)
        self.assertFalse([t for t in threads if t.is_alive()], "writers did not finish")
        if errors:
            raise errors[0]
        self.assertEqual(self.assertOk(resp), {"changed": len(recs)})
        for item in items:
            want = dict(ZERO)
            for (it, _), r in last.items():
                if it == item and r != "none":
                    want[r] += 1
            self.assertCounts(s, item, want)
            self.assertEqual(s.reaction(item, victim)["reaction"], "none")
        self.assertNoDrift(s)


# ============================================================================================
@embedded_only("the tally tool (import, export, verify, erase-user) works on a data directory")
class OfflineToolTest(DataCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="tally-e2e-tool-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def export(self, data):
        r = tally("export", "--data", data)
        self.assertEqual(r.returncode, 0, show(r))
        lines = r.stdout.splitlines()
        self.assertEqual(json.loads(lines[-1]), {"export": "complete", "lines": len(lines) - 1}, "closing line")
        rows = set()
        for line in lines[:-1]:
            doc = json.loads(line)
            self.assertEqual(set(doc), {"item", "user", "reaction"}, line)
            self.assertNotEqual(doc["reaction"], "none", "export lists none rows")
            rows.add((doc["item"], doc["user"], doc["reaction"]))
        self.assertEqual(len(rows), len(lines) - 1, "export repeats a row")
        return rows

    def verify(self, data):
        r = tally("verify", "--data", data)
        self.assertEqual(r.returncode, 0, "tally verify" + show(r))

    def test_refuses_while_tallyd_runs(self):
        with Server() as s:
            item, u = uid("lock"), uid("u")
            self.assertEqual(s.put(item, u, "like")[0], 200)
            path = self.write("in.ndjson", ndjson([(item, u, "dislike")]))
            for args in (("import", "--data", s.data_dir, path),
                         ("erase-user", "--data", s.data_dir, u)):
                with self.subTest(cmd=args[0]):
                    r = tally(*args)
                    self.assertEqual(r.returncode, 1, show(r))
                    self.assertTrue(r.stderr.strip(), "no message")
                    self.assertIn(s.data_dir, r.stderr + r.stdout, "the message names the dir")
            self.assertEqual(s.reaction(item, u)["reaction"], "like", "the tool wrote anyway")
            self.assertCounts(s, item, {"like": 1, "dislike": 0}, timeout=0)

    def test_import_export_roundtrip_and_erase(self):
        data = os.path.join(self.tmp, "data")
        rnd = random.Random(7)
        items = ["it%d" % n for n in range(40)]
        users = ["us%d" % n for n in range(30)]
        pairs = rnd.sample([(i, u) for i in items for u in users], 600)
        recs = [(i, u, rnd.choice(KINDS)) for i, u in pairs]
        recs += [(i, "nobody%d" % n, "none") for n, i in enumerate(items[:5])]
        path = self.write("in.ndjson", ndjson(recs))
        r = tally("import", "--data", data, "--reactions", "like,dislike", path)
        self.assertEqual(r.returncode, 0, show(r))
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1]),
                         {"read": 605, "applied": 600, "unchanged": 5, "rejected": 0})
        model = Model()
        model.apply(recs)
        self.assertEqual(self.export(data), model.live(), "import then export")
        self.verify(data)
        # CSV into another store gives the same rows
        data2 = os.path.join(self.tmp, "data2")
        path2 = self.write("in.csv", csv_text(recs))
        r = tally("import", "--data", data2, "--reactions", "like,dislike", path2)
        self.assertEqual(r.returncode, 0, show(r))
        self.assertEqual(self.export(data2), model.live(), "CSV import then export")
        # a re-run changes nothing
        r = tally("import", "--data", data, path)
        self.assertEqual(r.returncode, 0, show(r))
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1]),
                         {"read": 605, "applied": 0, "unchanged": 605, "rejected": 0})
        # erase-user offline
        victim = users[3]
        n_victim = sum(1 for (_, u), (rr, _) in model.rows.items() if u == victim and rr != "none")
        self.assertGreater(n_victim, 0)
        r = tally("erase-user", "--data", data, victim)
        self.assertEqual(r.returncode, 0, show(r))
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1]), {"changed": n_victim})
        model.apply([(i, victim, "none") for i in items])
        self.assertEqual(self.export(data), model.live(), "after erase-user")
        self.verify(data)
        # the server serves what the tool wrote
        with Server(data_dir=data) as s:
            for item in items[:8]:
                self.assertCounts(s, item, model.counts(item), timeout=0)
            i, u = pairs[0]
            self.assertEqual(s.reaction(i, u)["reaction"], model.rows[(i, u)][0])
            self.assertEqual(s.reaction(items[0], victim)["reaction"], "none")
            self.assertNoDrift(s)

    def test_import_bad_lines_offline(self):
        data = os.path.join(self.tmp, "data")
        text = ndjson([("a", "u1", "like")]) + "x" * (70 * 1024) + "\n" + \
            '{"item":"a","user":"u2","reaction":"wow"}\n' + ndjson([("a", "u2", "dislike")])
        path = self.write("in.ndjson", text)
        r = tally("import", "--data", data, "--reactions", "like,dislike", path)
        self.assertEqual(r.returncode, 0, show(r))
        self.assertIn("line 2", r.stderr)
        self.assertIn("line 3", r.stderr)
        doc = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual((doc["applied"], doc["unchanged"], doc["rejected"]), (2, 0, 2), doc)
        self.assertEqual(self.export(data), {("a", "u1", "like"), ("a", "u2", "dislike")})

    def test_import_kill9_midway_then_rerun(self):
        data = os.path.join(self.tmp, "data")
        rnd = random.Random(11)
        n_lines, n_items, n_users = 300000, 3000, 400
        path = os.path.join(self.tmp, "big.ndjson")
        final = {}
        with open(path, "w") as f:
            for n in range(n_lines):
                i, u = "k%d" % rnd.randrange(n_items), "ku%d" % rnd.randrange(n_users)
                r = ("like", "dislike", "like", "none")[rnd.randrange(4)]
                f.write('{"item":"%s","user":"%s","reaction":"%s"}\n' % (i, u, r))
                final[(i, u)] = r
        want = {(i, u, r) for (i, u), r in final.items() if r != "none"}
        # first run: killed while it writes
        p = subprocess.Popen([TALLY, "import", "--data", data, "--reactions", "like,dislike",
                              path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=child_env(), cwd=REPO_ROOT)
        try:
            time.sleep(0.5)
            if p.poll() is not None:
                self.fail("the import finished within 0.5 s: the file is too small to kill it "
                          "midway\n%r" % (p.communicate()[0][-500:],))
            p.send_signal(signal.SIGKILL)
        finally:
            p.communicate(timeout=30)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        partial = self.export(data)
        self.assertNotEqual(partial, want, "the kill came after the import had finished")
        # second run: completes; counts exact; rows = the file's final state
        r = tally("import", "--data", data, path, timeout=300)
        self.assertEqual(r.returncode, 0, show(r))
        doc = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(doc["read"], n_lines, doc)
        self.assertEqual(doc["rejected"], 0, doc)
        self.verify(data)
        self.assertEqual(self.export(data), want, "export after the re-run")


if __name__ == "__main__":
    unittest.main()
