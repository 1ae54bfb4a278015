"""The Markdown report, the SVG plots and docs/benchmarks.md, from results/*.json.

write_all(datasets) takes {experiment: the JSON written by bench/run} and writes
results/<date>-<experiment>.svg, results/<date>-report.md (or -<experiment>.md for
one experiment) and, for a full run, docs/benchmarks.md.  render_report() and
open_gaps() are pure functions of the data, so they are unit-tested.
"""
import json
import re
import os
import statistics
from pathlib import Path

import vireobench as vb
from vireobench import fmt, label

DOCS = vb.REPO / "docs" / "benchmarks.md"
ORDER = ["E1", "E2", "E3", "E3-seed", "E3-pool", "E4", "E5", "M", "proxy", "stream", "cache", "gzip",
         "routes",
         "tls", "modules"]
NOT_PEERS = {"vireo", "floor", "relay"}

PAPERS = {
    "E1": "000_9171ad52abe9534a.txt (Apache vs nginx I/O, table 1)",
    "E2": "001_80da0c0936cbfb6d.txt (Apache prefork / nginx + php-fpm / nginx → Apache)",
    "E3": "003_606d7d291432ff5d.txt (21 KB, 2 B, 92 KB, phpinfo(); req/s and memory)",
    "E3-seed": "002_5b0f10aa4f0e31a6.txt's tuned nginx.conf on 003_606d7d291432ff5d.txt's files",
    "E3-pool": "003_606d7d291432ff5d.txt (phpinfo()) with a pooled FastCGI upstream",
    "E4": "004_edfdbb5a0d033307.txt (lighttpd vs nginx, ab -n 100000 -c 1000)",
    "E5": "002_5b0f10aa4f0e31a6.txt (the tuned nginx at 904k req/s)",
    "M": "DESIGN.md §3 (idle keep-alive connections)",
    "proxy": "issue 6 (reverse proxy to a fast backend with keep-alive: CPU µs per request ≤ 0.7× nginx's)",
    "stream": "issue 20 (TCP proxy of 1 KB echo exchanges and of a 100 MB transfer: server CPU "
              "per exchange and per MB no more than nginx's stream module's and HAProxy's)",
    "cache": "issue 19 (proxy_cache HITs within 1.1× of the same server's static file and ≤ 0.7× "
             "nginx's HIT; a MISS storm on one key sends one request to the origin)",
    "gzip": "issue 7 (92 KB JS, gzip 5, c=50: CPU µs per request ≤ 0.8× nginx's, ≤ 0.2× with a variant cache)",
    "routes": "issue 4 (routing must not tax the hot path: 30 locations within 5 % of one)",
    "tls": "issue 9 (TLS 1.3 and HTTP/2: vireo's CPU µs per request ≤ nginx's)",
    "modules": "issue (sub_filter and auth_request: CPU µs per request no more than nginx's)",
}

FLOOR_NOTE = ("The C epoll floor (bench/floor/floor.c, static files only) answers every "
              "request with the file's head (60 bytes) and the file, as E5 does: where the load "
              "generator, not the server, sets the requests a second, the floor's figure shows "
              "it (the open-gaps table at the top sets it beside vireo's).")

