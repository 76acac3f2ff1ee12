"""kill -9 under write load: every acknowledged write
survives, an unacknowledged one is either fully applied or not at all, counts converge."""

import os
import random
import re
import struct
import subprocess
import threading
import time
import unittest

from harness import REPO_ROOT, Server, ServerExited, TallyTestCase, embedded_only, split_cursor, uid
from keyed_load import FAST, LoadCase

CYCLES = 3
RECOVERY_MAX_S = 5.0  # recovery after kill -9 at full load
THREADS = 8
USERS_PER_THREAD = 5
ITEMS_PER_CYCLE = 4
KINDS = ("like", "dislike")


class Ledger:
    """What one client thread knows about its users."""

    def __init__(self):
        self.acked = {}      # (user, item) -> (reaction, version) of the last 200 answer
        self.inflight = None  # (user, item, target) sent but not answered
        self.sent = 0
        self.ok = 0
        self.limited = 0
        self.problems = []


def writer(server, users, items, ledger, stop, seed, hard_deadline):
    rnd = random.Random(seed)
    c = server.client(timeout=10)
    try:
        while not stop.is_set() and time.monotonic() < hard_deadline:
            u, it = rnd.choice(users), rnd.choice(items)
            target = rnd.choice(("like", "dislike", "none"))
            use_delete = target == "none" and rnd.random() < 0.5
            ledger.inflight = (u, it, target)
            ledger.sent += 1
            try:
                if use_delete:
                    st, _, doc, raw = c.json("DELETE", "/v1/items/%s/reaction" % it, user=u)
                else:
                    st, _, doc, raw = c.json("PUT", "/v1/items/%s/reaction" % it,
                                             {"reaction": target}, user=u)
            except Exception:
                return  # killed (or connection lost): the in-flight write's fate is unknown
            if st == 200:
                prev_r, prev_v = ledger.acked.get((u, it), ("none", 0))
                changed = target != prev_r
                want = {"item": it, "reaction": target, "previous": prev_r,
                        "version": prev_v + int(changed), "changed": changed}
                if split_cursor(doc)[0] != want or (split_cursor(doc)[1] is not None) != changed:
                    ledger.problems.append("%s/%s: got %r want %r" % (u, it, doc, want))
                ledger.acked[(u, it)] = (doc["reaction"], doc["version"])
                ledger.ok += 1
            elif st in (429, 503):
                ledger.limited += 1  # refused before any processing: not applied
            else:
                ledger.problems.append("%s/%s: status %s %r" % (u, it, st, raw[:200]))
                ledger.inflight = None
                return
            ledger.inflight = None
    finally:
        c.close()


def check_recovery(case, s, took_s, ctx):
    """The embedded store replays its journal when it starts after a crash: bounded in time."""
    case.assertLess(took_s, RECOVERY_MAX_S + 2, "start after kill -9 took %.1fs (%s)" % (took_s, ctx))
    if s.data_dir is None:
        return
    m = re.search(r"event=journal-replayed records=(\d+) changes=(\d+) base=(\d+) ms=(\d+)", s.stderr())
    if m:
        case.assertLessEqual(int(m.group(4)) / 1000.0, RECOVERY_MAX_S, "journal replay (%s)" % ctx)
        print("  recovery: %s records, %s changes in %s ms; start %.2fs" % (m.group(1), m.group(2),
                                                                            m.group(4), took_s))
    return m


