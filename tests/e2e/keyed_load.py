"""Write load with Idempotency-Keys through a crash, and the checks afterwards (used by
test_crash.py on both stores and by test_pg_failover.py on PostgreSQL).

The clients (8 threads, ~5 s) retry 503s, 409 idempotency-key-in-use and connection errors with
the same key (on the other node too) for up to ~20 s per write. Afterwards:
- every acknowledged write is present: per (item, user) the answers form one chain (previous ==
  the reaction before, version +1 on a change) and the row is at the last acknowledged write;
- no key was applied twice: replaying a key returns the same body (Idempotent-Replayed), and
  the change feed holds exactly one entry per acknowledged change;
- the counts catch up with the rows and POST /v1/admin/recount {} answers drift [].
"""

import collections
import http.client
import json
import random
import threading
import time

from harness import TallyTestCase, uid

ADMIN = {"X-User-Id": "admin"}
KINDS = ("like", "dislike")
FAST = ["--rate-limit", "off", "--recount-interval", "0"]
THREADS = 8
USERS_PER_THREAD = 4
ITEMS = 3
LOAD_S = 5.0  # new writes are started for this long
KILL_AT_S = 2.0  # the crash, this far into the load
RETRY_S = 20.0  # one write is retried (same key) this long at most
REPLAY_SAMPLE = 300  # acknowledged writes replayed afterwards (all retried ones, then a sample)
RETRYABLE = ("unavailable", "overloaded", "idempotency-key-in-use")


class Write:
    __slots__ = ("key", "item", "user", "method", "path", "body", "attempts", "status",
                 "answer", "doc", "acked_at", "retried")

    def __init__(self, key, item, user, method, path, body):
        self.key, self.item, self.user = key, item, user
        self.method, self.path, self.body = method, path, body
        self.attempts = 0
        self.status = self.answer = self.doc = self.acked_at = None
        self.retried = []  # why earlier attempts failed


class Ledger:
    """One client thread's writes, in the order it made them (one at a time)."""

    def __init__(self):
        self.writes = []  # every write it started, acknowledged or not
        self.problems = []  # answers the contract does not allow


def client_thread(nodes, prefer, users, items, ledger, load_until, hard_stop, seed):
    """Writes with a fresh Idempotency-Key each; on a 503, a 409 key-in-use or a connection
    error, the same request with the same key again, on the next node, for up to RETRY_S."""
    rnd = random.Random(seed)
    conns = [n.client(timeout=10) for n in nodes]
    abandoned = set()  # (item, user) whose last write's outcome stayed unknown
    try:
        while time.monotonic() < load_until:
            pairs = [(i, u) for i in items for u in users if (i, u) not in abandoned]
            if not pairs:
                return
            item, user = rnd.choice(pairs)
            kind = rnd.choice(KINDS + ("none",))
            if kind != "none" and rnd.random() < 0.4:
                method, path = "POST", "/v1/items/%s/reaction:toggle" % item
            else:
                method, path = "PUT", "/v1/items/%s/reaction" % item
            body = ('{"reaction":"%s"}' % kind).encode()
            w = Write(uid("fk"), item, user, method, path, body)
            ledger.writes.append(w)
            give_up = min(time.monotonic() + RETRY_S, hard_stop)
            n = prefer
            while True:
                w.attempts += 1
                c = conns[n % len(nodes)]
                try:
                    st, hdrs, raw = c.request(method, path, body=body, headers={
                        "X-User-Id": user, "Idempotency-Key": w.key,
                        "Content-Type": "application/json"})
                except (OSError, http.client.HTTPException) as e:
                    st, hdrs, raw = None, {}, repr(e).encode()
                    c.close()  # a server restarted with port 0 listens elsewhere: ask it again
                    conns[n % len(nodes)] = nodes[n % len(nodes)].client(timeout=10)
                if st == 200:
                    w.status, w.answer, w.acked_at = st, raw, time.monotonic()
                    w.doc = json.loads(raw)
                    break
                code = _problem_code(raw) if st is not None else "connection"
                if st is not None and not (st in (503, 409) and code in RETRYABLE):
                    ledger.problems.append("%s %s as %s key %s on node %d -> %s %r" % (
                        method, path, user, w.key, n % len(nodes), st, raw[:300]))
                    return
                w.retried.append("%s:%s" % (st, code))
                if time.monotonic() >= give_up:
                    abandoned.add((item, user))  # outcome unknown: no more writes on this pair
                    break
                n += 1  # the other node next time
                time.sleep(0.1 + rnd.random() * 0.2)
    finally:
        for c in conns:
            c.close()


def _problem_code(raw):
    try:
        return json.loads(raw).get("type", "").rsplit(":", 1)[-1]
    except (ValueError, AttributeError):
        return "?"


