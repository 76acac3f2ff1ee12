#!/usr/bin/env python3
"""report.py RUNS_TSV RUNS_DIR CLK_TCK — the Markdown tables of bench/run.sh."""
import os
import sys

WHAT = {
    "write": "(a) durable writes",
    "paced": "(a) at half the best (a) rate",
    "viral": "(b) viral item",
    "feed": "(c) feed, 100 ids",
    "mixed": "(d) 90% read / 10% write",
    "toggle": "(e) toggles, 20% retried",
}


def read_kv(path):
    return dict(kv.split("=", 1) for kv in open(path).read().split())


def read_tasks(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) == 3:
                out[f[0]] = (int(f[1]), int(f[2]))
    return out


def read_metrics(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.rsplit(" ", 1)
            if len(f) == 2:
                try:
                    out[f[0]] = float(f[1])
                except ValueError:
                    pass
    return out


def load(tsv, runs_dir, tck, tallyd_pid):
    rows = {}
    order = []
    for line in open(tsv):
        f = line.rstrip("\n").split("\t")
        label, target, scenario, conns, dur = f[:5]
        base = os.path.join(runs_dir, f"{label}-{target}")
        res = read_kv(base + ".result")
        real, user, sys_ = (float(x) for x in f[12].split()[:3])
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
            "machine_cpu": int(f[7]) / max(int(f[8]), 1) * 100 * os.cpu_count(),
            "disk_bytes": int(f[9]) * 512, "flushes": int(f[10]), "proc_write": int(f[11]),
            "wrk_cpu": (user + sys_) / real * 100, "wall": wall,
        }
        r["others_cpu"] = max(r["machine_cpu"] - r["server_cpu"] - r["wrk_cpu"], 0)
        # tallyd's threads: the writer is the one that writes the data file
        t0, t1 = read_tasks(base + ".tasks0"), read_tasks(base + ".tasks1")
        if t1:
            writer = max(t1, key=lambda t: t1[t][1])
            d = {t: t1[t][0] - t0.get(t, (0, 0))[0] for t in t1}
            r["writer_cpu"] = d[writer] / tck / wall * 100
            r["rest_cpu"] = sum(v for t, v in d.items() if t != writer) / tck / wall * 100
        m0, m1 = read_metrics(base + ".metrics0"), read_metrics(base + ".metrics1")
        if m1:
            def dm(name):
                return m1.get(name, 0) - m0.get(name, 0)
            r["commits"] = dm("tally_writer_commits_total")
            r["writes"] = dm("tally_writes_total")
            r["transitions"] = dm("tally_transitions_total")
            r["failed"] = dm("tally_writes_failed_total")
            r["replays_metric"] = dm("tally_idempotent_replays_total")
            r["batch_sum"] = dm("tally_writer_batch_commands_sum")
            r["batch_count"] = dm("tally_writer_batch_commands_count")
            r["http5xx"] = sum(v - m0.get(k, 0) for k, v in m1.items()
                               if k.startswith("tally_http_requests_total") and 'status="5' in k)
            # the server's own write latency (request in to answer out), from its histogram's buckets
            buckets = []
            for k, v in m1.items():
                if k.startswith('tally_write_duration_seconds_bucket{le="'):
                    le = k.split('"')[1]
                    buckets.append((float("inf") if le == "+Inf" else float(le), v - m0.get(k, 0)))
            buckets.sort()
            total = buckets[-1][1] if buckets else 0
            if total > 0:
                def bound(q):
                    for le, c in buckets:
                        if c >= q * total:
                            return le
                    return float("inf")
                r["srv_p50"], r["srv_p99"], r["srv_p999"] = bound(0.5), bound(0.99), bound(0.999)
        lag = [float(x) for x in open(base + ".lag").read().split()] if os.path.exists(base + ".lag") else []
        if lag:
            r["lag_max"] = max(lag)
        rows[(label, target)] = r
        if label not in order:
            order.append(label)
    return rows, order


def ms(x):
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if b else "–"


def main():
    rows, order = load(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "")
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
    out.append("| run | conns | req/s | p50 | p99 | p99.9 | non-2xx | nginx worker CPU | wrk CPU | rest of machine |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in order:
        n = rows.get((label, "nginx"))
        if n:
            out.append(f"| {label} | {n['conns']} | {n['rps']:,.0f} | {ms(n['p50'])} | {ms(n['p99'])} | {ms(n['p999'])} "
                       f"| {n['non2xx']} | {n['server_cpu']:.0f}% | {n['wrk_cpu']:.0f}% | {n['others_cpu']:.0f}% |")
    out.append("")
    out.append("## Resources during each tally run")
    out.append("")
    out.append("CPU in % of one core over the run (the machine has 200%): tallyd in all, its writer thread "
               "(group commit and fold: the thread that writes the data file) and the other threads (HTTP); "
               "the server's write latency is read off its /metrics histogram (bucket bounds: 0.5, 1, 2, 5, 10, "
               "20, 50, 100, 250 ms ...); "
               "\"rest\" is the CPU the kernel counted beyond tallyd and wrk (loopback networking, softirqs, "
               "any other process on the machine). From tallyd's /metrics: commits and writes per commit, "
               "the largest pipeline lag sampled every 0.5 s. Disk: the block device's counters over the run "
               "(the whole device: another writer on the machine would show here too) and tallyd's "
               "write_bytes from /proc/PID/io.")
    out.append("")
    out.append("| run | tallyd CPU | writer | other threads | wrk CPU | rest | commits/s | writes/commit | server write p50 / p99 / p99.9 ≤ ms | max lag s | device flushes/s | device bytes/req | write_bytes/req |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in order:
        t = rows.get((label, "tally"))
        if not t:
            continue
        req = max(t["requests"], 1)
        fl = t["flushes"]
        commits = t.get("commits")
        cps = f"{commits / t['wall']:.0f}" if commits is not None else "–"
        wpc = f"{t['batch_sum'] / t['batch_count']:.1f}" if t.get("batch_count") else "–"
        lag = f"{t['lag_max']:.3f}" if "lag_max" in t else "–"
        srv = (" / ".join(f"{t[k] * 1000:g}" for k in ("srv_p50", "srv_p99", "srv_p999"))
               if "srv_p50" in t else "–")
        wcpu = f"{t['writer_cpu']:.0f}%" if "writer_cpu" in t else "–"
        rcpu = f"{t['rest_cpu']:.0f}%" if "rest_cpu" in t else "–"
        out.append(f"| {label} | {t['server_cpu']:.0f}% | {wcpu} | {rcpu} | {t['wrk_cpu']:.0f}% "
                   f"| {t['others_cpu']:.0f}% | {cps} | {wpc} | {srv} | {lag} | {fl / t['wall']:.0f} "
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
                          f"{t['replayed']:,} answers with `Idempotent-Replayed: true`"
                          + (f" (/metrics: {t['replays_metric']:,.0f} replays)" if "replays_metric" in t else ""))
        if t["non2xx"] or t["sockerr"]:
            extras.append(f"- {label}: statuses {t['statuses']}; socket errors {t['sockerr']}")
        if t.get("failed") or t.get("http5xx"):
            extras.append(f"- {label}: /metrics: failed writes {t.get('failed', 0):.0f}, 5xx answers {t.get('http5xx', 0):.0f}")
    if extras:
        out.append("Other counts seen by wrk (tally):")
        out.append("")
        out.extend(extras)
    print("\n".join(out))


if __name__ == "__main__":
    main()
