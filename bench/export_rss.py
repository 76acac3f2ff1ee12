#!/usr/bin/env python3
"""bench/export_rss.py — what an export over HTTP costs the server's memory. Not a test; never run by CI.

    python3 bench/export_rss.py [ROWS] [TALLYD] [TALLY]      (defaults: 1000000, build/tallyd, build/tally)
    STORE_URI=postgresql://… python3 bench/export_rss.py …  (on PostgreSQL: the rows are imported
                                                            over HTTP instead of with `tally import`)

Loads ROWS rows (item r%07d, 500 users of 64 bytes, like/dislike) into a fresh store — with `tally
import` before tallyd starts on the embedded store —, starts tallyd, then reads GET /v1/admin/export
three times while sampling /proc/<pid>/status every 20 ms:
  fast   read as fast as this script can;
  slow   read at ~1 MB/s for 10 s, then the rest at full speed;
  stall  read 64 KB, stop reading for 5 s, then the rest.
Prints, for each, the body's size, lines, seconds, and the peak growth of RssAnon (the heap: what
a server that buffered the body would grow) and VmRSS (which also counts the store's pages mapped
in: file-backed, given back under pressure) over the value just before the export. Everything on
127.0.0.1; every process started here is stopped by its PID."""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
TALLYD = sys.argv[2] if len(sys.argv) > 2 else "build/tallyd"
TALLY = sys.argv[3] if len(sys.argv) > 3 else "build/tally"
STORE_URI = os.environ.get("STORE_URI")
USER_PAD = "-" + "u" * 60
IMPORT_CHUNK = 100000  # rows per POST /v1/admin/import (PostgreSQL)


def status_kb(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "VmRSS"):
                out[k] = int(v.split()[0])
    return out


def rows_text(lo, hi):
    return "".join(json.dumps({"item": "r%07d" % i, "user": "user%03d%s" % (i % 500, USER_PAD),
                               "reaction": "like" if i % 4 else "dislike"}) + "\n" for i in range(lo, hi))


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.stop, self.peak = pid, False, {"RssAnon": 0, "VmRSS": 0}

    def run(self):
        while not self.stop:
            for k, v in status_kb(self.pid).items():
                self.peak[k] = max(self.peak[k], v)
            time.sleep(0.02)


def export(host, port, pid, mode):
    base = status_kb(pid)
    sampler = Sampler(pid)
    sampler.start()
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.monotonic()
    conn.request("GET", "/v1/admin/export", headers={"X-User-Id": "admin"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    size, lines, last = 0, 0, b""
    if mode == "slow":
        while time.monotonic() - t0 < 10:
            part = resp.read(16384)
            size += len(part)
            lines += part.count(b"\n")
            last = (last + part)[-200:]
            time.sleep(0.016)
    elif mode == "stall":
        part = resp.read(65536)
        size, lines, last = len(part), part.count(b"\n"), part[-200:]
        time.sleep(5)
    while True:
        part = resp.read(1 << 20)
        if not part:
            break
        size += len(part)
        lines += part.count(b"\n")
        last = (last + part)[-200:]
    took = time.monotonic() - t0
    resp.close()
    conn.close()
    sampler.stop = True
    sampler.join()
    closing = json.loads(last.decode().splitlines()[-1])
    assert closing == {"export": "complete", "lines": lines - 1}, closing
    return {"mode": mode, "bytes": size, "lines": lines, "seconds": round(took, 2),
            "rss_anon_grew_kb": sampler.peak["RssAnon"] - base["RssAnon"],
            "vmrss_grew_kb": sampler.peak["VmRSS"] - base["VmRSS"], "rss_anon_before_kb": base["RssAnon"]}


def settle(host, port, timeout_s=600):
    """Waits until tally_pipeline_lag_seconds is 0 (and stays so for a second)."""
    deadline, quiet = time.monotonic() + timeout_s, 0
    while quiet < 10:
        assert time.monotonic() < deadline, "the fold did not catch up"
        c = http.client.HTTPConnection(host, port, timeout=30)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        m = re.search(r"^tally_pipeline_lag_seconds (\S+)$", text, re.M)
        quiet = quiet + 1 if m and float(m.group(1)) == 0 else 0
        time.sleep(0.1)


def main():
    tmp = tempfile.mkdtemp(prefix="tally-export-rss-")
    proc = None
    try:
        store = ["--store", STORE_URI] if STORE_URI else ["--data", os.path.join(tmp, "data")]
        t0 = time.monotonic()
        if not STORE_URI:
            path = os.path.join(tmp, "rows.ndjson")
            with open(path, "w") as f:
                for lo in range(0, ROWS, IMPORT_CHUNK):
                    f.write(rows_text(lo, min(ROWS, lo + IMPORT_CHUNK)))
            subprocess.run([TALLY, "import", "--reactions", "like,dislike"] + store + [path], check=True, stdout=subprocess.DEVNULL)
        proc = subprocess.Popen([TALLYD, "--listen", "127.0.0.1:0", "--rate-limit", "off", "--import-max-size",
                                 "64M"] + store, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = None
        while m is None:
            line = proc.stdout.readline()
            assert line, "tallyd exited"
            m = re.search(r"(?<!admin )listening on http://([^:]+):(\d+)", line)
        host, port = m.group(1), int(m.group(2))
        if STORE_URI:
            for lo in range(0, ROWS, IMPORT_CHUNK):
                c = http.client.HTTPConnection(host, port, timeout=600)
                c.request("POST", "/v1/admin/import", body=rows_text(lo, min(ROWS, lo + IMPORT_CHUNK)).encode(),
                          headers={"X-User-Id": "admin", "Content-Type": "application/x-ndjson"})
                r = c.getresponse()
                assert r.status == 200, (r.status, r.read()[:200])
                r.read()
                c.close()
        settle(host, port)  # the fold of the import is over: what grows then is the export's
        print("loaded %d rows in %.1f s (%s)" % (ROWS, time.monotonic() - t0,
                                                  "PostgreSQL" if STORE_URI else "embedded"))
        for mode in ("fast", "slow", "stall"):
            print(json.dumps(export(host, port, proc.pid, mode)))
    finally:
        if proc:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
