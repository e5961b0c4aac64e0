#!/usr/bin/python3
"""report.py OUT_DIR RESULTS_MD CHART_PNG: turn bench.sh's raw numbers
(OUT_DIR/raw.tsv, the reader's JSON lines, the pgbench latency logs and the
server log's autovacuum entries) into the results tables (printed and
written as markdown), the target check, and the throughput chart
(gnuplot)."""

import glob
import json
import math
import os
import re
import statistics
import subprocess
import sys

NAMES = {
    "serial": "(a) bigserial",
    "xid8": "(b) xid8 + xmin",
    "lock": "(c) advisory lock",
    "pgq": "(d) PgQ",
    "stream": "(e) stream_seq",
    "serial_pk": "(a) bigserial, same indexes",
    "stream_pk": "(e) stream_seq, same indexes",
}
ORDER = ["serial", "xid8", "lock", "pgq", "stream", "serial_pk", "stream_pk"]
# the contenders of issue 5 (one table each with the index its reader
# needs) and the same-index shape of issue 11 (primary key plus the unique
# index on seq); ratios are against the bigserial contender of the same
# shape
ISSUE5 = ["serial", "xid8", "lock", "pgq", "stream"]
SAME_INDEX = ["serial_pk", "stream_pk"]


def base_of(k):
    """The bigserial contender of k's shape."""
    return "serial_pk" if k in SAME_INDEX else "serial"