def damage_like_power_loss(data_dir):
    """What a power loss may leave of data.mdb after the journal's last base (lmdb_journal.c): the
    pages written since may be missing, and LMDB's meta pages may name them. Cuts the file after
    the base's last page and overwrites both meta pages; only the base and the journal can bring
    the store back. Returns the base's txn id."""
    with open(os.path.join(data_dir, "journal-base"), "rb") as f:
        head = f.read(20)
        magic, psize, txnid, _crc = struct.unpack("=IIQI", head)
        metas = f.read(2 * psize)
    assert magic in (0x45524C54, 0x42524C54) and len(metas) == 2 * psize, "no journal base in %s" % data_dir  # "TLRE", "TLRB"
    last_pg = None
    for i in range(2):
        page = metas[i * psize:(i + 1) * psize]
        # page header (16 bytes), then MDB_meta: magic, version, address, mapsize, two MDB_db
        # (48 bytes each), last page, txn id
        pg_last, pg_txn = struct.unpack_from("=QQ", page, 16 + 4 + 4 + 8 + 8 + 96)
        if pg_txn == txnid:
            last_pg = pg_last
    assert last_pg is not None, "the base's meta pages do not name its transaction %d" % txnid
    path = os.path.join(data_dir, "data.mdb")
    with open(path, "r+b") as f:
        f.truncate((last_pg + 1) * psize)
        f.write(b"\xee" * (2 * psize))
    return txnid


class CrashTest(TallyTestCase):

    def test_kill9_under_load(self):
        seed = random.randrange(1 << 30)
        rnd = random.Random(seed)
        with Server() as s:
            expected_all = {}  # (user, item) -> (reaction, version), verified after each crash
            item_tallies = {}
            for cycle in range(CYCLES):
                ctx = "cycle %d, seed %d" % (cycle, seed)
                items = [uid("crash%d" % cycle) for _ in range(ITEMS_PER_CYCLE)]
                ledgers = [Ledger() for _ in range(THREADS)]
                stop = threading.Event()
                hard = time.monotonic() + 6.0
                threads = []
                for t in range(THREADS):
                    users = [uid("c%dt%d" % (cycle, t)) for _ in range(USERS_PER_THREAD)]
                    th = threading.Thread(target=writer, daemon=True,
                                          args=(s, users, items, ledgers[t], stop,
                                                seed + 1000 * cycle + t, hard))
                    threads.append(th)
                    th.start()
                time.sleep(rnd.uniform(1.0, 1.5))
                s.kill9()
                stop.set()
                for th in threads:
                    th.join(15)
                self.assertFalse(any(th.is_alive() for th in threads), "client thread stuck")
                for lg in ledgers:
                    self.assertEqual(lg.problems, [], ctx)
                acked_total = sum(lg.ok for lg in ledgers)
                self.assertGreater(acked_total, 0, "no write acknowledged before the kill; " + ctx)

                t_start = time.monotonic()
                s.start()
                check_recovery(self, s, time.monotonic() - t_start, ctx)

                # every pair any thread touched (acknowledged or in flight)
                allowed = {}
                for lg in ledgers:
                    for key, rv in lg.acked.items():
                        allowed.setdefault(key, {rv})
                    if lg.inflight is not None:
                        u, it, target = lg.inflight
                        base = lg.acked.get((u, it), ("none", 0))
                        opts = allowed.setdefault((u, it), {base})
                        if target != base[0]:
                            opts.add((target, base[1] + 1))
                tally = {it: {k: 0 for k in KINDS} for it in items}
                for (u, it), opts in sorted(allowed.items()):
                    doc = s.reaction(it, u)
                    got = (doc["reaction"], doc["version"])
                    self.assertIn(got, opts, "%s on %s after kill -9 (%s)" % (u, it, ctx))
                    expected_all[(u, it)] = got
                    if got[0] != "none":
                        tally[it][got[0]] += 1
                for it in items:
                    self.assertCounts(s, it, tally[it], timeout=3,
                                      msg="counts of %s vs rows after kill -9 (%s)" % (it, ctx))
                item_tallies.update(tally)

                # earlier cycles' state survived this crash too
                for (u, it), got in sorted(expected_all.items()):
                    doc = s.reaction(it, u)
                    self.assertEqual((doc["reaction"], doc["version"]), got,
                                     "%s on %s changed across a later crash (%s)" % (u, it, ctx))
                for it, t in item_tallies.items():
                    self.assertCounts(s, it, t, timeout=0.5, msg="counts of %s (%s)" % (it, ctx))

            # a graceful stop after all that, and one more check
            s.restart()
            for it, t in item_tallies.items():
                self.assertCounts(s, it, t, timeout=3)