METHOD = {
    "E1": lambda o: (f"h2load --h1 -t1 -c<clients>, keep-alive: the clients connect during a "
                     f"warm-up of 0.3 s + 1 s per 5,000 clients, then requests are counted for "
                     f"{o['duration']:g} s, or longer where the clients need it: at least three "
                     "turns of every client (clients ÷ the previous point's req/s, at most 30 s), "
                     "so that p99 is that of a steady state and not of the order in which a queue "
                     "drains (server CPU is read at h2load's own phase marks). One server "
                     f"start per (run, workload), the points in rising order, {o['runs']} runs, "
                     "servers interleaved. The paper ran webbench for 30 s per point, a new "
                     "connection per request. Clients: "
                     f"{', '.join(f'{c:,}' for c in o['points'])}. \"Failed\" is h2load's failed "
                     "requests (connection errors, timeouts and HTTP status ≥ 400); requests still "
                     "in flight at the end are not counted either way. wrk is not used here: one "
                     "wrk thread with 15,000 connections completes no request in a short run on "
                     "this machine (its connects all land in the listen-queue overflow at once). "
                     + FLOOR_NOTE),
    "E2": lambda o: (f"{o['e2_conns']:,} keep-alive connections ramped up over {o['e2_ramp']} s, "
                     f"each sending one request every {o['e2_interval']:g} s, {o['e2_duration']} s "
                     f"in all (the paper's JMeter plan); oha cannot ramp, so {o['e2_steps']} oha "
                     f"processes start {o['e2_ramp'] / o['e2_steps']:g} s apart, each with "
                     f"{o['e2_conns'] // o['e2_steps']} connections at "
                     f"{o['e2_conns'] / o['e2_steps'] / o['e2_interval']:g} req/s. Request timeout "
                     f"{o['e2_timeout']} s. PHP route: usleep(500 ms). php-fpm pm.max_children 500 "
                     "and Apache prefork MaxRequestWorkers 500, as in the paper. "
                     f"{o['runs']} run(s): each is a {o['e2_duration']} s time series."),
    "E3": lambda o: (f"wrk -t1 -c{o['connections']} -d{o['duration']:g}s --latency, keep-alive, "
                     f"1 s warm-up, {o['runs']} runs, servers interleaved; phpinfo() through "
                     "php-fpm (pm static, 20 children, pinned to CPU 0 with the server). "
                     + FLOOR_NOTE),
    "E3-seed": lambda o: (
        f"E3's load (wrk -t1 -c{o['connections']} -d{o['duration']:g}s --latency, keep-alive, 1 s "
        f"warm-up, {o['runs']} runs, servers interleaved) with vireo and nginx both on "
        "`bench/conf/tuned.conf`, the tuned configuration of paper 002 (as E5: open_file_cache "
        "max=200000 inactive=20s, open_file_cache_valid 30s, open_file_cache_min_uses 2, "
        "open_file_cache_errors on; sendfile, tcp_nopush, tcp_nodelay on; keepalive_requests "
        "100000; gzip on with gzip_min_length 10240; access_log off; one worker). wrk sends no "
        "Accept-Encoding, so the first three rows are served as they are; the \"gzip\" rows "
        "send `Accept-Encoding: gzip`, and the 21 KB and 92 KB files (over gzip_min_length) "
        "come back gzipped (level 1, nginx's default), checked with a GET first. vireo keeps "
        "the gzipped bytes of a hot file (`compress_cache`, 16 MB per worker by default) where "
        "nginx compresses every response. \"vireo ÷ best peer\": vireo's median over the best "
        "peer's (CPU below 1 and req/s above 1 favour vireo)."),
    "E3-pool": lambda o: (
        f"E3's phpinfo() load (wrk -t1 -c{o['connections']} -d{o['duration']:g}s, keep-alive, "
        f"1 s warm-up, {o['runs']} runs) with vireo and nginx both on "
        "`bench/conf/php-pool.conf`: nginx.conf's PHP location with `fastcgi_pass php; "
        "fastcgi_keep_conn on;` and `upstream php { server …; keepalive 8; }`, so connections "
        "to php-fpm (pm static, 20 children) are reused instead of opened per request; "
        "E3's phpinfo() rows are the same load without the pool. The CPU column is the web "
        "server's own (php-fpm apart)."),
    "proxy": lambda o: (
        f"wrk -t1 -c{o['connections']} -d{o['duration']:g}s on /proxy/2b.txt and /proxy/21k.txt, "
        "keep-alive, 1 s warm-up, each front server proxying to the same h2o (one thread, "
        "pinned with it) over kept-alive connections: vireo (`vireo-proxy.conf`) and nginx "
        "(`nginx.conf`) with `upstream { keepalive 64; }`, proxy_http_version 1.1"
        + ("; HAProxy (`haproxy.cfg`) with nbthread 1, `http-reuse always` (idle backend "
           "connections shared by all clients), no logs" if "haproxy" in o["servers"] else "")
        + ". The CPU column is the front server's; h2o's is beside it. "
        f"{o['runs']} runs, servers interleaved."),
    "stream": lambda o: (
        f"bench/echo/echo.c (C, one epoll loop) on both ends, the client pinned to CPU 1: "
        f"{o['connections']} connections each sending 1 KB and reading the 1 KB echo back, "
        f"again and again for {o['duration']:g} s (after a 1 s check), through the front to "
        "the echo backend; then, on the front's second address, transfers of 100 MB (2^20-byte "
        f"MB) from the byte source, one connection after another for {o['duration']:g} s. The "
        "backends run on CPU 0 with the front and are started once for the whole experiment. "
        "vireo (`vireo-stream.conf`) and nginx with Debian's libnginx-mod-stream "
        "(`nginx-stream.conf`, `load_module`) on the same directives, stream defaults "
        "(proxy_buffer_size 16k); HAProxy (`haproxy-stream.cfg`) in mode tcp with nbthread 1, "
        "its defaults (no splicing). The CPU column is the front server's per exchange or per "
        f"MB; the backend's is beside it. {o['runs']} runs, servers interleaved, the order "
        "rotating; the ratios are taken within each run."),
    "cache": lambda o: (
        f"wrk -t1 -c{o['connections']} -d{o['duration']:g}s, keep-alive, 1 s warm-up (which also "
        "fills the cache), on each file served statically and as a proxy_cache HIT "
        "(`/cache/`: proxy_cache_path levels=1:2, proxy_cache_valid 200 1h) by the same server, "
        "vireo (`vireo-proxy.conf`) and nginx (`nginx.conf`), in front of the proxy experiment's "
        "h2o; then ab -n 1000 -c 1000 on one cold key of `/storm/` (proxy_cache_lock on), "
        "counting from the front's log the requests that reached h2o. "
        f"{o['runs']} runs, servers interleaved."),
    "E4": lambda o: (f"ab -r -t {o['ab_time']} -n <N> -c {o['ab_c']} without keep-alive (as in the "
                     f"paper): N = {o['ab_n']:,} for the 21 KB page and {o['ab_n_php']:,} for "
                     f"phpinfo(), each run stopped after {o['ab_time']} s (so a server slower than "
                     f"N ÷ {o['ab_time']} req/s completes fewer: see \"Complete requests\"); 1 s "
                     f"wrk warm-up; {o['runs']} runs."),
    "E5": lambda o: (f"the 2 B and 21 KB files, wrk -t1 -c{o['connections']} -d{o['duration']:g}s, "
                     "bench/conf/tuned.conf (the paper's directives with one worker and "
                     "worker_rlimit_nofile 20000; no sysctl changes) for nginx and vireo; "
                     "bench/floor/floor.c is a ~110-line C epoll loop with a fixed response, "
                     "for 21 KB the file's head with MSG_MORE and then sendfile(), the kernel "
                     f"work vireo does; {o['runs']} runs."),
    "M": lambda o: (f"{o['idle_conns']:,} connections, each sends one GET of the 2 B file, reads "
                    "the response and stays open; RSS of all the server's processes before and 1 s "
                    f"after; {o['runs']} runs."),
    "routes": lambda o: (f"E3's load (wrk -t1 -c{o['connections']} -d{o['duration']:g}s, keep-alive, "
                         "1 s warm-up) on the 21 KB and 2 B files, each server started with E3's "
                         "config (nginx's without its proxy and PHP locations, so that both route "
                         "alike) and with the same config plus `bench/conf/routes.inc`: 30 "
                         "locations (5 exact, 10 prefix with try_files and a named fallback, 4 "
                         "`^~`, 10 regexes, 4 with captures), the files served only by the last "
                         "regex. Before measuring, GETs check the 30-location config routes as "
                         "nginx does (named fallback, captures). Servers and the two configs "
                         f"interleaved, the order rotating, {o['runs']} runs; the ratio is taken "
                         "within each run."),
    "tls": lambda o: (f"h2load -t1 -c{o.get('connections', 50)} (`--h1` for HTTP/1.1, `-m"
                      f"{o.get('h2_streams', 10)}` streams per connection for HTTP/2) on the 21 KB "
                      "file over TLS 1.3 (`ssl_protocols TLSv1.3`, a self-signed ECDSA P-256 "
                      "certificate made by openssl for the run), keep-alive: the handshakes happen "
                      f"in a 1 s warm-up, then requests are counted for {o['duration']:g} s (server "
                      "CPU read at h2load's own phase marks). HTTP/3: `bench/h3load` with the same "
                      "options, h2load's closed loop over QUIC (one request at a time per "
                      "connection; Debian's h2load has no QUIC), on a third port (`listen … quic`, "
                      "`quic_gso on` for vireo), where the server has HTTP/3. Configs: "
                      "`bench/conf/vireo-tls.conf` and `nginx-tls.conf`, the same directives: "
                      "`listen … ssl` and `listen … ssl http2` on a second port" + (
                          "; `Caddyfile-tls` (the same certificate, TLS 1.3 only, h2 and "
                          "http/1.1 by ALPN on the first two ports, HTTP/3 added on the third)"
                          if "caddy" in o["servers"] else "") + ". A curl GET checks each TCP "
                      "address first (TLS 1.3, the HTTP version by ALPN, the file's bytes; h3load "
                      "fails a body whose length is not its Content-Length), and a run whose load "
                      "generator negotiated "
                      "anything else is an error. h2load offers TLS_AES_128_GCM_SHA256 first; what "
                      "each server chose is in the \"negotiated\" column. "
                      f"{o['runs']} runs, servers interleaved; "
                      "the ratio to nginx is taken within each run."),
    "modules": lambda o: (
        f"wrk -t1 -c{o['connections']} -d{o['duration']:g}s, keep-alive, 1 s warm-up, vireo and "
        "nginx on E3's config (nginx's without its proxy and PHP locations) plus two locations: "
        "`/sub/` (alias of the docroot) with `sub_filter 'http://example.com/' "
        "'https://www.example.org/'; sub_filter_once off;` on a 92 KB HTML page holding 653 "
        "such links, and `/auth/` with `auth_request /_auth;`, `location = /_auth { internal; "
        "return 204; }`, before the 2 B file; the same files without the module beside them. "
        "A GET checks each body first (the page with every link rewritten). "
        f"{o['runs']} runs, servers interleaved, the order rotating; the ratio to nginx is "
        "taken within each run."),
}


