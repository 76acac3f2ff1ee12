#!/usr/bin/env python3
"""Run tally's end-to-end tests: every test_*.py beside this file.

  python3 tests/e2e/run_e2e.py [-k PATTERN]... [-j JOBS]

Prints one line per test (name and ok / FAIL / ERROR / skip), the failures' tracebacks,
and a last line "N passed, N failed" (errors count as failed, skips as neither).
Exit status 0 only if nothing failed. TALLY_STORE=pg runs the servers on PostgreSQL
(tests/e2e/harness.py).

-j JOBS (or TALLY_E2E_JOBS) runs the test files in JOBS worker processes at once, a file at a
time each, the longest first: every test starts servers of its own on ports the system picks,
so files do not meet; most of a test's time is waiting (servers starting, fsyncs, clocks), so
two workers on two cores take much less wall time than one. A file's lines are printed
together when it ends. Classes that measure time or load themselves set `serial = True`
(class attribute) and run after the workers, alone.
"""

import argparse
import os
import queue
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class LineResult(unittest.TestResult):
    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self.passed = 0
        self.failed = 0
        self.skipped_n = 0
        self._t0 = {}
        self._subfailed = {}

    def _line(self, test, word):
        t0 = self._t0.pop(test.id(), None)
        took = "" if t0 is None else " (%.1fs)" % (time.monotonic() - t0)
        self.stream.write("%-6s %s%s\n" % (word, test.id(), took))
        self.stream.flush()

    def startTest(self, test):
        super().startTest(test)
        self._t0[test.id()] = time.monotonic()

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1
        self._line(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._subfailed.pop(test.id(), None)
        self.failed += 1
        self._line(test, "FAIL")

    def addError(self, test, err):
        super().addError(test, err)
        self._subfailed.pop(test.id(), None)
        self.failed += 1
        # setUpClass / module fixtures report errors on a placeholder without startTest
        self._line(test, "ERROR")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.skipped_n += 1
        self._line(test, "skip")
        self.stream.write("         (%s)\n" % reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.passed += 1
        self._line(test, "ok")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.failed += 1
        self._line(test, "FAIL")

    def addSubTest(self, test, subtest, err):
        # a failing subtest fails its test: the test is counted once, in stopTest
        super().addSubTest(test, subtest, err)
        if err is not None:
            word = "FAIL" if issubclass(err[0], test.failureException) else "ERROR"
            self.stream.write("  %-6s %s\n" % (word, subtest.id()))
            self.stream.flush()
            if word == "ERROR" or test.id() not in self._subfailed:
                self._subfailed[test.id()] = word

    def stopTest(self, test):
        word = self._subfailed.pop(test.id(), None)
        if word is not None:
            self.failed += 1
            self._line(test, word)
        super().stopTest(test)


def _report(result):
    """The failures' tracebacks, as a run's end prints them."""
    out = []
    for kind, items in (("FAIL", result.failures), ("ERROR", result.errors)):
        for test, tb in items:
            out.append("\n" + "=" * 70 + "\n%s: %s\n" % (kind, test.id()) + "-" * 70 + "\n" + tb)
    for test in result.unexpectedSuccesses:
        out.append("\nunexpected success: %s\n" % test.id())
    return "".join(out)


def _is_serial(test):
    return bool(getattr(type(test), "serial", False))


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


def _loader(patterns):
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = [p if "*" in p else "*%s*" % p for p in patterns]
    return loader


DONE = "\x00done"  # a worker's line after each file: DONE passed failed skipped


def _worker(patterns):
    """Runs the files named on stdin, one a line, without their serial classes; after each, its
    tracebacks and a DONE line."""
    loader = _loader(patterns)
    import harness  # noqa: F401  (the store this run uses; a PostgreSQL cluster per worker)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        tests = [t for t in _flatten(loader.loadTestsFromName(name)) if not _is_serial(t)]
        result = LineResult(sys.stdout)
        unittest.TestSuite(tests).run(result)
        sys.stdout.write(_report(result))
        sys.stdout.write("%s %d %d %d\n" % (DONE, result.passed, result.failed, result.skipped_n))
        sys.stdout.flush()
    return 0


def _parallel(patterns, jobs, suite):
    """Runs suite's files in jobs workers, then its serial classes here. Returns (passed, failed,
    skipped, tests run)."""
    by_file, serial = {}, []
    for t in _flatten(suite):
        if _is_serial(t):
            serial.append(t)
        else:
            by_file.setdefault(type(t).__module__, []).append(t)
    # the longest first (by the number of tests), so that the last to end is a short one
    files = queue.Queue()
    for name in sorted(by_file, key=lambda n: -len(by_file[n])):
        files.put(name)
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    out_lock = threading.Lock()
    argv = [sys.executable, os.path.abspath(__file__), "--worker"]
    for p in patterns:
        argv += ["-k", p]

    def work():
        w = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        try:
            while True:
                try:
                    name = files.get_nowait()
                except queue.Empty:
                    break
                w.stdin.write(name + "\n")
                w.stdin.flush()
                block = []
                for line in w.stdout:
                    if line.startswith(DONE):
                        p, f, s = (int(x) for x in line.split()[1:4])
                        break
                    block.append(line)
                else:  # the worker died: what it printed, and the file counts as one failure
                    p, f, s = 0, 1, 0
                    block.append("ERROR  %s (its worker exited: status %s)\n" % (name, w.wait()))
                with out_lock:
                    sys.stdout.write("".join(block))
                    sys.stdout.flush()
                    totals["passed"] += p
                    totals["failed"] += f
                    totals["skipped"] += s
                if f and block[-1:] and block[-1].startswith("ERROR  %s (its worker" % name):
                    break
        finally:
            w.stdin.close()
            w.wait()

    workers = [threading.Thread(target=work) for _ in range(jobs)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    # a worker that died left its files in the queue: run them here
    rest = []
    while not files.empty():
        rest += by_file[files.get()]
    result = LineResult(sys.stdout)
    unittest.TestSuite(rest + serial).run(result)
    sys.stdout.write(_report(result))
    ran = sum(len(v) for v in by_file.values()) + len(serial)
    return (totals["passed"] + result.passed, totals["failed"] + result.failed,
            totals["skipped"] + result.skipped_n, ran)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests whose full name (module.Class.test) matches; "
                         "substring, or fnmatch pattern if it contains '*'")
    ap.add_argument("-j", dest="jobs", type=int, default=int(os.environ.get("TALLY_E2E_JOBS", "1") or 1),
                    help="worker processes running test files at once (default: TALLY_E2E_JOBS, else 1)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    sys.path.insert(0, HERE)
    if args.worker:
        return _worker(args.patterns)
    suite = _loader(args.patterns).discover(start_dir=HERE, pattern="test_*.py", top_level_dir=HERE)

    import harness  # after the path insert: the store this run uses
    sys.stdout.write("store: %s (TALLY_STORE), tallyd: %s%s\n" % (
        "PostgreSQL (a throwaway cluster per run)" if harness.PG else "embedded (--data DIR)",
        harness.TALLYD, ", %d workers" % args.jobs if args.jobs > 1 else ""))
    t0 = time.monotonic()
    if args.jobs > 1:
        passed, failed, skipped, ran = _parallel(args.patterns, args.jobs, suite)
    else:
        result = LineResult(sys.stdout)
        suite.run(result)
        sys.stdout.write(_report(result))
        passed, failed, skipped, ran = result.passed, result.failed, result.skipped_n, result.testsRun
    elapsed = time.monotonic() - t0
    if ran == 0:
        sys.stdout.write("\nno test matched\n")
    sys.stdout.write("\n(%d skipped, %.1fs)\n" % (skipped, elapsed))
    sys.stdout.write("%d passed, %d failed\n" % (passed, failed))
    sys.stdout.flush()
    return 0 if failed == 0 and ran > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
