#!/usr/bin/env python3
"""bench/make_store.py — a populated store for read benchmarks (not part of the test suite).

    python3 bench/make_store.py RECORDS DIR [TALLY]

Writes RECORDS reactions with load.lua's distributions (items Zipf(1.1) over 1M ranks mapped to
ids p<n> by the same permutation, users uniform over 1M; like/dislike 85/15) as NDJSON and
imports them with `tally import` (default build/tally) into the new store DIR. Seeded, so the
same arguments make the same store.
"""
import bisect
import itertools
import random
import subprocess
import sys
import tempfile

ITEMS, USERS, ZIPF_S = 1000000, 1000000, 1.1
PERM_A, PERM_B = 999983, 12345

if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
records, out_dir = int(sys.argv[1]), sys.argv[2]
tally = sys.argv[3] if len(sys.argv) == 4 else "build/tally"
rng = random.Random(42)
cdf = list(itertools.accumulate(k ** -ZIPF_S for k in range(1, ITEMS + 1)))
with tempfile.NamedTemporaryFile("w", suffix=".ndjson") as f:
    for _ in range(records):
        rank = bisect.bisect_left(cdf, rng.random() * cdf[-1]) + 1
        item = (rank * PERM_A + PERM_B) % ITEMS
        kind = "like" if rng.random() < 0.85 else "dislike"
        f.write('{"item":"p%d","user":"u%d","reaction":"%s"}\n' % (item, rng.randrange(USERS), kind))
    f.flush()
    subprocess.run([tally, "import", "--data", out_dir, "--reactions", "like,dislike", f.name], check=True)