# ---------------------------------------------------------------- gaps

def open_gaps(datasets):
    """Every figure where vireo's median is worse than the best peer's, and every
    row vireo could not be measured on.  Returns (gaps, not_measured); a gap is
    'clear' when vireo's whole min–max range is worse than the peer's."""
    import experiments
    gaps, missing = [], []
    for name in ORDER + ["quick", "idle"]:
        data = datasets.get(name)
        exp = experiments.EXPERIMENTS.get(name)
        if not data or not exp:
            continue
        rows = data["summary"]
        for group in dict.fromkeys(tuple(r.get(k) for k in exp.keys) for r in rows):
            members = [r for r in rows if tuple(r.get(k) for k in exp.keys) == group]
            where = ", ".join(describe(k, v) for k, v in zip(exp.keys, group))
            mine = next((r for r in members if r["server"] == "vireo"), None)
            if mine is None:
                continue
            if mine.get("note"):
                missing.append({"experiment": name, "where": where or "–", "why": mine["note"]})
                continue
            peers = [r for r in members if r["server"] not in NOT_PEERS and not r.get("note")]
            for g in exp.gaps:
                v = mine.get(g.metric)
                vals = [(r[g.metric], r) for r in peers if r.get(g.metric) is not None
                        and comparable(g.metric, mine, r)]
                if v is None or not vals:
                    continue
                best, peer = max(vals, key=lambda x: x[0]) if g.higher_better else \
                    min(vals, key=lambda x: x[0])
                if (v < best) if g.higher_better else (v > best):
                    vlo, vhi = mine.get(g.lo, v) if g.lo else v, mine.get(g.hi, v) if g.hi else v
                    plo, phi = peer.get(g.lo, best) if g.lo else best, \
                        peer.get(g.hi, best) if g.hi else best
                    clear = (vhi < plo) if g.higher_better else (vlo > phi)
                    if mine.get("runs", 1) < 2:
                        clear = None
                    floor = next((r.get(g.metric) for r in members if r["server"] == "floor"),
                                 None)
                    gaps.append({"experiment": name, "where": where or "–", "metric": g.name,
                                 "vireo": v, "peer": peer["server"], "peer_value": best,
                                 "ratio": v / best if best else None, "spec": g.spec,
                                 "clear": clear, "floor": floor})
    return gaps, missing


FAILURES = ("errors", "failed_real")


def comparable(metric, mine, peer):
    """A latency, or the CPU spent per request, is compared only with a peer that failed
    no more requests than vireo at that point: a server that drops or refuses clients
    answers the ones it keeps sooner, so its latency is of a lighter load, and an error
    it answers at once costs it less than a reply (E1's phpinfo() at 15,000 clients:
    a peer that answered none of them spent 13 µs per "request")."""
    if not metric.endswith("_ms") and metric != "cpu_us_per_req":
        return True
    return all((peer.get(k) or 0) <= (mine.get(k) or 0) for k in FAILURES)


def describe(key, value):
    if key in ("path", "file"):
        import experiments
        return experiments.SIZES.get(value, value)
    if key == "clients":
        return f"c={value:,}"
    if key == "config":
        import experiments
        return experiments.ROUTES_LABELS.get(value, value)
    if key == "proto":
        import experiments
        return experiments.TLS_LABELS.get(value, value)
    if key == "workload":
        import experiments
        return experiments.STREAM_WORKLOADS.get(value, value)
    if key == "kind":
        return {"php": "via php-fpm", "proxy": "as reverse proxy", "modphp": "mod_php"}.get(value, value)
    return str(value)


