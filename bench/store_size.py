#!/usr/bin/env python3
"""bench/store_size.py — bytes of store per write, with and without an Idempotency-Key.

    python3 bench/store_size.py TALLYD [TALLYD...]

For each binary: a fresh tallyd on a temporary directory (127.0.0.1 only), 10 000 writes by
10 000 users over 1 000 items (`PUT .../reaction`), then the same with a 32-byte key on each
(`POST .../reaction:toggle`), each time `tally stats` (the `tally` beside the binary) after a
clean stop: store_used_bytes / 10 000. Not part of the test suite.
"""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

WRITES, ITEMS = 10000, 1000


def used_bytes(tallyd, keyed):
    d = tempfile.mkdtemp(prefix="tally-size.")
    p = subprocess.Popen([tallyd, "--listen", "127.0.0.1:0", "--data", d + "/data", "--rate-limit", "off"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = None
        for _ in range(100):
            m = re.search(r"127\.0\.0\.1:(\d+)", p.stdout.readline())
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("tallyd did not say where it listens")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for n in range(WRITES):
            h = {"X-User-Id": "u%d" % n, "Content-Type": "application/json"}
            if keyed:
                h["Idempotency-Key"] = '"k-%030d"' % n
                c.request("POST", "/v1/items/i%d/reaction:toggle" % (n % ITEMS), body='{"reaction":"like"}', headers=h)
            else:
                c.request("PUT", "/v1/items/i%d/reaction" % (n % ITEMS), body='{"reaction":"like"}', headers=h)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                sys.exit("write %d: status %d" % (n, r.status))
        time.sleep(1.5)  # the fold and the first sweep
    finally:
        p.terminate()
        p.wait(timeout=60)
    tally = os.path.join(os.path.dirname(tallyd), "tally")
    st = json.loads(subprocess.check_output([tally, "stats", "--data", d + "/data"]))
    subprocess.run(["rm", "-rf", d], check=False)
    return st["store_used_bytes"]


for binary in sys.argv[1:] or ["build/tallyd"]:
    plain, keyed = used_bytes(binary, False), used_bytes(binary, True)
    print("%s: %.0f bytes of store per write; %.0f with an Idempotency-Key (+%.0f)"
          % (binary, plain / WRITES, keyed / WRITES, (keyed - plain) / WRITES))
