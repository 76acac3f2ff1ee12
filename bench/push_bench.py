#!/usr/bin/env python3
"""bench/push_bench.py — what pushes cost the writes. Not a test; never run by CI.

    python3 bench/push_bench.py [SECONDS] [TALLYD]

One run, the same build twice on fresh data directories, alternated (plain, push, plain, push):
  plain  tallyd alone;
  push   tallyd with one webhook to a local receiver that answers 200 at once, and 1 000 live
         streams (GET /v1/live, 2 ids each) read by this script.
Each under wrk -t1 -c64 of keyed writes (bench/load.lua `keyed`) for SECONDS (default 8).
PUSH=webhook or PUSH=streams attaches one of the two only. Then, with the pushes attached, a paced load at half the best plain rate (`paced_keyed`), and the
delivery lag of every transition the receiver got: its arrival time minus the transition's `at`
(commit time). Prints req/s, the ratio push / plain, and the lag's p50 / p99 / max.
Everything on 127.0.0.1; every process started here is stopped by its PID."""

import datetime
import http.server
import json
import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
TALLYD = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build", "tallyd")
STREAMS = 1000
ADMIN = {"X-User-Id": "admin", "Content-Type": "application/json"}


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers 200 at once on a kept-alive connection and keeps (arrival time, body); the bodies are parsed after the run, so
    the receiver's own JSON work does not compete with tallyd for the two cores during it."""
    protocol_version = "HTTP/1.1"  # keeps the connection, as a receiver in production does
    got = []
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        now = time.time()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with Receiver.lock:
            Receiver.got.append((now, body))

    def log_message(self, *args):
        pass

    @staticmethod
    def lags():
        """Each delivered transition's arrival time minus its commit time (`at`), seconds."""
        out = []
        for now, body in Receiver.got:
            for t in json.loads(body)["transitions"]:
                at = datetime.datetime.strptime(t["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
                out.append(now - at)
        return out


def start_tallyd(work):
    out = open(os.path.join(work, "out"), "w+")
    p = subprocess.Popen([TALLYD, "--listen", "127.0.0.1:0", "--data", os.path.join(work, "data"),
                          "--rate-limit", "off", "--read-rate-limit", "off", "--webhook-allow", "127.0.0.0/8",
                          "--max-connections", "2048", "--max-live-streams", "1500",
                          "--max-live-streams-per-client", "1500"],
                         stdout=out, stderr=open(os.path.join(work, "err"), "w"))
    for _ in range(100):
        out.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", out.read())
        if m:
            return p, int(m.group(1))
        time.sleep(0.05)
    p.kill()
    raise SystemExit("tallyd did not start: " + open(os.path.join(work, "err")).read()[-2000:])


def request(port, method, path, body=None, headers=None):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


class Streams:
    """STREAMS live streams, read and thrown away by one thread (a client that keeps up)."""

    def __init__(self, port):
        self.socks = []
        for n in range(STREAMS):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(("GET /v1/live?ids=p%d,p%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % (n % 500, n % 37)).encode())
            self.socks.append(s)
        self.stop = False
        self.bytes = 0
        self.sel = selectors.DefaultSelector()
        for s in self.socks:
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)
        self.t = threading.Thread(target=self.pump, daemon=True)
        self.t.start()

    def pump(self):
        while not self.stop:
            for key, _ in self.sel.select(0.2):
                try:
                    self.bytes += len(key.fileobj.recv(65536))
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.t.join(2)
        for s in self.socks:
            s.close()


def wrk(port, scenario, work, rate=None):
    args = ["wrk", "-t1", "-c64", "-d%ds" % SECS, "--latency", "--timeout", "10s", "-s",
            os.path.join(HERE, "load.lua"), "http://127.0.0.1:%d" % port, "--", scenario, "tally",
            os.path.join(work, "r"), "7"]
    if rate:
        args.append(str(rate))
    subprocess.run(args, capture_output=True, timeout=SECS + 60)
    line = open(os.path.join(work, "r.result")).read()
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def run(push, receiver_port, scenario="keyed", rate=None):
    work = tempfile.mkdtemp(prefix="tally-push-")
    p, port = start_tallyd(work)
    streams = None
    try:
        what = os.environ.get("PUSH", "both")  # webhook | streams | both: which push to attach
        if push and what in ("webhook", "both"):
            st, _ = request(port, "POST", "/v1/admin/webhooks",
                            {"url": "http://127.0.0.1:%d/hook" % receiver_port}, ADMIN)
            assert st == 201, st
        if push and what in ("streams", "both"):
            streams = Streams(port)
        time.sleep(0.5)
        r = wrk(port, scenario, work, rate)
        time.sleep(2)  # the last deliveries
        return float(r["rps"]), int(r.get("p99_us", 0)) / 1000.0, streams.bytes if streams else 0
    finally:
        if streams:
            streams.close()
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(work, ignore_errors=True)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    rport = srv.server_address[1]
    print("bench/push_bench.py %d: %s, wrk -t1 -c64 -d%ds keyed, %d live streams + 1 webhook"
          % (SECS, datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), SECS, STREAMS))
    plain, push = [], []
    run(False, rport)  # warm-up, not counted: the first run of a round was always the slowest
    for _ in range(2):
        rps, p99, _ = run(False, rport)
        plain.append(rps)
        print("plain   %8.0f req/s  p99 %6.2f ms" % (rps, p99))
        Receiver.got = []
        rps, p99, got = run(True, rport)
        push.append(rps)
        print("push    %8.0f req/s  p99 %6.2f ms  (streams read %d KB, %d transitions delivered)"
              % (rps, p99, got // 1024, len(Receiver.lags())))
    for a, b in zip(plain, push):
        print("push / plain: %.2f" % (b / a))
    half = int(max(plain) / 2)
    Receiver.got = []
    rps, p99, _ = run(True, rport, "paced_keyed", half)
    lags = sorted(Receiver.lags())
    if lags:
        q = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))] * 1000
        print("paced at %d req/s (half the best plain rate): %.0f req/s, write p99 %.2f ms; delivery lag"
              " p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d transitions" % (half, rps, p99, q(0.5), q(0.99),
                                                                           lags[-1] * 1000, len(lags)))
    srv.shutdown()


if __name__ == "__main__":
    main()