def gaps_markdown(gaps, missing):
    """Clear gaps (or single-run ones) in a table; those inside the run-to-run spread
    folded per experiment, workload and metric, so a noisy sweep stays one line."""
    out = []
    clear = [g for g in gaps if g["clear"] is not False]
    noisy = [g for g in gaps if g["clear"] is False]
    if clear:
        out.append("Beyond the run-to-run spread (the min–max ranges of vireo and the best peer "
                   "are apart), or measured once; where the experiment runs the C epoll floor, "
                   "its figure in the same run:\n\n"
                   "| experiment | where | metric | vireo | best peer | vireo ÷ peer | runs | "
                   "C floor |\n|---|---|---|---|---|---|---|---|\n")
        for g in clear:
            out.append(f"| {g['experiment']} | {g['where']} | {g['metric']} | "
                       f"{fmt(g['vireo'], g['spec'])} | {label(g['peer'])} {fmt(g['peer_value'], g['spec'])} | "
                       f"{fmt(g['ratio'], '.2f')}{'×' if g['ratio'] is not None else ''} | "
                       f"{'one' if g['clear'] is None else 'apart'} | "
                       f"{fmt(g.get('floor'), g['spec'])} |\n")
    if noisy:
        out.append("\nWorse by the median but inside the run-to-run spread (may be noise; "
                   "vireo ÷ best peer):\n\n| experiment | where | metric | points |\n|---|---|---|---|\n")
        groups = {}
        for g in noisy:
            where, _, point = g["where"].partition(", ")
            groups.setdefault((g["experiment"], where, g["metric"]), []).append(
                f"{point + ' ' if point else ''}{fmt(g['vireo'], g['spec'])} vs "
                f"{label(g['peer'])} {fmt(g['peer_value'], g['spec'])}"
                + (f" ({g['ratio']:.2f}×)" if g["ratio"] else ""))
        for (exp, where, metric), points in groups.items():
            out.append(f"| {exp} | {where} | {metric} | {'; '.join(points)} |\n")
    if not gaps:
        out.append("No measured vireo figure is worse than a peer's.\n")
    if missing:
        out.append("\nNot measured yet (vireo cannot serve these; the peers' figures are real):\n\n")
        seen = {}
        for m in missing:  # one line per experiment and reason; E1's client counts folded
            seen.setdefault((m["experiment"], m["why"]), []).append(m["where"].split(", c=")[0])
        for (exp, why), where in seen.items():
            out.append(f"- {exp} ({', '.join(dict.fromkeys(where))}): {why}\n")
    return "".join(out)


# ---------------------------------------------------------------- plots

def _plt():
    vb.ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams.update({"svg.hashsalt": "vireo-bench", "font.size": 9,
                                "axes.grid": True, "grid.alpha": 0.3})
    return plt


COLORS = {"vireo": "#d62728", "nginx": "#2ca02c", "lighttpd": "#1f77b4", "h2o": "#9467bd",
          "apache": "#8c564b", "apache-prefork": "#e377c2", "floor": "#7f7f7f",
          "caddy": "#17becf", "haproxy": "#bcbd22"}


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    import matplotlib.pyplot as plt
    plt.close(fig)


def _servers(rows):
    return list(dict.fromkeys(r["server"] for r in rows))


def plot_e1(data, path):
    plt = _plt()
    rows = data["summary"]
    paths = list(dict.fromkeys(r["path"] for r in rows))
    fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4), squeeze=False)
    for ax, p in zip(axes[0], paths):
        for s in _servers(rows):
            pts = [r for r in rows if r["path"] == p and r["server"] == s and not r.get("note")]
            if not pts:
                continue
            x = [r["clients"] for r in pts]
            y = [r["ok_rps"] for r in pts]
            err = [[r["ok_rps"] - r["ok_rps_min"] for r in pts], [r["ok_rps_max"] - r["ok_rps"] for r in pts]]
            ax.errorbar(x, y, yerr=err, marker="o", ms=3, capsize=2, label=label(s),
                        color=COLORS.get(s))
        missing = [label(s) for s in _servers(rows)
                   if all(r.get("note") for r in rows if r["path"] == p and r["server"] == s)]
        title = {"21k.txt": "21 KB static file", "info.php": "phpinfo() via FastCGI"}.get(p, p)
        ax.set_title(title + (f"\n(not measured: {', '.join(missing)})" if missing else ""))
        ax.set_xscale("log")
        pts = sorted({r["clients"] for r in rows if r["path"] == p})
        ax.set_xticks(pts)
        ax.set_xticklabels([f"{c / 1000:g}k" if c >= 1000 else str(c) for c in pts], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("successful requests/s (median, min–max)")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle("E1: requests/s vs clients (after paper 000, figure 4)")
    _save(fig, path)


def plot_e2(data, path):
    plt = _plt()
    rows = [r for r in data["summary"] if r.get("series")]
    fig, ax = plt.subplots(figsize=(8, 4))
    offered = None
    for r in rows:
        ok = r["series"]["ok_per_s"]
        offered = offered or r["series"]["offered_per_s"]
        ax.plot(range(len(ok)), ok, label=r["label"], color=COLORS.get(r["server"]) if
                r["kind"] != "proxy" else None, lw=1.2)
    if offered:
        ax.plot(range(len(offered)), offered, "k--", lw=0.8, label="offered load")
    missing = [r["label"] for r in data["summary"] if r.get("note")]
    ax.set_title("E2: successful responses per second (after paper 001, figures 4-4 to 4-9)"
                 + (f"\nnot measured yet: {', '.join(missing)}" if missing else ""))
    ax.set_xlabel("seconds since the start")
    ax.set_ylabel("2xx responses / s")
    ax.legend(fontsize=8)
    _save(fig, path)


def _bars(ax, groups, servers, value, err=None, ylabel="", log=False):
    width = 0.8 / max(1, len(servers))
    for i, s in enumerate(servers):
        xs, ys, es = [], [], [[], []]
        for j, g in enumerate(groups):
            r = value(g, s)
            if r is None:
                continue
            xs.append(j + (i - (len(servers) - 1) / 2) * width)
            ys.append(r[0])
            es[0].append(r[0] - r[1])
            es[1].append(r[2] - r[0])
        ax.bar(xs, ys, width, yerr=es if err else None, capsize=2, label=label(s),
               color=COLORS.get(s))
    ax.set_xticks(range(len(groups)))
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")


def plot_e3(data, path):
    plt = _plt()
    rows = data["summary"]
    files = list(dict.fromkeys(r["file"] for r in rows))
    static = [f for f in files if not f.endswith(".php")]
    php = [f for f in files if f.endswith(".php")]
    servers = [s for s in _servers(rows) if any(not r.get("note") for r in rows if r["server"] == s)]

    def get(metric, lo, hi):
        def value(f, s):
            r = next((x for x in rows if x["file"] == f and x["server"] == s and not x.get("note")), None)
            return (r[metric], r.get(lo) or r[metric], r.get(hi) or r[metric]) \
                if r and r.get(metric) is not None else None
        return value
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [(axes[0][0], static, "rps", "rps_min", "rps_max", "requests/s", "static files: requests/s (wrk -c50)"),
              (axes[0][1], static, "cpu_us", "cpu_min", "cpu_max", "server CPU µs per request",
               "static files: server CPU per request (lower is better)")]
    if php:
        panels.append((axes[1][0], php, "cpu_us", "cpu_min", "cpu_max", "server CPU µs per request",
                       "phpinfo(): web server CPU per request (php-fpm apart)"))
    else:
        axes[1][0].axis("off")
    panels.append((axes[1][1], static[:1], "rss_mb", "rss_min", "rss_max", "RSS MB",
                   "server RSS at the end of the 2 B run"))
    for ax, groups, metric, lo, hi, ylabel, title in panels:
        _bars(ax, groups, servers, get(metric, lo, hi), True, ylabel)
        ax.set_xticklabels([vb_size(f) for f in groups])
        ax.set_title(title)
    axes[0][0].legend(fontsize=8)
    missing = sorted({f"{label(r['server'])}: {r['note'].split(' — ')[0]}" for r in rows if r.get("note")})
    fig.suptitle("E3: static files and phpinfo() (after paper 003)"
                 + ("\n" + "; ".join(missing) if missing else ""), fontsize=9)
    _save(fig, path)


def vb_size(f):
    return describe("path", f)


def plot_e4(data, path):
    plt = _plt()
    import experiments as ex
    rows = data["summary"]
    paths = list(dict.fromkeys(r["path"] for r in rows))
    fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4), squeeze=False)
    pcts = [int(p) for p in ex.PCTS]
    for ax, p in zip(axes[0], paths):
        for r in rows:
            if r["path"] != p or r.get("note"):
                continue
            ys = [r.get(f"pct_{q}") for q in ex.PCTS]
            ax.plot(pcts, ys, marker="o", ms=3, label=label(r["server"]), color=COLORS.get(r["server"]))
        if p == ex.PHPINFO:
            for name, fig_ in ex.PAPER_004.items():
                ax.plot(pcts, fig_["pct"], ls="--", lw=0.8, label=f"paper 004: {name}")
        ax.set_yscale("log")
        ax.set_xlabel("percentage of requests served within")
        ax.set_ylabel("ms (log)")
        ax.set_title(f"{describe('path', p)}: ab -c 1000, no keep-alive")
        ax.legend(fontsize=7)
    fig.suptitle("E4: ab's latency percentiles (after paper 004)")
    _save(fig, path)