class KeyedRetryAcrossKill9Test(LoadCase):
    """kill -9 and restart under load from 8 clients that retry every write with its
    Idempotency-Key until answered (keyed_load.py): every acknowledged write present, no key
    applied twice, one feed entry per change, no drift. The same check as test_pg_failover's,
    on one server, on both stores."""

    def test_kill9_restart_under_keyed_load(self):
        seed = random.randrange(1 << 30)
        with Server(args=FAST) as s:
            def crash():
                s.kill9()
                s.start()

            ledgers, items, pairs, t_crash = self.run_load([s], crash, seed)
            self.verify([s], ledgers, items, pairs, t_crash, "kill -9 + restart, seed %d" % seed)


@embedded_only("the embedded store's journal and data.mdb")
class JournalRecoveryTest(LoadCase):
    """The other half of power loss (test_power proves the order of syncs and answers): kill -9
    under keyed load, then data.mdb damaged as a power loss may leave it (damage_like_power_loss),
    then a start. Every acknowledged write present, no key applied twice, one feed entry per change,
    no drift; the replay bounded in time."""

    def test_power_loss_damage_after_kill9(self):
        seed = random.randrange(1 << 30)
        seen = {}
        with Server(args=FAST) as s:
            def crash():
                s.kill9()
                seen["base"] = damage_like_power_loss(s.data_dir)
                t0 = time.monotonic()
                s.start()
                seen["took"] = time.monotonic() - t0

            ledgers, items, pairs, t_crash = self.run_load([s], crash, seed)
            ctx = "power-loss damage after kill -9, seed %d" % seed
            self.verify([s], ledgers, items, pairs, t_crash, ctx)
            m = check_recovery(self, s, seen["took"], ctx)
            self.assertTrue(m, "no journal replay logged after the damage:\n" + s.stderr()[-2000:])
            self.assertEqual(int(m.group(3)), seen["base"])
            self.assertGreater(int(m.group(1)), 0, "nothing replayed: the damage tested nothing")

    def test_recovery_waits_for_a_tool_that_still_has_the_store_open(self):
        """A tool started beside tallyd (read-only) still holds the environment when tallyd is
        killed: the restart refuses to recover under it, naming why, and recovers once it is gone."""
        hold = os.path.join(REPO_ROOT, "build", "hold_env")
        if not os.path.exists(hold):
            self.skipTest("needs build/hold_env")
        with Server() as s:
            acked = []
            for i in range(30):
                st, _, doc, _ = s.json("PUT", "/v1/items/hv%d/reaction" % (i % 3), {"reaction": "like"},
                                       user="hu%d" % i)
                self.assertEqual(st, 200)
                acked.append(("hv%d" % (i % 3), "hu%d" % i, doc["version"]))
            tool = subprocess.Popen([hold, s.data_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                self.assertEqual(tool.stdout.readline().strip(), b"ready")
                s.kill9()
                with self.assertRaises(ServerExited) as cm:
                    s.start()
                self.assertIn("another process still has it open", cm.exception.stderr)
            finally:
                tool.stdin.close()
                tool.wait(10)
            s.start()
            for item, user, version in acked:
                doc = s.reaction(item, user)
                self.assertEqual((doc["reaction"], doc["version"]), ("like", version), (item, user))
            self.assertCounts(s, "hv0", {"like": 10, "dislike": 0}, timeout=3)

    def test_damaged_journal_base_refuses_to_open(self):
        with Server() as s:
            s.json("PUT", "/v1/items/jb/reaction", {"reaction": "like"}, user="u1")
            s.kill9()
            path = os.path.join(s.data_dir, "journal-base")
            with open(path, "r+b") as f:
                f.seek(30)
                f.write(b"\x00\xff")
            with self.assertRaises(Exception) as cm:
                s.start()
            self.assertIn("journal-base", str(cm.exception))
            self.assertIn("damaged", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
