#!/usr/bin/env python3
"""bench/pg_rt_probe.py — sums an strace of tallyd's writer thread (bench/pg_rt.sh) into round trips.

   pg_rt_probe.py STRACE_FILE COMMITS

STRACE_FILE: `strace -tt -T -e trace=sendto,recvfrom,poll,ppoll` of the writer thread; COMMITS: the
transactions committed meanwhile (tally_db_transactions_total). Only the database's socket counts. A round trip ("flight") starts with a
sendto after the last answer was read and ends with the last recvfrom before the next such sendto;
it is named after the first statement in its first send (libpq's Parse message carries the SQL). The
time between flights is the writer's own (deciding, building statements, answering, waiting for
commands). Prints flights per commit by kind, mean ms per flight and per commit. Not a test."""
import re
import sys

LINE = re.compile(r"^(\d+):(\d+):([\d.]+) (\w+)\((.*)\) = (-?\d+).*<([\d.]+)>$")


def kind(args):
    # statements as text, or by name (tally_wN: prepared write statements of an earlier build, which
    # had them; the writer now sends its statements as text, src/store/pg/pg_write.c)
    if "BEGIN" in args[:80]:
        return "begin+locks"
    if "tally_pipeline" in args and "FOR UPDATE" in args or "tally_w2\\0" in args:
        return "fold-checkpoint"
    if "FROM tally_log WHERE" in args or "tally_w3\\0" in args:
        return "fold-log"
    if re.search(r"tally_rows r SET|INSERT INTO tally_rows|INSERT INTO tally_idem|tally_counts|COMMIT|tally_w\d", args):
        return "writes+commit"
    if "ROLLBACK" in args:
        return "rollback"
    return "other"


def main():
    path, commits = sys.argv[1], max(1, int(sys.argv[2]))
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            h, mi, s, call, args, ret, dur = m.groups()
            t = int(h) * 3600 + int(mi) * 60 + float(s)
            fd = re.match(r"\[?\{?(?:fd=)?(\d+)", args)
            events.append((t, t + float(dur), call, args, int(ret), fd and int(fd.group(1))))
    # the database's socket: the one the SQL goes to (others: wake-ups of the HTTP threads)
    sql = [e[5] for e in events if e[2] == "sendto" and "\\0P\\0" in e[3] or "SELECT" in e[3]]
    if sql:
        events = [e for e in events if e[5] == max(set(sql), key=sql.count)]
    flights, cur, last_recv = [], None, True
    for t, end, call, args, ret, _ in events:
        if call == "sendto":
            if last_recv or cur is None:
                cur = {"start": t, "end": end, "kind": kind(args)}
                flights.append(cur)
            last_recv = False
        elif cur is not None:
            cur["end"] = end
            if call == "recvfrom" and ret > 0:
                last_recv = True
    if not flights:
        print("no flights traced")
        return
    window = flights[-1]["end"] - flights[0]["start"]
    by = {}
    for f in flights:
        by.setdefault(f["kind"], []).append(f["end"] - f["start"])
    inflight = sum(sum(v) for v in by.values())
    parts = []
    for k in sorted(by, key=lambda k: -len(by[k])):
        v = by[k]
        parts.append("%s %.2f/commit %.3f ms" % (k, len(v) / commits, 1000 * sum(v) / len(v)))
    print(
        "%d commits in %.2f s: %.2f writer round trips/commit (%s); per commit %.3f ms waiting on the server, "
        "%.3f ms the writer's own"
        % (commits, window, len(flights) / commits, "; ".join(parts), 1000 * inflight / commits,
           1000 * (window - inflight) / commits)
    )


main()