def plot_e5(data, path):
    plt = _plt()
    rows = [r for r in data["summary"] if not r.get("note")]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(rows))
    ax.bar(xs, [r["cpu_us_per_req"] for r in rows],
           yerr=[[r["cpu_us_per_req"] - r["cpu_us_per_req_min"] for r in rows],
                 [r["cpu_us_per_req_max"] - r["cpu_us_per_req"] for r in rows]],
           capsize=3, color=[COLORS.get(r["server"]) for r in rows])
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['cpu_us_per_req']:.2f} µs\n≈{r['ceiling_rps'] / 1000:,.0f}k/s",
                    (x, r["cpu_us_per_req"]), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 4), textcoords="offset points")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{label(r['server'])}\n{describe('path', r.get('path'))}" for r in rows],
                       fontsize=7)
    ax.set_ylabel("server CPU µs per request")
    ax.set_ylim(top=max(r["cpu_us_per_req_max"] for r in rows) * 1.35)
    ax.set_title("E5: 2 B and 21 KB files, tuned config, one pinned worker")
    _save(fig, path)


def plot_m(data, path):
    plt = _plt()
    rows = [r for r in data["summary"] if not r.get("note") and r.get("mb_per_10k") is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(rows))
    ax.bar(xs, [r["mb_per_10k"] for r in rows],
           yerr=[[r["mb_per_10k"] - r["mb_per_10k_min"] for r in rows],
                 [r["mb_per_10k_max"] - r["mb_per_10k"] for r in rows]],
           capsize=3, color=[COLORS.get(r["server"]) for r in rows])
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['mb_per_10k']:.1f}", (x, r["mb_per_10k"]), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([label(r["server"]) for r in rows])
    ax.set_ylabel("RSS growth, MB per 10,000 idle connections")
    ax.set_yscale("log")
    ax.set_title("M: memory per 10,000 idle keep-alive connections")
    _save(fig, path)


PLOTS = {"E1": plot_e1, "E2": plot_e2, "E3": plot_e3, "E4": plot_e4, "E5": plot_e5, "M": plot_m,
         "quick": plot_e3, "idle": plot_m}


# ---------------------------------------------------------------- report

def machine_markdown(m):
    v = m.get("versions", {})
    lines = [f"- {m.get('nproc')} cores ({m.get('cpu')}), {m.get('mem_gib')} GiB, {m.get('os')}, "
             f"kernel {m.get('kernel')}; open files {m.get('nofile', ['?'])[0]}, somaxconn "
             f"{m.get('somaxconn')}; load average at the start {', '.join(f'{x:.1f}' for x in m.get('loadavg', []))}"]
    for k, val in v.items():
        if k == "vireo":
            # `vireo -v` answers in nginx's words ("nginx version: vireo/…").
            val = val.replace("nginx version: ", "")
        lines.append(f"- {label(k)}: {val}")
    return "\n".join(lines) + "\n"


def merge_machines(datasets):
    m = {}
    for d in datasets.values():
        mm = d.get("machine", {})
        for k, val in mm.items():
            if k == "versions":
                m.setdefault("versions", {}).update(val)
            else:
                m.setdefault(k, val)
    return m


NOISE = (
    "**Reading the figures.** The machine is a shared 2-vCPU VM: other engineers' builds and "
    "tests run at the same time. **CPU µs per request** counts only the server's own CPU "
    "(utime+stime of its processes, and of children they reaped, from `/proc`), so it holds up on "
    "a busy machine; **requests/s and p99 are noisy** (they depend on what CPU the other jobs left "
    "and on the load generator, which has one core) and swing by up to 2× between runs. Every "
    "server is pinned to CPU 0 (with php-fpm or its backend), the load generator to CPU 1; "
    "servers are interleaved (the order rotating from run to run) and each point repeated; "
    "tables show the median and, in brackets, "
    "the min–max over runs. Compare ratios within one run, not figures across days or with the "
    "papers (their hardware, networks and versions differ).\n\n"
    "**Open files: 20,000 per process (hard limit).** It caps: the load generator (wrk holds all "
    "its connections in one process: 15,000 clients fit, ~19,900 would be the ceiling); each "
    "server's single worker (client connections + upstream/FastCGI connections + files ≤ 20,000, "
    "so at 15,000 clients a proxy or FastCGI server cannot have every request in flight at once, "
    "and nginx's `worker_connections 19000` counts both sides); lighttpd's own `server.max-fds "
    "20000` / `max-connections 9999` (clients above 9,999 wait in the listen queue, "
    "somaxconn 4,096); E5's `worker_rlimit_nofile` (the paper's 200,000 becomes 20,000). "
    "M's 10,000 and E2's 5,000 (+500 upstream) connections fit.\n")


