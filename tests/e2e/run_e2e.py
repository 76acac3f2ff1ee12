#!/usr/bin/env python3
"""Run tally's end-to-end tests: every test_*.py beside this file.

  python3 tests/e2e/run_e2e.py [-k PATTERN]... [-v]

Prints one line per test (name and ok / FAIL / ERROR / skip), the failures' tracebacks,
and a last line "N passed, N failed" (errors count as failed, skips as neither).
Exit status 0 only if nothing failed. TALLY_STORE=pg runs the servers on PostgreSQL
(tests/e2e/harness.py).
"""

import argparse
import os
import sys
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests whose full name (module.Class.test) matches; "
                         "substring, or fnmatch pattern if it contains '*'")
    args = ap.parse_args(argv)

    sys.path.insert(0, HERE)
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [p if "*" in p else "*%s*" % p for p in args.patterns]
    suite = loader.discover(start_dir=HERE, pattern="test_*.py", top_level_dir=HERE)

    import harness  # after the path insert: the store this run uses
    sys.stdout.write("store: %s (TALLY_STORE), tallyd: %s\n" % (
        "PostgreSQL (a throwaway cluster per run)" if harness.PG else "embedded (--data DIR)",
        harness.TALLYD))
    result = LineResult(sys.stdout)
    t0 = time.monotonic()
    suite.run(result)
    elapsed = time.monotonic() - t0

    for kind, items in (("FAIL", result.failures), ("ERROR", result.errors)):
        for test, tb in items:
            sys.stdout.write("\n" + "=" * 70 + "\n%s: %s\n" % (kind, test.id()) + "-" * 70 + "\n")
            sys.stdout.write(tb)
    if result.unexpectedSuccesses:
        for test in result.unexpectedSuccesses:
            sys.stdout.write("\nunexpected success: %s\n" % test.id())
    if result.testsRun == 0:
        sys.stdout.write("\nno test matched\n")
    sys.stdout.write("\n(%d skipped, %.1fs)\n" % (result.skipped_n, elapsed))
    sys.stdout.write("%d passed, %d failed\n" % (result.passed, result.failed))
    sys.stdout.flush()
    return 0 if result.failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
