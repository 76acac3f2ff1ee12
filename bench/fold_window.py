#!/usr/bin/env python3
"""Viral workload with and without --fold-window: how many counts records the pipeline writes
per transition, and what it costs in lag. Bounded: 3 runs of DURATION seconds, 127.0.0.1 only.

  python3 bench/fold_window.py [DURATION_S]"""
import http.client, os, shutil, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
THREADS = 32


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def run(window):
    tmp = tempfile.mkdtemp(prefix="tally-fold-")
    p = subprocess.Popen([os.path.join(ROOT, "build/tallyd"), "--listen", "127.0.0.1:0", "--data", tmp + "/d",
                          "--rate-limit", "off", "--fold-window", window], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    port = int(p.stdout.readline().strip().rsplit(":", 1)[1])
    stop = time.monotonic() + DURATION
    acked = [0] * THREADS

    def client(t):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        i = 0
        while time.monotonic() < stop and i < 100000:
            kind = ("like", "none")[i % 2]
            c.request("PUT", "/v1/items/viral/reaction", body=('{"reaction":"%s"}' % kind).encode(),
                      headers={"X-User-Id": "u%d" % t, "Content-Type": "application/json"})
            if c.getresponse().read() and True:
                acked[t] += 1
            i += 1
        c.close()

    lags = []
    before = metrics(port)
    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    while time.monotonic() < stop:
        lags.append(metrics(port).get("tally_pipeline_lag_seconds", 0.0))
        time.sleep(0.01)
    for th in threads:
        th.join()
    time.sleep(0.3)
    after = metrics(port)
    p.terminate()
    p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("tally_pipeline_folded_total",
                                                         "tally_pipeline_count_updates_total",
                                                         "tally_writer_commits_total", "tally_transitions_total")}
    lags.sort()
    return sum(acked), d, lags[int(len(lags) * 0.99)] if lags else 0, lags[-1] if lags else 0


print("fold-window  writes/s  transitions  count-updates  transitions/update  lag p99 (ms)  lag max (ms)")
for window in ("0", "50ms", "200ms"):
    acked, d, p99, mx = run(window)
    updates = d["tally_pipeline_count_updates_total"] or 1
    print("%-11s  %8.0f  %11d  %13d  %18.1f  %12.1f  %12.1f" % (
        window, acked / DURATION, d["tally_transitions_total"], d["tally_pipeline_count_updates_total"],
        d["tally_pipeline_folded_total"] / updates, p99 * 1000, mx * 1000))