def num(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return math.nan
    return v


def median(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def fmt(v, digits=0):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "{:,.{}f}".format(v, digits)


def fmt_ms(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "%.1f" % v if v < 100 else "{:,.0f}".format(v)


def ratio(v, base):
    if math.isnan(v) or math.isnan(base) or base == 0:
        return "-"
    return "%.2f" % (v / base)


def fmt_spread(values, digits=0, scale=1.0):
    """'median [min-max]' of the values (times scale); the median alone
    when there is one value."""
    values = [v * scale for v in values if not math.isnan(v)]
    if not values:
        return "-"
    m = fmt(statistics.median(values), digits)
    if len(values) == 1:
        return m
    return "%s [%s-%s]" % (m, fmt(min(values), digits), fmt(max(values), digits))


def ratio_spread(runs, base_runs):
    """Ratio of the medians of two contenders' runs (dicts round -> value),
    with [min-max] of the ratios of the runs of the same round."""
    v = median(list(runs.values()))
    b = median(list(base_runs.values()))
    if math.isnan(v) or math.isnan(b) or b == 0:
        return "-"
    pairs = [runs[r] / base_runs[r] for r in runs
             if r in base_runs and base_runs[r] and not math.isnan(runs[r])]
    if len(pairs) < 2:
        return "%.2f" % (v / b)
    return "%.2f [%.2f-%.2f]" % (v / b, min(pairs), max(pairs))


def per_row(v, rows, digits=0):
    if rows <= 0 or v is None or math.isnan(v):
        return "-"
    return fmt(v / rows, digits)


def parse_autovacuum_log(path, table):
    """Sum the server log's "automatic vacuum of table" entries for table
    (log_autovacuum_min_duration = 0): runs, index scans, heap pages
    removed and scanned, tuples removed, index pages read by the index
    scans (each reads the whole index: its size times the entry's index
    scans), WAL bytes and full-page images."""
    tot = dict(runs=0, index_scans=0, pages_removed=0, pages_scanned=0,
               tuples_removed=0, index_pages=0, wal_bytes=0, fpi=0)
    if not os.path.exists(path):
        return None
    head = re.compile(r'automatic vacuum of table "[^"]*\.%s": index scans: (\d+)' % re.escape(table))
    patterns = {
        "pages": re.compile(r"^\s+pages: (\d+) removed, (\d+) remain, (\d+) scanned"),
        "tuples": re.compile(r"^\s+tuples: (\d+) removed"),
        "wal": re.compile(r"^\s+WAL usage: (\d+) records, (\d+) full page images, (\d+) bytes"),
        "index": re.compile(r'^\s+index ".*": pages: (\d+) in total'),
    }
    inside = False
    scans = 0
    with open(path, errors="replace") as fh:
        for line in fh:
            m = head.search(line)
            if m:
                inside = True
                scans = int(m.group(1))
                tot["runs"] += 1
                tot["index_scans"] += scans
                continue
            if not inside or not line.startswith("\t"):
                inside = False
                continue
            for name, pat in patterns.items():
                m = pat.match(line)
                if not m:
                    continue
                if name == "pages":
                    tot["pages_removed"] += int(m.group(1))
                    tot["pages_scanned"] += int(m.group(3))
                elif name == "tuples":
                    tot["tuples_removed"] += int(m.group(1))
                elif name == "index":
                    tot["index_pages"] += scans * int(m.group(1))
                elif name == "wal":
                    tot["fpi"] += int(m.group(2))
                    tot["wal_bytes"] += int(m.group(3))
    return tot


def load(out):
    tput, lagtps, meta, cost, vac = {}, {}, {}, [], []
    copies = {}
    hstate = shmem = None
    for line in open(os.path.join(out, "raw.tsv")):
        f = line.rstrip("\n").split("\t")
        if f[0] == "tput":
            _, k, sc, rows, c, rep, tps, failed = f
            tput.setdefault((k, sc, int(rows), int(c)), {})[int(rep)] = num(tps)
        elif f[0] == "copy":
            _, k, rep, nrows, rate, wal = f
            meta["copy_rows"] = nrows
            copies.setdefault(k, {})[int(rep)] = (num(rate), num(wal))
        elif f[0] == "cost":
            keys = ("contender", "rows", "nrows", "inserted", "updated", "dead", "wal",
                    "table", "index", "heap_in_use", "table_vac", "index_vac", "vacuum_wal",
                    "failed")
            r = dict(zip(keys, f[1:]))
            for key in keys[1:]:
                r[key] = num(r.get(key))
            cost.append(r)
        elif f[0] == "vac":
            keys = ("contender", "secs", "rate", "rows", "tps", "failed", "autovacuum_count",
                    "autoanalyze_count", "dead", "size", "wal")
            r = dict(zip(keys, f[1:]))
            for key in keys[1:]:
                r[key] = num(r.get(key))
            r["log"] = parse_autovacuum_log(
                os.path.join(out, "autovacuum.%s.log" % r["contender"]), "ev_" + r["contender"])
            vac.append(r)
        elif f[0] == "lagtps":
            lagtps[f[1]] = num(f[2])
        elif f[0] == "evicted":
            meta["evicted." + f[1]] = int(f[2])
        elif f[0] == "hstate":
            hstate = f[1:]
        elif f[0] == "shmem":
            shmem = f[1:]
        elif f[0] == "meta":
            meta[f[1]] = meta.get(f[1]) or f[2]
    # pgbench -l logs of figure 4: mean latency (us) per run and script
    lat = {}
    for path in glob.glob(os.path.join(out, "lat", "reader*_*")):
        base = os.path.basename(path)
        kind, rep = base.split(".")[0].split("_")
        sums = {}
        for line in open(path):
            f = line.split()
            if len(f) >= 6:
                a = sums.setdefault(int(f[3]), [0, 0])
                a[0] += int(f[2])
                a[1] += 1
        for script, (total, n) in sums.items():
            lat.setdefault((kind, script), {}).setdefault(rep, [0, 0])
            lat[(kind, script)][rep][0] += total
            lat[(kind, script)][rep][1] += n
    page = {k: {rep: t / n for rep, (t, n) in v.items() if n} for k, v in lat.items()}
    runs = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        name = os.path.basename(path)[:-5]
        with open(path) as fh:
            runs[name] = json.loads(fh.readline())
    return tput, lagtps, page, hstate, shmem, meta, runs, cost, vac, copies


def load_groups(out):
    """Figure 9's lines of raw.tsv (bench/group_bench.sh): throughput runs
    (workers, round, rows, seconds, rows/s, applied once, fenced, cores
    busy, cores) and
    latency runs (wait mode, claim interval, rows, p50/p99 after the COMMIT
    returned and was sent, per-slot p50 min and max, wait() calls per
    second per worker, empty reads per row, applied once)."""
    tput, lat = [], []
    for line in open(os.path.join(out, "raw.tsv")):
        f = line.rstrip("\n").split("\t")
        if f[0] == "group_tput" and len(f) >= 8:
            tput.append(dict(workers=int(f[1]), rep=f[2], rows=num(f[3]), secs=num(f[4]),
                             rps=num(f[5]), once=f[6], fenced=num(f[7]),
                             cores=num(f[8]) if len(f) >= 10 else math.nan,
                             ncpu=num(f[9]) if len(f) >= 10 else math.nan))
        elif f[0] == "group_lat" and len(f) >= 13:
            keys = ("rows", "p50_ret", "p99_ret", "p50_sent", "p99_sent", "slot_min", "slot_max",
                    "waits", "empty")
            r = dict(zip(keys, (num(x) for x in f[3:12])))
            r.update(idle=f[1], claim_every=num(f[2]), once=f[12])
            lat.append(r)
    return tput, lat


def group_figure(out, md):
    """Figure 9: consumer groups."""
    tput, lat = load_groups(out)
    if not tput and not lat:
        return
    md.append("## 9. Consumer groups")
    md.append("")
    if tput:
        by = {}
        for r in tput:
            by.setdefault(r["workers"], []).append(r["rps"])
        m1 = median(by.get(1, []))
        md.append("A group of 8 slots keyed by a column of 1,000 keys; %s rows inserted ahead, then "
                  "drained by 1 worker and by 4 (Python, psycopg2, one connection each), "
                  "alternating, %d round(s). A worker loops: `claim()` (every loop), then per slot held "
                  "one transaction: `read_slot()` a page of 100 rows, insert them into an oracle "
                  "table, `advance_slot()`, commit. Rows/s = rows / (last row applied - workers "
                  "started, their connection included); median [min-max] over the rounds. "
                  "*Cores busy*: CPU time of the whole machine during the run (workers, server "
                  "and all, from /proc/stat) divided by its length, median over the rounds, of "
                  "the machine's %s cores."
                  % (fmt(tput[0]["rows"]), max(len(v) for v in by.values()),
                     fmt(tput[0]["ncpu"])))
        md.append("")
        md.append("| workers | rows/s | ratio to 1 worker | cores busy | each row applied once |")
        md.append("|---:|---:|---:|---:|---|")
        for w in sorted(by):
            once = [r["once"] for r in tput if r["workers"] == w]
            cores = median([r["cores"] for r in tput if r["workers"] == w])
            md.append("| %d | %s | %s | %s | %s |" % (
                w, fmt_spread(by[w]), ratio(median(by[w]), m1), fmt(cores, 2),
                "yes" if all(o == "yes" for o in once) else "**NO** (%s)" % ", ".join(once)))
        md.append("")
        m4 = median(by.get(4, []))
        if not math.isnan(m1) and not math.isnan(m4) and m1:
            md.append("Target of issue 12: 4 workers at least 2.5 times 1 worker: %.2f, %s."
                      % (m4 / m1, "met" if m4 / m1 >= 2.5 else "**not met**"))
            md.append("")
    if lat:
        md.append("Wake-up latency: 4 workers holding 2 slots each call `stream_seq.wait()` when "
                  "none of their slots had a row; one writer commits one row (a random key) "
                  "every ~10 ms. Milliseconds from the writer's COMMIT (after it returned; after "
                  "it was sent) to the worker inserting the row into the oracle, over every row; "
                  "the range of the 8 slots' medians. *wait() after*: *slot position* = the "
                  "lowest position of the slots held (a slot's position is its own last row, so "
                  "`wait()` returns at once while any other slot has later rows: the worker "
                  "polls); *horizon* = the horizon seen before the worker read its slots, minus 1 "
                  "(returns on the next commit of any slot). *Claim*: how often the worker calls "
                  "`claim()` (which locks every slot of the group). *Empty reads per row*: "
                  "`read_slot()` calls that found nothing, per row applied.")
        md.append("")
        md.append("| wait() after | claim | rows | p50 ms (returned) | p99 ms (returned) | "
                  "p50 ms (sent) | p99 ms (sent) | per-slot p50 ms | wait() calls/s per worker | "
                  "empty reads per row | each row applied once |")
        md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in lat:
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s-%s | %s | %s | %s |" % (
                r["idle"].replace("_", " "),
                "every loop" if not r["claim_every"] else "every %s s" % fmt(r["claim_every"]),
                fmt(r["rows"]), fmt(r["p50_ret"], 2), fmt(r["p99_ret"], 2),
                fmt(r["p50_sent"], 2), fmt(r["p99_sent"], 2), fmt(r["slot_min"], 2),
                fmt(r["slot_max"], 2), fmt(r["waits"], 1), fmt(r["empty"], 2),
                r["once"] if r["once"] == "yes" else "**%s**" % r["once"]))
        md.append("")


def main():
    out, md_path, png_path = sys.argv[1:4]
    tput, lagtps, page, hstate, shmem, meta, runs, cost, vac, copies = load(out)
    present = [k for k in ORDER if any(key[0] == k for key in tput)
               or any(r["contender"] == k for r in runs.values())
               or any(r["contender"] == k for r in cost)]
    md = []
    checks = []
    checks11 = []
    checks44 = []

    md.append("# stream_seq benchmark results")
    md.append("")
    md.append("Generated by `make bench` (bench/bench.sh) on %s; %s; PostgreSQL %s; "
              "%s; total runtime %s s." % (meta.get("date", "?"), meta.get("cpu", "?"),
                                           meta.get("postgres", "?"), meta.get("settings", ""),
                                           meta.get("runtime", "?")))
    if meta.get("reinstalled"):
        md.append("**Warning: the installed stream_seq.so changed during this run "
                  "(someone ran make install); a running server maps that file, so "
                  "results after that moment are not trustworthy.**")
        md.append("")
    crashes = [v for k, v in meta.items() if k == "crash"]
    if crashes:
        md.append("**Warning: the server log shows a crash: %s**" % crashes[0])
        md.append("")
    md.append("Contenders: (a) bigserial table, plain INSERT, reader `id > cursor` (unsafe "
              "baseline); (b) `xid8 DEFAULT pg_current_xact_id()` + bigserial, reader below "
              "`pg_snapshot_xmin(pg_current_snapshot())` with cursor (xid, id); (c) "
              "`pg_advisory_xact_lock` before `nextval`; (d) PgQ `pgq.insert_event`, "
              "ticker = `pgq.ticker()` every 50 ms with `ticker_max_lag` 0; (e) stream_seq, "
              "reader `seq > cursor AND seq < stream_seq.horizon()`. Tables of issue 5: "
              "(a) and (c) `id bigserial PRIMARY KEY`; (b) the same plus an index on "
              "(xid, id); (d) PgQ's event tables (an index on `ev_txid`); (e) `seq bigint` "
              "with stream_seq's partial unique index and no primary key. *Same indexes* "
              "(issue 11): (a) and (e) with `id bigserial PRIMARY KEY` plus a unique index "
              "on `seq`. Ratios are against (a) of the same shape, in the same run.")
    md.append("")

    # figure 1
    if tput:
        def runs_of(k, sc, rows, c):
            return tput.get((k, sc, rows, c), {})

        def med(k, sc, rows, c):
            return median(list(runs_of(k, sc, rows, c).values()))

        ks = sorted(set((sc, rows, c) for (_, sc, rows, c) in tput),
                    key=lambda t: (t[0] != "on", t[1], t[2]))
        reps = max(len(v) for v in tput.values())
        secs = meta.get("secs", "?")
        md.append("## 1. Writer throughput")
        md.append("")
        md.append("%d rounds; each round runs every row of the tables once per contender, "
                  "the contenders in a rotated order, %s s per run. Throughput: median "
                  "[min-max] over the rounds. Ratio: to the bigserial contender of the same "
                  "shape, ratio of the medians [min-max of the ratios within a round]."
                  % (reps, secs))
        md.append("")
        shown = [k for k in ISSUE5 if k in present]
        if shown:
            md.append("### 1a. Tables of issue 5, transactions/s (median [min-max] of %d runs)"
                      % reps)
            md.append("")
            md.append("| synchronous_commit | rows/txn | clients | "
                      + " | ".join(NAMES[k] for k in shown) + " |")
            md.append("|---|---:|---:|" + "---:|" * len(shown))
            for sc, rows, c in ks:
                md.append("| %s | %d | %d | %s |" % (sc, rows, c, " | ".join(
                    fmt_spread(list(runs_of(k, sc, rows, c).values())) for k in shown)))
            md.append("")
            others = [k for k in shown if k != "serial"]
            if "serial" in shown and others:
                md.append("### 1a. Tables of issue 5, ratio to (a) [min-max within a round]")
                md.append("")
                md.append("| synchronous_commit | rows/txn | clients | "
                          + " | ".join(NAMES[k] for k in others) + " |")
                md.append("|---|---:|---:|" + "---:|" * len(others))
                for sc, rows, c in ks:
                    md.append("| %s | %d | %d | %s |" % (sc, rows, c, " | ".join(
                        ratio_spread(runs_of(k, sc, rows, c), runs_of("serial", sc, rows, c))
                        for k in others)))
                md.append("")
            md.append("### 1a. Tables of issue 5, rows/s (median of %d runs; ratio to (a))" % reps)
            md.append("")
            md.append("| synchronous_commit | rows/txn | clients | "
                      + " | ".join(NAMES[k] for k in shown) + " |")
            md.append("|---|---:|---:|" + "---:|" * len(shown))
            for sc, rows, c in ks:
                base = med("serial", sc, rows, c) * rows
                cells = []
                for k in shown:
                    v = med(k, sc, rows, c) * rows
                    cells.append(fmt(v) if k == "serial" else "%s (%s)" % (fmt(v), ratio(v, base)))
                md.append("| %s | %d | %d | %s |" % (sc, rows, c, " | ".join(cells)))
            md.append("")
        if any(k in present for k in SAME_INDEX):
            md.append("### 1b. Same indexes: `id bigserial PRIMARY KEY` plus a unique index "
                      "on `seq` (median [min-max] of %d runs)" % reps)
            md.append("")
            md.append("(a) `seq bigserial UNIQUE`; (e) `seq bigint` numbered by stream_seq "
                      "(its partial unique index).")
            md.append("")
            md.append("| synchronous_commit | rows/txn | clients | (a) transactions/s | "
                      "(e) transactions/s | ratio (e)/(a) | (a) rows/s | (e) rows/s |")
            md.append("|---|---:|---:|---:|---:|---:|---:|---:|")
            for sc, rows, c in ks:
                a_runs, e_runs = runs_of("serial_pk", sc, rows, c), runs_of("stream_pk", sc, rows, c)
                if not a_runs and not e_runs:
                    continue
                md.append("| %s | %d | %d | %s | %s | %s | %s | %s |" % (
                    sc, rows, c, fmt_spread(list(a_runs.values())),
                    fmt_spread(list(e_runs.values())), ratio_spread(e_runs, a_runs),
                    fmt(median(list(a_runs.values())) * rows),
                    fmt(median(list(e_runs.values())) * rows)))
            md.append("")
        if copies:
            md.append("### 1c. One COPY of %s rows in one transaction (median [min-max] of "
                      "the rounds)" % fmt(num(meta.get("copy_rows", "nan"))))
            md.append("")
            md.append("Rows/s and WAL bytes per row; ratio of the medians to the bigserial "
                      "table of the same shape ((a) for the tables of issue 5, (a) with the "
                      "same indexes for (e) with the same indexes).")
            md.append("")
            md.append("| table | rows/s | ratio | WAL bytes/row | ratio |")
            md.append("|---|---:|---:|---:|---:|")
            for k in ORDER:
                if k not in copies:
                    continue
                base_k = "serial_pk" if k.endswith("_pk") else "serial"
                rates = {r: v[0] for r, v in copies[k].items()}
                wals = {r: v[1] for r, v in copies[k].items()}
                b_rates = {r: v[0] for r, v in copies.get(base_k, {}).items()}
                b_wals = {r: v[1] for r, v in copies.get(base_k, {}).items()}
                md.append("| %s | %s | %s | %s | %s |" % (
                    NAMES[k], fmt_spread(list(rates.values())),
                    "-" if k == base_k else ratio_spread(rates, b_rates),
                    fmt_spread(list(wals.values())),
                    "-" if k == base_k else ratio(median(list(wals.values())),
                                                   median(list(b_wals.values())))))
            md.append("")
        # targets of issue 44: the same-index shape, every case, 8 and 32 clients
        for sc, rows, c in ks:
            a_runs = runs_of("serial_pk", sc, rows, c)
            e_runs = runs_of("stream_pk", sc, rows, c)
            if a_runs and e_runs:
                r = median(list(e_runs.values())) / median(list(a_runs.values()))
                checks44.append(("same indexes, %d-row, %d clients, synchronous_commit %s: "
                                 "ratio >= 0.95" % (rows, c, sc),
                                 ratio_spread(e_runs, a_runs), r >= 0.95))
        if "stream_pk" in copies and "serial_pk" in copies:
            e = {r: v[0] for r, v in copies["stream_pk"].items()}
            a = {r: v[0] for r, v in copies["serial_pk"].items()}
            r = median(list(e.values())) / median(list(a.values()))
            checks44.append(("same indexes, one COPY: ratio >= 0.95", ratio_spread(e, a),
                             r >= 0.95))
            ew = median([v[1] for v in copies["stream_pk"].values()])
            aw = median([v[1] for v in copies["serial_pk"].values()])
            checks44.append(("same indexes, one COPY: WAL per row <= 1.05x of (a)",
                             "%.0f / %.0f = %.2f" % (ew, aw, ew / aw), ew <= 1.05 * aw))
        # targets
        for rows, sc, target in ((1, "on", 0.90), (1, "off", 0.70),
                                 (10, "on", 0.80), (10, "off", 0.60)):
            base = med("serial", sc, rows, 8)
            v = med("stream", sc, rows, 8)
            if not math.isnan(base) and not math.isnan(v):
                checks.append(("%d-row, 8 clients, synchronous_commit %s: ratio >= %.2f"
                               % (rows, sc, target), "%.2f" % (v / base), v / base >= target))
        # targets of issue 11: the same-index shape
        for rows, sc, target in ((10, "on", 0.85), (10, "off", 0.75), (1, "off", 0.85)):
            a_runs = runs_of("serial_pk", sc, rows, 8)
            e_runs = runs_of("stream_pk", sc, rows, 8)
            if a_runs and e_runs:
                r = median(list(e_runs.values())) / median(list(a_runs.values()))
                checks11.append(("same indexes, %d-row, 8 clients, synchronous_commit %s: "
                                 "ratio >= %.2f" % (rows, sc, target),
                                 ratio_spread(e_runs, a_runs), r >= target))
        slower = []
        for sc, rows, c in ks:
            v = med("stream", sc, rows, c)
            for k in ("lock", "pgq"):
                o = med(k, sc, rows, c)
                if not math.isnan(v) and not math.isnan(o) and v <= o:
                    slower.append("%s %s-row %d clients sc=%s (%.0f vs %.0f)"
                                  % (NAMES[k], rows, c, sc, v, o))
        if any(k in present for k in ("lock", "pgq")) and "stream" in present:
            checks.append(("faster than (c) and (d) on every write figure",
                           "; ".join(slower) if slower else "yes", not slower))

    # figures 2 and 5
    lag = [runs["lag." + k] for k in present if "lag." + k in runs]
    if lag:
        md.append("## 2 and 5. Visibility lag and skipped rows under load")
        md.append("")
        md.append("%s s of 8 pgbench writers, 1-row transactions" % meta.get("lag_secs", "?") +
                  " kept open 0-3 ms "
                  "(`pg_sleep(random() * 0.003)`), plus a probe row every 10 ms whose "
                  "lag is the time from its COMMIT returning to the reader returning it; "
                  "one reader paging 100 rows at a time (1 ms pause after a short page).")
        md.append("")
        md.append("| contender | writer tx/s | lag p50 ms | lag p99 ms | lag max ms | "
                  "rows committed | rows read | rows skipped |")
        md.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in lag:
            k = r["contender"]
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s%s |" % (
                NAMES[k], fmt(lagtps.get("lag." + k, math.nan)), fmt_ms(r["lag_p50_ms"]),
                fmt_ms(r["lag_p99_ms"]), fmt_ms(r["lag_max_ms"]), fmt(r["committed"]),
                fmt(r["read"]), fmt(r["missed"]),
                " (%.1f%%)" % (100.0 * r["missed"] / r["committed"]) if r["missed"] else ""))
            if r["duplicates"] or r["unnumbered"] or r["errors"] or r["not_in_table"]:
                md.append("|   ! | duplicates %d, unnumbered %d, not in table %d, errors %s ||||||||"
                          % (r["duplicates"], r["unnumbered"], r["not_in_table"], r["errors"]))
        md.append("")
        if "lag.stream" in runs:
            r = runs["lag.stream"]
            base = runs.get("lag.serial")
            checks.append(("visibility lag p99 <= 10 ms under load",
                           "%s ms%s" % (fmt_ms(r["lag_p99_ms"]),
                                        " ((a), unsafe, same load: %s ms)" % fmt_ms(base["lag_p99_ms"])
                                        if base else ""),
                           r["lag_p99_ms"] is not None and r["lag_p99_ms"] <= 10))
            checks.append(("stream reader skipped no row (figure 2 run)",
                           "%d skipped" % r["missed"], r["missed"] == 0 and not r["duplicates"]))

    # figure 3
    stall = [(kind, runs["stall.%s.%s" % (kind, k)]) for kind in ("other", "stream")
             for k in present if "stall.%s.%s" % (kind, k) in runs]
    if stall:
        st = int(meta.get("stall_secs", "10"))
        md.append("## 3 and 5. Stalls: lag while one transaction stays open %d s" % st)
        md.append("")
        md.append("Same load for %d s; from second 1 to %d one session keeps a write "
                  "transaction open: *unrelated* = a row inserted into another table; *own table* = an "
                  "uncommitted row in the contender's own table (for (c) it holds the "
                  "advisory lock, so the writers wait instead of the reader)." % (st + 2, st + 1))
        md.append("")
        md.append("| contender | open transaction | lag p50 ms | lag p99 ms | lag max ms | "
                  "writer tx/s | rows skipped |")
        md.append("|---|---|---:|---:|---:|---:|---:|")
        for kind, r in stall:
            k = r["contender"]
            md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES[k], "unrelated" if kind == "other" else "own table",
                fmt_ms(r["lag_p50_ms"]), fmt_ms(r["lag_p99_ms"]), fmt_ms(r["lag_max_ms"]),
                fmt(lagtps.get("stall.%s.%s" % (kind, k), math.nan)), fmt(r["missed"])))
            if r["errors"]:
                md.append("|   ! | errors: %s ||||||" % r["errors"])
            if k == "stream":
                checks.append(("no stall with an open %s transaction (lag max < 1 s)"
                               % ("unrelated" if kind == "other" else "uncommitted stream"),
                               "max %s ms, p99 %s ms" % (fmt_ms(r["lag_max_ms"]),
                                                          fmt_ms(r["lag_p99_ms"])),
                               r["lag_max_ms"] is not None and r["lag_max_ms"] < 1000))
                checks.append(("stream reader skipped no row (stall %s)" % kind,
                               "%d skipped" % r["missed"], r["missed"] == 0))
        md.append("")
        ev = [(n, meta[n]) for n in sorted(meta) if n.startswith("evicted.")]
        if ev:
            md.append("stream_seq entries evicted from the tracked-transaction list "
                      "(`stream_seq.streams.evicted`) during each (e) run: "
                      + ", ".join("%s %d" % (n[len("evicted."):], v) for n, v in ev) + ".")
            md.append("")

    # figure 4: mean latencies (us) per rep, from interleaved pgbench runs
    if page:
        def lat_of(kind, script):
            return page.get((kind, script), {})

        def med(kind, script):
            return median(list(lat_of(kind, script).values()))

        def med_ratio(ka, sa, kb, sb):
            a, b = lat_of(ka, sa), lat_of(kb, sb)
            return median([a[r] / b[r] for r in a if r in b and b[r]])

        def per_s(us):
            return 1e6 / us if us and not math.isnan(us) else math.nan

        reps = max(len(v) for v in page.values())
        plain, hor = med("reader0", 0), med("reader0", 1)
        s1, h0 = med("reader0", 2), med("reader0", 3)
        s1b, h64 = med("reader64", 0), med("reader64", 1)
        t0 = t64 = c64 = "?"
        if hstate:
            c64, t0, t64 = hstate
        md.append("## 4. Reader cost")
        md.append("")
        md.append("One client, prepared statements; the variants of each block run "
                  "interleaved in one pgbench run (scripts picked at random), %d runs; "
                  "per second = 1 / mean latency, round trip included; medians over "
                  "runs. *net* = mean latency minus that of `SELECT 1` in the same run." % reps)
        md.append("")
        md.append("| measure | per second | mean latency us | ratio |")
        md.append("|---|---:|---:|---:|")
        md.append("| 100-row page, `seq > $1 ORDER BY seq LIMIT 100` | %s | %s | |"
                  % (fmt(per_s(plain)), fmt(plain, 1)))
        r = med_ratio("reader0", 0, "reader0", 1)
        md.append("| same page `AND seq < stream_seq.horizon('ev_stream')` | %s | %s | %s |"
                  % (fmt(per_s(hor)), fmt(hor, 1), fmt(r, 3)))
        const = med("reader0", 4)
        if not math.isnan(const):
            md.append("| same page `AND seq < 9000000000000000000` (a constant bound) | %s | %s | %s |"
                      % (fmt(per_s(const)), fmt(const, 1), fmt(med_ratio("reader0", 0, "reader0", 4), 3)))
        gplain, ghor = med("reader0g", 0), med("reader0g", 1)
        if not math.isnan(gplain) and not math.isnan(ghor):
            md.append("| the 100-row page, `plan_cache_mode = force_generic_plan` | %s | %s | |"
                      % (fmt(per_s(gplain)), fmt(gplain, 1)))
            md.append("| the page with the horizon, `force_generic_plan` | %s | %s | %s |"
                      % (fmt(per_s(ghor)), fmt(ghor, 1),
                         fmt(med_ratio("reader0g", 0, "reader0g", 1), 3)))
        md.append("| `SELECT 1` | %s | %s | |" % (fmt(per_s(s1)), fmt(s1, 1)))
        md.append("| `horizon()`, 0 transactions committing (%s tracked entries) | %s | %s (net %s) | |"
                  % (t0, fmt(per_s(h0)), fmt(h0, 1), fmt(h0 - s1, 1)))
        md.append("| `SELECT 1`, while %s transactions are committing | %s | %s | |"
                  % (c64, fmt(per_s(s1b)), fmt(s1b, 1)))
        md.append("| `horizon()`, %s transactions committing (%s tracked entries) | %s | %s (net %s) | |"
                  % (c64, t64, fmt(per_s(h64)), fmt(h64, 1), fmt(h64 - s1b, 1)))
        md.append("")
        generic_plan = os.path.join(out, "page_plan_generic.txt")
        if os.path.exists(generic_plan):
            md.append("The reader's page as a prepared statement under "
                      "`plan_cache_mode = force_generic_plan` (`EXPLAIN EXECUTE`):")
            md.append("")
            md.append("```")
            md.extend(open(generic_plan).read().rstrip("\n").split("\n"))
            md.append("```")
            md.append("")
        if not math.isnan(r):
            checks.append(("page read with horizon >= 0.95 of without", "%.3f" % r, r >= 0.95))

    # figure 6
    if shmem:
        size, streams, tracked, backends = (int(x) for x in shmem)
        entries = max(tracked, backends + 1)
        md.append("## 6. Shared memory")
        md.append("")
        md.append("`pg_shmem_allocations` entry `stream_seq`: %s bytes for "
                  "stream_seq.max_streams = %d and %d entries per stream "
                  "(max(stream_seq.max_tracked_xacts = %d, MaxBackends + 1 = %d)): "
                  "**%s bytes per stream**, **%.1f bytes per tracked transaction**."
                  % (fmt(size), streams, entries, tracked, backends + 1,
                     fmt(size / streams), size / streams / entries))
        md.append("")

    # figure 7
    if cost:
        nrows = max(r["nrows"] for r in cost)
        md.append("## 7. Physical cost per row")
        md.append("")
        md.append("%s rows per measurement, written by 8 clients in 1- or 10-row "
                  "transactions (`pgbench -t`, synchronous_commit off) into an emptied table, "
                  "autovacuum off, after a CHECKPOINT. *WAL*: "
                  "`pg_current_wal_insert_lsn()` before and after the writes (commit records "
                  "and the sequences' WAL included; (d) without its ticker, so neither the "
                  "ticks' nor a consumer's WAL). *Dead*: `pg_stat_user_tables.n_dead_tup`. "
                  "*Heap*: the heap pages holding row versions, live or dead (pageinspect); "
                  "*indexes*: `pg_indexes_size`. *Table+index*: `pg_total_relation_size`, "
                  "before and after a plain VACUUM run after a CHECKPOINT; it also counts the "
                  "free space and visibility maps, TOAST, and the empty pages that "
                  "concurrent inserts add ahead (up to 20 per waiting backend), which later "
                  "rows fill and which VACUUM truncates when they end the table. *VACUUM WAL*: "
                  "that VACUUM's WAL, full-page images included. In parentheses: ratio to "
                  "(a) of the same shape." % fmt(nrows))
        md.append("")
        md.append("| rows/txn | contender | WAL bytes/row | dead tuples/row | heap bytes/row | "
                  "index bytes/row | table+index bytes/row | after VACUUM | "
                  "VACUUM WAL bytes/row |")
        md.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        byk = {(r["contender"], int(r["rows"])): r for r in cost}
        for rows in sorted(set(int(r["rows"]) for r in cost)):
            e, a = byk.get(("stream_pk", rows)), byk.get(("serial_pk", rows))
            if e and a:
                r = (e["wal"] / e["nrows"]) / (a["wal"] / a["nrows"])
                checks11.append(("same indexes, %d-row: WAL per row <= 1.4x of (a)" % rows,
                                 "%.2f (%s vs %s bytes)" % (r, per_row(e["wal"], e["nrows"]),
                                                            per_row(a["wal"], a["nrows"])),
                                 r <= 1.4))
                bound = 1.20 if rows == 1 else 1.05
                checks44.append(("same indexes, %d-row: WAL per row <= %.2fx of (a)"
                                 % (rows, bound),
                                 "%.2f (%s vs %s bytes)" % (r, per_row(e["wal"], e["nrows"]),
                                                            per_row(a["wal"], a["nrows"])),
                                 r <= bound))
                checks44.append(("same indexes, %d-row: no dead tuple per row" % rows,
                                 per_row(e["dead"], e["nrows"], 3), e["dead"] == 0))
        for rows in sorted(set(int(r["rows"]) for r in cost)):
            for k in ORDER:
                r = byk.get((k, rows))
                if not r:
                    continue
                b = byk.get((base_of(k), rows))
                n = r["nrows"]

                def cell(key):
                    v = sum(r[x] for x in key.split("+"))
                    if k == base_of(k) or not b:
                        return per_row(v, n)
                    bv = sum(b[x] for x in key.split("+"))
                    return "%s (%s)" % (per_row(v, n), ratio(v / n, bv / b["nrows"]))

                md.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    rows, NAMES[k], cell("wal"), per_row(r["dead"], n, 2), cell("heap_in_use"),
                    cell("index"), cell("table+index"), cell("table_vac+index_vac"),
                    per_row(r["vacuum_wal"], n)))
                if r["failed"] or r["inserted"] != n:
                    md.append("|   ! | %s: %s failed transactions, %s rows counted of %s "
                              "||||||||" % (NAMES[k], fmt(r["failed"]), fmt(r["inserted"]),
                                            fmt(n)))
        md.append("")

    # figure 8
    if vac:
        v0 = vac[0]
        md.append("## 8. Autovacuum work at a fixed rate")
        md.append("")
        md.append("%s s of 1-row transactions at %s per second (`pgbench --rate`, "
                  "synchronous_commit off) into an emptied table, one contender after the other "
                  "on an otherwise idle cluster, with autovacuum_naptime = 5s, the other "
                  "autovacuum settings at their defaults, and these table storage parameters: "
                  "%s. "
                  "Counted from the server log's `automatic vacuum of table` entries "
                  "(log_autovacuum_min_duration = 0) of the run, a vacuum still running at "
                  "its end included (*index pages scanned*: each index scan reads the whole "
                  "index, so its size times the entry's index scans); *autovacuum_count*, "
                  "*dead tuples left* and the size "
                  "from `pg_stat_user_tables` and `pg_total_relation_size` at the end. "
                  "*All WAL*: `pg_current_wal_insert_lsn()` difference over the run, "
                  "writes and autovacuum together."
                  % (fmt(v0["secs"]), fmt(v0["rate"]), meta.get("vacuum_reloptions", "none")))
        md.append("")
        md.append("| contender | rows | rows/s | autovacuum runs (log / autovacuum_count) | "
                  "index scans | heap pages scanned per 1,000 rows | pages removed per 1,000 rows "
                  "| tuples removed per 1,000 rows | index pages scanned per 1,000 rows | "
                  "autovacuum WAL bytes/row | all WAL bytes/row | dead tuples left | "
                  "table+index bytes/row at the end |")
        md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(vac, key=lambda r: ORDER.index(r["contender"])):
            k, n, lg = r["contender"], r["rows"], r["log"] or {}

            def per_k(key):
                return per_row(lg.get(key, math.nan), n / 1000.0, 1)

            md.append("| %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES[k], fmt(n), fmt(n / r["secs"] if r["secs"] else math.nan),
                fmt(lg.get("runs", math.nan)), fmt(r["autovacuum_count"]),
                fmt(lg.get("index_scans", math.nan)), per_k("pages_scanned"),
                per_k("pages_removed"), per_k("tuples_removed"), per_k("index_pages"),
                per_row(lg.get("wal_bytes", math.nan), n, 1), per_row(r["wal"], n),
                fmt(r["dead"]), per_row(r["size"], n)))
            if r["secs"] and n < 0.95 * r["rate"] * r["secs"]:
                md.append("|   ! | %s: the rate was not sustained (%s rows/s of %s) "
                          "||||||||||||" % (NAMES[k], fmt(n / r["secs"]), fmt(r["rate"])))
        md.append("")

    group_figure(out, md)

    if checks:
        md.append("## Targets of issue 5 for stream_seq")
        md.append("")
        md.append("| target | measured | met |")
        md.append("|---|---|---|")
        for name, value, ok in checks:
            md.append("| %s | %s | %s |" % (name, value, "yes" if ok else "**no**"))
        md.append("")

    if checks11:
        md.append("## Targets of issue 11 for stream_seq (same indexes, 8 clients)")
        md.append("")
        md.append("| target | measured | met |")
        md.append("|---|---|---|")
        for name, value, ok in checks11:
            md.append("| %s | %s | %s |" % (name, value, "yes" if ok else "**no**"))
        md.append("")

    if checks44:
        md.append("## Targets of issue 44 for stream_seq (same indexes)")
        md.append("")
        md.append("| target | measured | met |")
        md.append("|---|---|---|")
        for name, value, ok in checks44:
            md.append("| %s | %s | %s |" % (name, value, "yes" if ok else "**no**"))
        md.append("")

    if tput:
        md.append("![writer throughput versus clients](throughput.png)")
        md.append("")
        chart(out, tput, [k for k in present if any(key[0] == k for key in tput)], png_path)

    text = "\n".join(md)
    with open(md_path, "w") as fh:
        fh.write(text)
    print(text)


