#!/usr/bin/env python3
"""verify.py — the benchmark's correctness check, through the public API only.

Every write the load sent is listed in the .pairs files ("item user" per line, written by
load.lua). The data directory was empty before the run, so for every item those users are
the only ones that can hold a reaction row. For each such (item, user) it reads the row back
with `GET /v1/items/{item}` as that user (the `viewer` member), counts the rows per kind, and
compares them with the item's counts (`GET /v1/items?ids=...`, no viewer). Counts are derived
and may lag, so items that differ are read again after a pause before they are called drift.

For the viral item it also checks that the number of likes is at least the number of
`"changed":true` answers the load received (every such answer is a distinct user's first like).

HTTP/1.1 pipelining on a few keep-alive connections keeps this cheap (tens of thousands of
reads per second from one Python process). Bounded: --budget seconds, then it stops and
reports what it checked. Only loopback addresses are accepted.
"""
import argparse
import collections
import json
import socket
import sys
import threading
import time
import urllib.parse

CHUNK = 256  # requests in flight per connection


class Conn:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _one(self):
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            self._fill()
        head = bytes(self.buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "transfer-encoding":
                raise ValueError("chunked answers are not expected here")
        if length is None:
            raise ValueError("answer without Content-Length")
        while len(self.buf) < end + 4 + length:
            self._fill()
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        return status, body

    def many(self, requests):
        """Sends the requests pipelined; returns [(status, body)] in the same order."""
        out = []
        for i in range(0, len(requests), CHUNK):
            part = requests[i : i + CHUNK]
            self.sock.sendall(b"".join(part))
            out.extend(self._one() for _ in part)
        return out

    def close(self):
        self.sock.close()


def get(host_hdr, path, user=None):
    extra = f"X-User-Id: {user}\r\n" if user else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host_hdr}\r\n{extra}\r\n".encode()


def read_counts(conns, host_hdr, items):
    """{item: {kind: n}} for the given items, 100 per request, spread over the connections."""
    items = list(items)
    batches = [items[i : i + 100] for i in range(0, len(items), 100)]
    results = [None] * len(conns)

    def work(k):
        reqs = [get(host_hdr, "/v1/items?ids=" + ",".join(b)) for b in batches[k :: len(conns)]]
        results[k] = conns[k].many(reqs)

    run_parallel(work, len(conns))
    counts = {}
    for k in range(len(conns)):
        for status, body in results[k]:
            if status != 200:
                raise RuntimeError(f"batch read answered {status}: {body[:200]!r}")
            for obj in json.loads(body)["items"]:
                counts[obj["item"]] = obj["counts"]
    return counts