class LoadCase(TallyTestCase):

    def run_load(self, nodes, crash, seed, load_s=LOAD_S, kill_at_s=KILL_AT_S, items=None):
        """Runs the clients against `nodes` (servers; each thread prefers one, and goes to the
        next on an error) for load_s, on `items` (ITEMS fresh ids by default); calls crash() at
        kill_at_s (on this thread: the clients go on meanwhile). Returns (ledgers, items, pairs,
        t_crash)."""
        items = list(items) if items else [uid("fo") for _ in range(ITEMS)]
        ledgers = [Ledger() for _ in range(THREADS)]
        t0 = time.monotonic()
        load_until = t0 + load_s
        hard_stop = load_until + RETRY_S + 5
        threads = []
        users_of = []
        for t in range(THREADS):
            users = [uid("fu%d" % t) for _ in range(USERS_PER_THREAD)]
            users_of.append(users)
            th = threading.Thread(target=client_thread, daemon=True,
                                  args=(nodes, t, users, items, ledgers[t], load_until,
                                        hard_stop, seed + t))
            threads.append(th)
            th.start()
        time.sleep(kill_at_s)
        t_crash = time.monotonic()
        crash()
        for th in threads:
            th.join(max(0.0, hard_stop + 10 - time.monotonic()))
        self.assertFalse([th for th in threads if th.is_alive()], "client threads stuck")
        pairs = [(i, u) for users in users_of for u in users for i in items]
        return ledgers, items, pairs, t_crash

    def verify(self, nodes, ledgers, items, pairs, t_crash, ctx):
        """The checks above, asking `nodes` (running servers on the data the load wrote)."""
        problems = [p for lg in ledgers for p in lg.problems]
        self.assertEqual(problems, [], ctx)
        writes = [w for lg in ledgers for w in lg.writes]
        acked = [w for w in writes if w.status == 200]
        unknown = [w for w in writes if w.status is None]
        self.assertGreaterEqual(len(acked), 50, "too few acknowledged writes to mean anything; " + ctx)
        self.assertTrue([w for w in acked if w.acked_at > t_crash + 0.5],
                        "no write acknowledged after the crash (retried: %d, unknown: %d); %s"
                        % (sum(1 for w in writes if w.retried), len(unknown), ctx))
        self.assertLessEqual(len(unknown), 2 * THREADS, "writes given up after %ss; %s" % (RETRY_S, ctx))

        # 1. per (item, user): one chain of answers, and the row at the last acknowledged one
        by_pair = collections.defaultdict(list)
        for w in writes:
            by_pair[(w.item, w.user)].append(w)
        current = {}
        for k, pair in enumerate(pairs):
            doc = nodes[k % len(nodes)].reaction(*pair)
            current[pair] = (doc["reaction"], doc["version"])
        changes_acked = collections.Counter()
        for pair, ws in sorted(by_pair.items()):
            state, exact = ("none", 0), True  # exact: no unknown outcome so far
            for w in ws:
                if w.status is None:
                    exact = False
                    continue
                d = w.doc
                self.assertEqual(d["item"], w.item, w.answer)
                if exact:
                    self.assertEqual((d["previous"], d["version"] - int(d["changed"])), state,
                                     "%r: write %s (retries %r) does not follow the one before: "
                                     "applied twice, or an acknowledged write lost; %s"
                                     % (pair, w.key, w.retried, ctx))
                else:
                    self.assertGreaterEqual(d["version"] - int(d["changed"]), state[1], (pair, ctx))
                state = (d["reaction"], d["version"])
                changes_acked[pair] += int(d["changed"])
            got = current[pair]
            if exact:
                self.assertEqual(got, state, "%r: the row is not at its last acknowledged write "
                                 "(%s)" % (pair, ctx))
            else:
                self.assertGreaterEqual(got[1], state[1], "%r: acknowledged version lost (%s)" % (pair, ctx))

        # 2. no key applied twice: a replay answers the stored body, byte for byte
        retried = [w for w in acked if w.retried]
        rest = [w for w in acked if not w.retried]
        random.Random(1).shuffle(rest)
        for k, w in enumerate((retried + rest)[:max(REPLAY_SAMPLE, len(retried))]):
            node = nodes[k % len(nodes)]
            st, hdrs, raw = node.request(w.method, w.path, body=w.body, headers={
                "X-User-Id": w.user, "Idempotency-Key": w.key, "Content-Type": "application/json"})
            self.assertEqual((st, raw), (200, w.answer),
                             "replay of key %s (retries %r) on node :%s; %s" % (w.key, w.retried, node.port, ctx))
            self.assertEqual(hdrs.get("idempotent-replayed"), "true", "replay of %s" % w.key)

        # 3. the change feed (this database's only): one entry per acknowledged change
        feed = collections.defaultdict(list)
        after = None
        for page in range(10000):
            node = nodes[page % len(nodes)]
            path = "/v1/changes?limit=1000" + ("&after=" + after if after else "")
            doc = self.assertOk(node.json("GET", path, headers=ADMIN))
            if not doc["changes"]:
                break
            for e in doc["changes"]:
                feed[(e["item"], e["user"])].append(e["version"])
            after = doc["next"]
        for pair, ws in sorted(by_pair.items()):
            versions = feed.get(pair, [])
            self.assertEqual(versions, list(range(1, len(versions) + 1)),
                             "%r: feed versions not consecutive (%s)" % (pair, ctx))
            self.assertEqual(len(versions), current[pair][1], "%r: feed entries != version" % (pair,))
            if all(w.status == 200 for w in ws):
                self.assertEqual(len(versions), changes_acked[pair],
                                 "%r: feed entries != acknowledged changes (%s)" % (pair, ctx))

        # 4. counts catch up with the rows; then a recount finds nothing to correct
        for item in items:
            want = {k: 0 for k in KINDS}
            for (i, _), (r, _) in current.items():
                if i == item and r != "none":
                    want[r] += 1
            for node in nodes:
                self.assertCounts(node, item, want, timeout=10,
                                  msg="counts of %s on :%s vs rows (%s)" % (item, node.port, ctx))
        doc = self.assertOk(nodes[0].json("POST", "/v1/admin/recount", {}, headers=ADMIN))
        self.assertEqual(doc["drift"], [], "recount after the crash (%s)" % ctx)
        return len(acked), len(unknown), sum(1 for w in writes if w.retried)