def chart(out, tput, present, png_path):
    panels = []
    for sc in ("on", "off"):
        for rows in (1, 10):
            clients = sorted(set(c for (_, s, r, c) in tput if s == sc and r == rows))
            if not clients:
                continue
            path = os.path.join(out, "tput_%s_%d.dat" % (sc, rows))
            with open(path, "w") as fh:
                fh.write("# clients " + " ".join(present) + "\n")
                for c in clients:
                    fh.write("%d %s\n" % (c, " ".join(
                        "%.1f" % median(list(tput.get((k, sc, rows, c), {}).values()))
                        for k in present)))
            panels.append((sc, rows, path))
    if not panels:
        return
    # the same-index shape: (a)'s and (e)'s colours, dashed
    colors = {"serial": "#777777", "xid8": "#1f77b4", "lock": "#d62728",
              "pgq": "#ff7f0e", "stream": "#2ca02c", "serial_pk": "#777777",
              "stream_pk": "#2ca02c"}
    gp = ["set terminal pngcairo size 1500,900 font 'sans,10' noenhanced",
          "set output '%s'" % png_path,
          "set multiplot layout 2,2 title 'Writer throughput vs clients (median transactions/s)'",
          "set logscale x 2", "set xtics (1, 2, 4, 8, 16, 32)", "set grid",
          "set key outside right top font ',9'", "set xlabel 'clients'", "set ylabel 'transactions/s'",
          "set yrange [0:*]"]
    for sc, rows, path in panels:
        gp.append("set title '%d-row transactions, synchronous_commit = %s'" % (rows, sc))
        plots = []
        for i, k in enumerate(present):
            plots.append("'%s' using 1:%d with linespoints lw 2 pt 7 lc rgb '%s' dt %d title '%s'"
                         % (path, i + 2, colors[k], 2 if k in SAME_INDEX else 1, NAMES[k]))
        gp.append("plot " + ", ".join(plots))
    gp.append("unset multiplot")
    script = os.path.join(out, "throughput.gp")
    with open(script, "w") as fh:
        fh.write("\n".join(gp) + "\n")
    subprocess.run(["gnuplot", script], check=True)


if __name__ == "__main__":
    main()