def run_parallel(fn, n):
    errors = []

    def wrap(k):
        try:
            fn(k)
        except Exception as e:  # reported below, with the connection's index
            errors.append(f"connection {k}: {e!r}")

    ts = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pairs", nargs="+", required=True)
    ap.add_argument("--viral-item", default="viral-1")
    ap.add_argument("--viral-changed-true", type=int, default=-1)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--connections", type=int, default=2)
    a = ap.parse_args()

    u = urllib.parse.urlsplit(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1") and not u.hostname.startswith("127."):
        sys.exit("verify.py: loopback addresses only")
    host_hdr = u.netloc
    t0 = time.monotonic()

    users_of = collections.defaultdict(set)
    lines = 0
    for path in a.pairs:
        with open(path) as f:
            for line in f:
                item, user = line.split()
                users_of[item].add(user)
                lines += 1
    npairs = sum(len(s) for s in users_of.values())
    print(f"verify: {lines} writes sent, {npairs} distinct (item, user) pairs, {len(users_of)} items")

    conns = [Conn(u.hostname, u.port) for _ in range(a.connections)]

    # Counts may lag the rows by a moment: wait until the counts of the hottest items stop moving.
    hot = sorted(users_of, key=lambda i: -len(users_of[i]))[:100]
    prev, settled_after = None, None
    for attempt in range(40):  # at most ~10 s
        cur = read_counts(conns[:1], host_hdr, hot)
        if cur == prev:
            settled_after = attempt * 0.25
            break
        prev = cur
        time.sleep(0.25)
    print(f"verify: counts of the 100 hottest items stable after {settled_after} s")

    # Rows: one read per (item, user) as that user; items in a fixed order, split over connections.
    items = sorted(users_of, key=lambda i: -len(users_of[i]))
    rows = {}
    checked_items = []
    deadline = t0 + a.budget
    partial = False
    i = 0
    STEP = 4096  # pairs per round (rounds keep the budget check cheap)
    while i < len(items):
        if time.monotonic() > deadline:
            partial = True
            break
        group, n = [], 0
        while i < len(items) and (n < STEP or not group):
            group.append(items[i])
            n += len(users_of[items[i]])
            i += 1
        pairs = [(it, us) for it in group for us in sorted(users_of[it])]
        results = [None] * len(conns)

        def work(k):
            mine = pairs[k :: len(conns)]
            results[k] = (mine, conns[k].many([get(host_hdr, "/v1/items/" + it, us) for it, us in mine]))

        run_parallel(work, len(conns))
        for mine, answers in results:
            for (it, us), (status, body) in zip(mine, answers):
                if status != 200:
                    raise RuntimeError(f"GET /v1/items/{it} as {us} answered {status}: {body[:200]!r}")
                obj = json.loads(body)
                if obj.get("item") != it:
                    raise RuntimeError(f"answer for {it} names {obj.get('item')}")
                kind = obj["viewer"]["reaction"]
                r = rows.setdefault(it, collections.Counter())
                r[kind] += 1
        checked_items.extend(group)
    npairs_checked = sum(len(users_of[it]) for it in checked_items)

    counts = read_counts(conns, host_hdr, checked_items)
    kinds = sorted({k for c in counts.values() for k in c})

    def diff(cnt):
        bad = []
        for it in checked_items:
            for k in kinds:
                if cnt[it].get(k, 0) != rows.get(it, {}).get(k, 0):
                    bad.append(it)
                    break
        return bad

    bad = diff(counts)
    if bad:  # perhaps only lag: read those again after a pause
        time.sleep(2.0)
        counts.update(read_counts(conns, host_hdr, bad))
        bad = diff(counts)

    totals = collections.Counter()
    for it in checked_items:
        totals.update(rows.get(it, {}))
    ok = not bad
    print(f"verify: {len(checked_items)} items, {npairs_checked} rows read back"
          f"{' (PARTIAL: budget reached)' if partial else ''} in {time.monotonic() - t0:.1f} s; "
          f"rows by kind: {dict(sorted(totals.items()))}")
    for it in bad[:20]:
        print(f"verify: DRIFT {it}: counts {counts[it]} rows {dict(rows.get(it, {}))}")
    if bad:
        print(f"verify: {len(bad)} items whose counts differ from their rows")

    if a.viral_item in users_of and a.viral_item in rows:
        vr = rows[a.viral_item]
        vc = counts[a.viral_item]
        like = vc.get("like", 0)
        others = {k: n for k, n in vr.items() if k not in ("like", "none")}
        v_ok = like == vr.get("like", 0) and not others
        msg = (f"verify: viral {a.viral_item}: like count {like}, users holding like {vr.get('like', 0)}"
               f" (of {len(users_of[a.viral_item])} users that sent a like)")
        if a.viral_changed_true >= 0:
            v_ok = v_ok and like >= a.viral_changed_true
            msg += (f"; answers with changed:true {a.viral_changed_true}"
                    f" (applied but unacknowledged at the end of the load: {like - a.viral_changed_true})")
        print(msg + (" OK" if v_ok else " MISMATCH"))
        ok = ok and v_ok
    # The server's own check, where it has one: recount every item from its rows (admin).
    body = b"{}"
    req = (f"POST /v1/admin/recount HTTP/1.1\r\nHost: {host_hdr}\r\nX-User-Id: admin\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    t1 = time.monotonic()
    conns[0].sock.settimeout(max(10.0, deadline + 30 - time.monotonic()))
    status, answer = conns[0].many([req])[0]
    if status == 404:
        print("verify: no POST /v1/admin/recount on this server")
    elif status == 200:
        rep = json.loads(answer)
        drift = rep.get("drift", [])
        print(f"verify: POST /v1/admin/recount {{}}: checked {rep.get('checked')}, corrected {rep.get('corrected')}, "
              f"drift {drift[:10]}{' ...' if len(drift) > 10 else ''} ({time.monotonic() - t1:.1f} s)")
        ok = ok and not drift and not rep.get("corrected")
    else:
        print(f"verify: POST /v1/admin/recount answered {status}: {answer[:300]!r}")
        ok = False
    for c in conns:
        c.close()
    print("VERIFY " + ("OK" if ok else "FAILED") + (" (partial)" if partial else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