CAUSES = vb.REPO / "bench" / "causes.md"


def causes(path=CAUSES):
    """{experiment: Markdown}: the causes of gaps measured and what was done about
    them, written by hand in bench/causes.md under a `## NAME` heading per experiment."""
    found, name = {}, None
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            name = line[3:].strip()
            found[name] = ""
        elif name:
            found[name] += line
    return {k: v.strip() + "\n" for k, v in found.items() if v.strip()}


def section(name, data, link, notes=None):
    import experiments as ex
    exp = ex.EXPERIMENTS[name]
    o = data["options"]
    source = PAPERS.get(name, "–")
    out = [f"## {exp.title}\n\n",
           f"{'Asked by' if source.startswith('issue') else 'Paper'}: {source}. Command: `{data['command']}` on {data['date'][:16].replace('T', ' ')}"
           f" ({data.get('elapsed_s', 0) / 60:.1f} min). Raw: `bench/results/{data['date'][:10]}-{name}.json`.\n\n"]
    vireo = data.get("machine", {}).get("versions", {}).get("vireo")
    if vireo and "vireo" in o.get("servers", []):
        out.append(f"vireo: {vireo.replace('nginx version: ', '').replace('vireo version: ', '')}. ")
    if name in METHOD:
        out.append("Method: " + METHOD[name](o))
    out[-1] = out[-1].rstrip() + "\n\n"
    out.append(exp.markdown(data["summary"], o["servers"]))
    if link:
        out.append(f"\n![{name}]({link})\n")
    if notes:
        out.append("\n**Causes measured, and what was done** (bench/causes.md):\n\n" + notes)
    return "".join(out) + "\n"


# DESIGN.md §3 targets; the absolute µs figures there were measured on a quieter day, so
# they are checked as ratios to nginx measured in the same run.
TARGETS_CPU = [("2b.txt", 4.2, 6.2), ("21k.txt", 5.0, 6.6), ("92k.txt", 9.0, 11.9)]


def met_aim(bar, aim):
    """A target with a bar that must be met and a harder aim."""
    return "met" if bar and aim else "met; aim not met" if bar else "not met"


def targets_markdown(datasets):
    """vireo against the targets of DESIGN.md §3, where this run measured them."""
    lines = []
    e3 = datasets.get("E3")
    if e3:
        rows = e3["summary"]
        for f, target, nginx_then in TARGETS_CPU:
            v = next((r for r in rows if r["file"] == f and r["server"] == "vireo"), None)
            n = next((r for r in rows if r["file"] == f and r["server"] == "nginx"), None)
            if v and n and v.get("cpu_us") and n.get("cpu_us"):
                ratio, want = v["cpu_us"] / n["cpu_us"], target / nginx_then
                lines.append(f"| {describe('path', f)}: CPU µs/req ≤ nginx's (issue 2); aim ≤ {target} "
                             f"(≈{want:.2f}× nginx) | "
                             f"{v['cpu_us']:.2f} µs = {ratio:.2f}× nginx ({n['cpu_us']:.2f}) | "
                             f"{met_aim(ratio <= 1, ratio <= want)} |")
    m = datasets.get("M")
    if m:
        v = next((r for r in m["summary"] if r["server"] == "vireo" and r.get("mb_per_10k")), None)
        if v:
            lines.append(f"| idle memory ≤ 6 MB per 10k connections (issue 2); aim ≤ 5 MB (DESIGN.md) | "
                         f"{v['mb_per_10k']:.1f} MB | "
                         f"{met_aim(v['mb_per_10k'] <= 6, v['mb_per_10k'] <= 5)} |")
    e1 = datasets.get("E1")
    if e1:
        v = next((r for r in e1["summary"] if r["server"] == "vireo" and r.get("clients") == 15000
                  and r.get("path") == "21k.txt" and not r.get("note")), None)
        if v:
            lines.append(f"| 15,000 concurrent clients with zero failures (21 KB) | "
                         f"{v['errors']:,.0f} failed (median of runs) | "
                         f"{'met' if not v['errors'] else 'not met'} |")
    fcgi = None
    if e3:
        v = next((r for r in e3["summary"] if r["file"] == "info.php" and r["server"] == "vireo"
                  and r.get("cpu_us")), None)
        n = next((r for r in e3["summary"] if r["file"] == "info.php" and r["server"] == "nginx"
                  and r.get("cpu_us")), None)
        if v and n:
            fcgi = (f"E3 phpinfo(): {v['cpu_us']:.0f} µs = {v['cpu_us'] / n['cpu_us']:.2f}× nginx "
                    f"({n['cpu_us']:.0f})", v["cpu_us"] / n["cpu_us"] <= 0.5)
    if e3:
        lines.append(f"| FastCGI: front-server CPU ≤ 0.5× nginx's | {fcgi[0]} | "
                     f"{'met' if fcgi[1] else 'not met'} |" if fcgi else
                     "| FastCGI: front-server CPU ≤ 0.5× nginx's | – | not measured "
                     "(needs FastCGI, issue 5) |")
    lines += pool_target(datasets.get("E3-pool"))
    lines += e2_proxy_target(datasets.get("E2")) + proxy_targets(datasets.get("proxy"))
    lines += stream_targets(datasets.get("stream"))
    lines += gzip_targets(datasets.get("gzip"))
    lines += routes_target(datasets.get("routes")) + tls_targets(datasets.get("tls"))
    return ("| target (DESIGN.md §3, issues) | vireo in this run | |\n|---|---|---|\n"
            + "\n".join(lines) + "\n")


def vireo_note(rows):
    return next((r["note"] for r in rows if r["server"] == "vireo" and r.get("note")), None)


def pool_target(data):
    """The FastCGI target (front-server CPU ≤ 0.5× nginx's) with E3-pool's pooled upstream."""
    return ratio_rows(data, "| FastCGI pooled (E3-pool, keepalive 8 + fastcgi_keep_conn): "
                            "front-server CPU ≤ 0.5× nginx's |", 0.5)


