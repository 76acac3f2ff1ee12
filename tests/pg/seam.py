#!/usr/bin/env python3
"""Runs the unit binary's seam suite (tests/unit/test_seam.c) against a throwaway PostgreSQL cluster:
the same cases the embedded store passes in every unit run, on the PostgreSQL store; then its shards
suite (tests/unit/test_shards.c): two databases opened as two shards, their identities.

    python3 tests/pg/seam.py [UNIT_BINARY]     (default build/san/unit_tests)

Starts a cluster (pgcluster.py), gives the binary its URI in TALLY_SEAM_PG with %s where each case's
database name goes (the cases make their databases on it), runs `UNIT_BINARY seam shards` and
exits with its status; its last line is the suite's "N passed, N failed". The cluster is destroyed at exit."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pgcluster  # noqa: E402

RUN_TIMEOUT_S = 600


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/san/unit_tests"
    cluster = pgcluster.start_primary(name="seam")
    try:
        env = dict(os.environ)
        env["TALLY_SEAM_PG"] = cluster.uri("%s", connect_timeout="2")
        try:
            rc = subprocess.run([binary, "seam", "shards"], env=env, timeout=RUN_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            print("seam: no result within %ss" % RUN_TIMEOUT_S)
            rc = 1
    finally:
        pgcluster.destroy(cluster)
    return rc


if __name__ == "__main__":
    sys.exit(main())
