#!/usr/bin/env python3
"""report.py RUNS_TSV RUNS_DIR CLK_TCK — the Markdown tables of bench/run.sh."""
import os
import sys

WHAT = {
    "write": "(a) durable writes",
    "viral": "(b) viral item",
    "feed": "(c) feed, 100 ids",
    "mixed": "(d) 90% read / 10% write",
    "toggle": "(e) toggles, 20% retried",
}


def load(tsv, runs_dir, tck):
    rows = {}
    order = []
    for line in open(tsv):
        f = line.rstrip("\n").split("\t")
        label, target, scenario, conns, dur = f[:5]
        res = dict(kv.split("=", 1) for kv in open(os.path.join(runs_dir, f"{label}-{target}.result")).read().split())
        real, user, sys_ = (float(x) for x in f[14].split()[:3])
        wall = float(f[5])
        r = {
            "label": label, "target": target, "scenario": scenario, "conns": int(conns),
            "rps": float(res["rps"]), "requests": int(res["requests"]),
            "p50": int(res["p50_us"]) / 1000, "p99": int(res["p99_us"]) / 1000,
            "p999": int(res["p999_us"]) / 1000, "max": int(res["max_us"]) / 1000,
            "non2xx": int(res["non2xx"]), "sockerr": int(res["sock_errors"]),
            "statuses": res["statuses"], "changed_true": int(res["changed_true"]),
            "replayed": int(res["replayed"]), "retries": int(res["retries"]),
            "server_cpu": int(f[6]) / tck / wall * 100,
            "writer_cpu": int(f[7]) / tck / wall * 100,
            "http_cpu": int(f[8]) / tck / wall * 100,
            "machine_cpu": int(f[9]) / max(int(f[10]), 1) * 100 * os.cpu_count(),
            "disk_bytes": int(f[11]) * 512, "flushes": int(f[12]), "proc_write": int(f[13]),
            "wrk_cpu": (user + sys_) / real * 100, "wall": wall,
        }
        rows[(label, target)] = r
        if label not in order:
            order.append(label)
    return rows, order


def ms(x):
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if b else "–"


def main():
    rows, order = load(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    out = []
    out.append("## Tally, and each figure as a ratio to nginx in the same run")
    out.append("")
    out.append("Latencies in ms from wrk's histogram (wrk applies its coordinated-omission correction). "
               "Ratios: tally ÷ nginx (req/s: the fraction of the ceiling; latency: how many times slower).")
    out.append("")
    out.append("| run | scenario | conns | req/s | ×nginx | p50 | ×nginx | p99 | ×nginx | p99.9 | ×nginx | non-2xx | socket errors |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in order:
        t, n = rows.get((label, "tally")), rows.get((label, "nginx"))
        if not t or not n:
            continue
        out.append(f"| {label} | {WHAT.get(t['scenario'], t['scenario'])} | {t['conns']} | {t['rps']:,.0f} | {ratio(t['rps'], n['rps'])} "
                   f"| {ms(t['p50'])} | {ratio(t['p50'], n['p50'])} | {ms(t['p99'])} | {ratio(t['p99'], n['p99'])} "
                   f"| {ms(t['p999'])} | {ratio(t['p999'], n['p999'])} | {t['non2xx']} | {t['sockerr']} |")
    out.append("")
    out.append("## nginx (the ceiling): same wrk settings, same requests")
    out.append("")
    out.append("| run | conns | req/s | p50 | p99 | p99.9 | non-2xx | nginx worker CPU | wrk CPU |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in order:
        n = rows.get((label, "nginx"))
        if n:
            out.append(f"| {label} | {n['conns']} | {n['rps']:,.0f} | {ms(n['p50'])} | {ms(n['p99'])} | {ms(n['p999'])} "
                       f"| {n['non2xx']} | {n['server_cpu']:.0f}% | {n['wrk_cpu']:.0f}% |")
    out.append("")
    out.append("## What bounds the tally figures")
    out.append("")
    out.append("CPU in % of one core over the run (the machine has 200%). tallyd's threads by creation order: "
               "the writer (group commit and fold) and the HTTP threads. \"Machine\" is all CPU time the kernel "
               "counted (loopback networking and any other process included). Disk figures are the block "
               "device's counters over the run (flushes ≈ fdatasyncs of the group commits; the whole device, "
               "so any other writer on the machine is included); write_bytes is tallyd's /proc/PID/io.")
    out.append("")
    out.append("| run | tallyd CPU | writer | HTTP threads | wrk CPU | machine | disk flushes/s | req per flush | disk bytes/req | write_bytes/req |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in order:
        t = rows.get((label, "tally"))
        if not t:
            continue
        req = max(t["requests"], 1)
        fl = t["flushes"]
        out.append(f"| {label} | {t['server_cpu']:.0f}% | {t['writer_cpu']:.0f}% | {t['http_cpu']:.0f}% | {t['wrk_cpu']:.0f}% "
                   f"| {t['machine_cpu']:.0f}% | {fl / t['wall']:.0f} | {req / fl if fl else 0:.1f} "
                   f"| {t['disk_bytes'] / req:,.0f} | {t['proc_write'] / req:,.0f} |")
    out.append("")
    extras = []
    for label in order:
        t = rows.get((label, "tally"))
        if not t:
            continue
        if t["scenario"] == "viral":
            extras.append(f"- {label}: {t['changed_true']:,} answers with `\"changed\":true` "
                          f"(distinct users' first like), of {t['requests']:,}")
        if t["scenario"] == "toggle":
            extras.append(f"- {label}: {t['retries']:,} retries sent (resends of an earlier key), "
                          f"{t['replayed']:,} answers with `Idempotent-Replayed: true`")
        if t["non2xx"] or t["sockerr"]:
            extras.append(f"- {label}: statuses {t['statuses']}; socket errors {t['sockerr']}")
    if extras:
        out.append("Other counts seen by wrk (tally):")
        out.append("")
        out.extend(extras)
    print("\n".join(out))


if __name__ == "__main__":
    main()
