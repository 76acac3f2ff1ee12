#!/usr/bin/env python3
"""bench/export_rss_pg.py — bench/export_rss.py on PostgreSQL: a throwaway cluster (tests/pg/pgcluster.py, fsync on),
one database, STORE_URI set.   python3 bench/export_rss_pg.py [ROWS]   Not a test."""
import os, subprocess, sys
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(0, "tests/pg")
import pgcluster
c = pgcluster.start_primary(name="exportbench", fsync=True)
try:
    db = pgcluster.create_database(c)
    env = dict(os.environ, STORE_URI=c.uri(db))
    subprocess.run([sys.executable, "bench/export_rss.py", sys.argv[1]], env=env, check=True)
finally:
    c.destroy()