def e2_proxy_target(data):
    """Issue 6: in E2's vireo → Apache set-up, error rate and QPS at least as good as nginx's."""
    if not data:
        return []
    rows = {r.get("setup"): r for r in data["summary"]}
    v, n = rows.get("vireo-apache"), rows.get("nginx-apache")
    if not (v and n) or v.get("error_rate") is None or n.get("error_rate") is None:
        return []
    met = v["error_rate"] <= n["error_rate"] and v["qps_steady_median"] >= n["qps_steady_median"]
    return [f"| proxy: E2 → Apache error rate and QPS at least nginx's | "
            f"error rate {v['error_rate']:.3%} vs nginx {n['error_rate']:.3%}, steady QPS "
            f"{v['qps_steady_median']:,.0f} vs {n['qps_steady_median']:,.0f} | "
            f"{'met' if met else 'not met'} |"]


def ratio_rows(data, name, limit, where=lambda f: describe("path", f)):
    """One target row per vireo row of a vb.summarize experiment: its CPU ratio to nginx;
    where(file) names the row."""
    if not data:
        return []
    rows = [r for r in data["summary"] if r["server"] == "vireo"]
    if not rows or any(r.get("note") for r in rows):
        return [f"{name} – | not measured ({vireo_note(data['summary']) or 'no vireo rows'}) |"]
    nginx = {r["file"]: r for r in data["summary"] if r["server"] == "nginx" and r.get("cpu_us")}
    if not any(r["file"] in nginx for r in rows):
        return [f"{name} – | not measured (no nginx figure in this run) |"]
    figures = "; ".join(f"{where(r['file'])}: {r['cpu_us']:.2f} µs = {r['cpu_ratio']:.2f}× "
                        f"nginx ({nginx[r['file']]['cpu_us']:.2f})" for r in rows
                        if r["file"] in nginx)
    return [f"{name} {figures} | {'met' if all(r['cpu_ratio'] <= limit for r in rows) else 'not met'} |"]


def proxy_targets(data):
    """Issue 6: proxying to h2o with keep-alive, vireo's CPU µs/req ≤ 0.7× nginx's."""
    return ratio_rows(data, "| proxy to a fast backend, keep-alive: CPU µs/req ≤ 0.7× nginx's |", 0.7)


def stream_targets(data):
    """Issue 20: vireo's CPU per 1 KB exchange and per MB no more than nginx's and HAProxy's
    (the ratios taken within each run)."""
    if not data:
        return []
    import experiments
    lines = []
    for w, what in experiments.STREAM_WORKLOADS.items():
        rows = [r for r in data["summary"] if r.get("workload") == w]
        if not rows:
            continue
        unit = experiments.STREAM_UNITS[w]
        name = f"| stream, {what}: CPU µs per {unit} ≤ nginx's and HAProxy's |"
        v = next((r for r in rows if r["server"] == "vireo" and not r.get("note")), None)
        peers = [(p, r["cpu_us_per_unit"], v.get(f"vs_{p}")) for p in experiments.STREAM_PEERS
                 for r in rows if v and r["server"] == p and r.get("cpu_us_per_unit")
                 and v.get(f"vs_{p}") is not None]
        if not peers:
            lines.append(f"{name} – | not measured ({vireo_note(rows) or 'no vireo or peer figure'}) |")
            continue
        figures = ", ".join(f"{x:.2f}× {label(p)} ({c:.2f})" for p, c, x in peers)
        key = f"vs_{experiments.STREAM_FLOOR}"
        floor = next((r for r in rows if r["server"] == experiments.STREAM_FLOOR
                      and r.get("cpu_us_per_unit") and v.get(key) is not None), None)
        if floor:
            figures += f"; {v[key]:.2f}× the C floor ({floor['cpu_us_per_unit']:.2f})"
        missing = [label(p) for p in experiments.STREAM_PEERS if p not in {q for q, _, _ in peers}]
        met = "met" if all(x <= 1 for _, _, x in peers) else "not met"
        lines.append(f"{name} {v['cpu_us_per_unit']:.2f} µs = {figures} | {met}"
                     + (f" ({', '.join(missing)} not measured)" if missing else "") + " |")
    return lines


def gzip_targets(data):
    """Issue 7: gzip 5 of a 92 KB JS file ≤ 0.8× nginx's CPU; with the variant cache ≤ 0.2×."""
    if not data:
        return []
    plain = {**data, "summary": [r for r in data["summary"] if "compress_cache" not in r["file"]]}
    cached = {**data, "summary": [r for r in data["summary"] if "compress_cache" in r["file"]]}
    def ratio(label):
        found = re.search(r"(?:ratio|vireo) (\d+(?:\.\d+)?):1", label)
        return f"compression {found.group(1)}:1" if found else "92 KB JS"
    return (ratio_rows(plain, "| gzip 5, 92 KB JS: CPU µs/req ≤ 0.8× nginx's |", 0.8, ratio)
            + ratio_rows(cached, "| gzip 5 with compress_cache: CPU µs/req ≤ 0.2× nginx's |", 0.2,
                         ratio))


def routes_target(data):
    """Issue 4: vireo's CPU µs/req with 30 locations ≤ 1.05× that with E3's config."""
    if not data:
        return []
    rows = data["summary"]
    name = "| routing: 30 locations ≤ 1.05× single (CPU µs/req) |"
    mine = [r for r in rows if r["server"] == "vireo" and r.get("config") == "routes"
            and r.get("ratio") is not None]
    if not mine:
        return [f"{name} – | not measured ({vireo_note(rows) or 'no vireo rows'}) |"]
    nginx = {r["path"]: r["ratio"] for r in rows if r["server"] == "nginx"
             and r.get("config") == "routes" and r.get("ratio") is not None}
    figures = "; ".join(f"{describe('path', r['path'])} {r['ratio']:.3f}×"
                        + (f" (nginx {nginx[r['path']]:.3f}×)" if r["path"] in nginx else "")
                        for r in mine)
    return [f"{name} {figures} | {'met' if all(r['ratio'] <= 1.05 for r in mine) else 'not met'} |"]


def tls_targets(data):
    """Issues 9 and 21: vireo's CPU µs/req over TLS 1.3 and over HTTP/2 ≤ nginx's, over
    HTTP/3 ≤ Caddy's, in the same run."""
    if not data:
        return []
    import experiments
    lines = []
    for proto in experiments.TLS_PROTOS:
        rows = [r for r in data["summary"] if r.get("proto") == proto]
        ref = experiments.TLS_REFERENCE[proto]
        name = f"| {experiments.TLS_LABELS[proto]}, 21 KB: CPU µs/req ≤ {label(ref)}'s |"
        v = next((r for r in rows if r["server"] == "vireo" and r.get("vs_ref")), None)
        n = next((r for r in rows if r["server"] == ref and r.get("cpu_us_per_req")), None)
        if v and n:
            lines.append(f"{name} {v['cpu_us_per_req']:.2f} µs = {v['vs_ref']:.2f}× {label(ref)} "
                         f"({n['cpu_us_per_req']:.2f}) | {'met' if v['vs_ref'] <= 1 else 'not met'} |")
        elif rows:
            lines.append(f"{name} – | not measured ({vireo_note(rows) or f'no vireo or {label(ref)} figure'}) |")
    return lines


def render_report(datasets, links=None, header=None):
    """The whole report as Markdown.  links: {experiment: plot path relative to the report}."""
    links = links or {}
    gaps, missing = open_gaps(datasets)
    out = [header or "# vireo benchmark report\n\n"]
    out.append("## Open gaps: where vireo is worse than a peer\n\n")
    out.append("Each row: a figure where vireo's median is worse than the best peer's median "
               "(higher req/s and lower CPU, latency, memory and failures are better). "
               "A latency is set beside peers that failed no more requests at that point "
               "than vireo (a server that drops clients answers the rest sooner). "
               "\"Beyond run-to-run spread\" says whether the two min–max ranges are apart; "
               "where they overlap the difference may be noise.\n\n")
    out.append(gaps_markdown(gaps, missing) + "\n")
    out.append("## Targets\n\n" + targets_markdown(datasets) + "\n")
    out.append(NOISE + "\n")
    out.append("Machine and versions:\n\n" + machine_markdown(merge_machines(datasets)) + "\n")
    notes = causes()
    for name in ORDER + ["quick", "idle"]:
        if name in datasets:
            out.append(section(name, datasets[name], links.get(name), notes.get(name)))
    # Figures measured by a test rather than by bench/run (the Kubernetes
    # controller's), kept by hand beside the causes.
    extra = vb.BENCH / "controller.md"
    if extra.exists():
        out.append("\n" + extra.read_text())
    return "".join(out)


def latest_results(results=None):
    """{experiment: data} from the newest results/<date>-<experiment>.json of each."""
    found = {}
    for name in ORDER:
        files = sorted(Path(results or vb.RESULTS).glob(f"????-??-??-{name}.json"))
        if files:
            found[name] = json.loads(files[-1].read_text())
    return found


def write_all(datasets, write_docs=False, all_command=None, all_minutes=None):
    """Plots and the Markdown report next to the JSON; docs/benchmarks.md if asked."""
    if not datasets:
        raise RuntimeError("no results to report (run an experiment first)")
    links = {}
    for name, data in datasets.items():
        if name in PLOTS and data.get("summary"):
            svg = vb.RESULTS / f"{data['date'][:10]}-{name}.svg"
            try:
                PLOTS[name](data, svg)
                links[name] = svg.name
            except Exception as e:  # a plot must not lose the figures
                print(f"bench/run: plot {name} failed: {e}", file=__import__("sys").stderr)
    date = max(d["date"] for d in datasets.values())[:10]
    one = next(iter(datasets)) if len(datasets) == 1 else "report"
    report = vb.RESULTS / f"{date}-{one}.md"
    report.write_text(render_report(datasets, links))
    print(f"report: {report}", file=__import__("sys").stderr)
    if write_docs:
        rel = {k: os.path.relpath(vb.RESULTS / v, DOCS.parent) for k, v in links.items()}
        DOCS.write_text(render_report(datasets, rel, docs_header(datasets, all_command, all_minutes)))
        print(f"docs: {DOCS.relative_to(vb.REPO)}", file=__import__("sys").stderr)


def docs_header(datasets, all_command=None, all_minutes=None):
    dates = sorted(d["date"][:16].replace("T", " ") for d in datasets.values())
    last = max(datasets.values(), key=lambda d: d["date"])
    import datetime as _dt
    end = (_dt.datetime.fromisoformat(last["date"]) +
           _dt.timedelta(seconds=sum(d.get("elapsed_s", 0) for d in datasets.values()
                                     if d["date"] == last["date"]))).strftime("%Y-%m-%d %H:%M")
    cmds = list(dict.fromkeys(d["command"] for d in datasets.values()))
    total = sum(d.get("elapsed_s", 0) for d in datasets.values()) / 60
    made = (f"`{all_command}` ({all_minutes:.0f} min)" if all_command else
            ", ".join(f"`{c}`" for c in cmds) + f" ({total:.0f} min of measuring in all)")
    peers = [label(s) for s in dict.fromkeys(
        s for name in ("E1", "E3", "E4", "M") for s in datasets.get(name, {}).get(
            "options", {}).get("servers", []) if s not in NOT_PEERS)]
    peers = ", ".join(peers[:-1]) + f" and {peers[-1]}" if len(peers) > 1 else "".join(peers) \
        or "the peers"
    variants = [n for n in ("E3-seed", "E3-pool") if n in datasets]
    proxy = datasets.get("proxy", {}).get("options", {}).get("servers", [])
    return ("# Benchmarks\n\n"
            "How to run them and how they work: [`bench/README.md`](../bench/README.md). "
            "Method: DESIGN.md §3. The five experiments reproduce the seed documents "
            f"(`/work/shared/seeds/`) with vireo beside {peers}; "
            + ("E3-seed runs E3 with vireo and nginx on the seed's tuned nginx.conf, E3-pool "
               "with pooled FastCGI; " if variants else "")
            + "`proxy`" + (" (with HAProxy)" if "haproxy" in proxy else "")
            + (", `stream`" if "stream" in datasets else "")
            + ", `gzip`, `routes`, `tls` and `modules` check "
            "the performance asks of issues 6 (proxy), "
            + ("20 (TCP proxying), " if "stream" in datasets else "")
            + "7 (compression), 4 (routing), 9 "
            "(TLS 1.3, HTTP/2) and of the sub_filter and auth_request modules against nginx.\n\n"
            f"Latest full run: {dates[0]} to about {end}, made by {made}; "
            "this page is written by `bench/run all` (or `bench/run report` from the latest "
            "`bench/results/*.json`). For a quick check after a change: `bench/run quick` "
            "(vireo vs nginx on E3's static files, under 3 minutes).\n\n")
