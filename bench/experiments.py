"""The experiments of bench/run: what each one runs, summarizes and prints.

Each entry of EXPERIMENTS is an Experiment: run(opts, scratch) -> list of result
dicts, summarize(results, servers) -> summary rows, markdown(summary, servers) ->
the tables (the paper's table with a vireo column beside the peers, and the
paper's own figures).  Results that cannot be measured carry "unsupported" (why)
instead of figures, and failed measurements carry "error": nothing is made up.
"""
import contextlib
import copy
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, NamedTuple

import vireobench as vb
from vireobench import (FILES, PHPINFO, SERVERS, Meter, Progress, Server, check_get, fmt,
                        label, median_spread, run_ab, run_h2load, run_wrk, settle)

E1_POINTS = [50, 100, 250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 10000, 15000]
STATIC_PAGE = "21k.txt"  # E1 and E4's static page
SIZES = {"2b.txt": "2 B", "21k.txt": "21 KB", "92k.txt": "92 KB", PHPINFO: "phpinfo()"}
PHP_MARK = b"PHP Version"
# server name -> command it needs (vb.PACKAGES installs it)
SERVER_TOOLS = {"nginx": ["nginx"], "lighttpd": ["lighttpd"], "h2o": ["h2o"],
                "apache": ["apache2"], "apache-prefork": ["apache2", "mod_php"], "floor": ["cc"], "relay": ["cc"],
                "caddy": ["caddy"], "haproxy": ["haproxy"]}


# The format of a count of requests in a gap: a median of an even number of runs can be a
# half (one failed request in one of two runs reads 0.5, not 0).
COUNT = ",.10g"


class Gap(NamedTuple):
    """A metric compared between vireo and the peers: field, label, higher is better,
    fields holding its min and max over runs."""
    metric: str
    name: str
    higher_better: bool
    lo: str = None
    hi: str = None
    spec: str = ".1f"


class Experiment(NamedTuple):
    run: Callable
    summarize: Callable
    markdown: Callable
    servers: tuple          # default --servers
    load: tuple             # load generators (and backends) it needs
    duration: int = 5       # default --duration
    runs: int = 3           # default --runs
    php: bool = False       # needs php-fpm
    keys: tuple = ()        # what identifies a row besides the server (for open gaps)
    gaps: tuple = ()        # Gap(...) compared between vireo and the peers
    title: str = ""
    needs: tuple = ()       # (server, command) pairs: what a server needs in this experiment

    def defaults(self, args):
        opts = copy.copy(args)
        opts.servers = list(args.servers or self.servers)
        opts.duration = args.duration or self.duration
        opts.runs = args.runs or self.runs
        opts.points = args.points or E1_POINTS
        return opts

    def tools(self, opts):
        tools = list(self.load)
        for s in opts.servers:
            tools += SERVER_TOOLS.get(s, []) + [t for name, t in self.needs if name == s]
        if self.php:
            tools.append("php-fpm")
        return list(dict.fromkeys(tools))


# ---------------------------------------------------------------- context

def fpm_children(edits=()):
    """php-fpm's pm.max_children with these edits of conf/php-fpm.conf (vireo-php.conf's
    max_conns is twice that)."""
    text = (vb.CONF / "php-fpm.conf").read_text()
    for old, new in edits:
        text = text.replace(old, new)
    return int(re.search(r"^pm\.max_children\s*=\s*(\d+)", text, re.M).group(1))


def backend_workers(backend):
    """How many connections a proxied backend serves at once when it gives each one a
    process: Apache prefork's MaxRequestWorkers (vireo-proxy.conf's max_conns); 0 (no
    limit) for the event-driven backends."""
    if backend != "apache-prefork":
        return 0
    text = (vb.CONF / "apache-prefork.conf").read_text()
    return int(re.search(r"^\s*MaxRequestWorkers\s+(\d+)", text, re.M).group(1))


class Ctx:
    """Ports, docroot and the capability checks shared by an experiment's runs."""

    def __init__(self, opts, scratch):
        self.opts, self.scratch = opts, Path(scratch)
        self.root = vb.make_docroot(scratch)
        self.fpm_port = opts.port_base + 50
        self.upstream_port = opts.port_base + 51
        self.upstream_tls_port = opts.port_base + 52  # the proxy's https upstream
        self.grpc_port = opts.port_base + 53  # the proxy's gRPC backend
        self.h2c_port = opts.port_base + 54  # the front's cleartext HTTP/2 listener (gRPC)
        self._why = {}

    def port(self, name):
        return self.opts.port_base + list(SERVERS).index(name)

    def url(self, name, path):
        return f"http://127.0.0.1:{self.port(name)}/{path.lstrip('/')}"

    def subst(self, fpm_edits=(), backend=None):
        return {"@FPM@": f"127.0.0.1:{self.fpm_port}", "@FPM_HOST@": "127.0.0.1",
                "@FPM_PORT@": self.fpm_port, "@UPSTREAM@": f"127.0.0.1:{self.upstream_port}",
                "@UPSTREAM_TLS@": f"127.0.0.1:{self.upstream_tls_port}",
                "@GRPC@": f"127.0.0.1:{self.grpc_port}", "@PORT_H2C@": self.h2c_port,
                "@FPM_CONNS@": 2 * fpm_children(fpm_edits),
                "@UPSTREAM_CONNS@": backend_workers(backend)}

    def conf(self, name, kind):
        return SERVERS[name]["conf"] if kind == "static" else SERVERS[name].get(kind)

    def unsupported(self, name, kind):
        """None if `name` can serve this kind of workload ("static", "php", "proxy"),
        else why not.  vireo's templates are checked with `vireo -t`, so a vireo that
        gains FastCGI or a proxy is measured without touching the suite."""
        if kind == "static":
            return SERVERS[name].get("no_static")
        if (name, kind) not in self._why:
            conf = self.conf(name, kind)
            why = None
            if not conf or not (vb.CONF / conf).is_file():
                why = conf or f"no {kind} configuration"
            elif "test" in SERVERS[name]:
                d = self.scratch / f"{name}-{kind}-test"
                d.mkdir(exist_ok=True)
                text = vb.fill((vb.CONF / conf).read_text(), dict(
                    self.subst(), **{"@DIR@": d, "@ROOT@": self.root, "@PORT@": self.port(name)}))
                (d / conf).write_text(text)
                r = subprocess.run(SERVERS[name]["test"](d / conf), capture_output=True,
                                   text=True, timeout=30)
                if r.returncode != 0:
                    err = next((l for l in r.stderr.splitlines() if "emerg" in l),
                               r.stderr.strip()[:200])
                    why = f"{vb.NOT_YET.get(kind, 'not supported')} — {name} -t: " \
                          f"{err.split('] ', 1)[-1].split(' in /')[0]}"
            self._why[name, kind] = why
        return self._why[name, kind]

    @contextlib.contextmanager
    def serving(self, name, kind="static", conf=None, fpm_edits=(), backend=None, edits=(),
                subst=None):
        """Start what a workload needs: php-fpm for "php" (the server's php template),
        the backend server for "proxy"; yields (front Server, [backend Servers]).
        edits: (old, new) replacements in the front server's template; subst: more
        @KEY@ values for it."""
        with contextlib.ExitStack() as stack:
            backends = []
            if kind == "php" and name != "apache-prefork":
                backends.append(stack.enter_context(Server(
                    "php-fpm", self.scratch, self.root, self.fpm_port, subst=self.subst(),
                    edits=fpm_edits)))
            if kind == "proxy":
                backends.append(stack.enter_context(Server(
                    backend, self.scratch, self.root, self.upstream_port, subst=self.subst(),
                    tag=f"{backend}-backend")))
            front = stack.enter_context(Server(
                name, self.scratch, self.root, self.port(name),
                conf=conf or self.conf(name, kind),
                subst=dict(self.subst(fpm_edits, backend), **(subst or {})), edits=edits))
            yield front, backends

    def check(self, name, path):
        url = self.url(name, path)
        if path.endswith(".php"):
            check_get(url, contains=PHP_MARK)
        else:
            check_get(url, (self.root / path).read_bytes())
        return url


def order(servers, run):
    """The servers of run k, rotated by k-1: still interleaved, but no server always goes
    first (right after the previous run's heaviest point) or last."""
    i = (run - 1) % len(servers)
    return list(servers[i:]) + list(servers[:i])


def kind_of(path):
    return "php" if path.endswith(".php") else "static"


def failure(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}" if str(e).strip() \
        else type(e).__name__


ERRORS = (RuntimeError, ValueError, OSError, subprocess.SubprocessError)


def summarize_points(results, servers, keys, metrics):
    """One row per (keys..., server): median, min and max over runs of each metric.
    Rows of a server that could not be measured carry "note" instead."""
    rows = []
    for g in dict.fromkeys(tuple(r.get(k) for k in keys) for r in results):
        for s in servers:
            rs = [r for r in results if r["server"] == s and tuple(r.get(k) for k in keys) == g]
            if not rs:
                continue
            row = dict(zip(keys, g), server=s)
            ok = [r for r in rs if not r.get("unsupported") and not r.get("error")]
            row["runs"] = len(ok)
            if not ok:
                row["note"] = rs[0].get("unsupported") or f"failed: {rs[0]['error']}"
            else:
                if len(ok) < len(rs):
                    row["failed_runs"] = len(rs) - len(ok)
                    row["failure"] = next(r["error"] for r in rs if r.get("error"))
                for m in metrics:
                    row[m], row[m + "_min"], row[m + "_max"] = median_spread(r.get(m) for r in ok)
            rows.append(row)
    return rows


def table(head, body):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def spread(row, m, spec):
    if row.get(m) is None:
        return "–"
    lo, hi = row.get(m + "_min"), row.get(m + "_max")
    if lo is None or row.get("runs", 1) < 2 or lo == hi:
        return fmt(row[m], spec)
    return f"{fmt(row[m], spec)} ({fmt(lo, spec)}–{fmt(hi, spec)})"


def find(rows, server, **keys):
    return next((r for r in rows if r["server"] == server
                 and all(r.get(k) == v for k, v in keys.items())), None)


def short(note):
    note = note.split(" — ")[0]
    return note if len(note) <= 90 else note[:87] + "…"


def cell(row, render):
    if row is None:
        return "–"
    if row.get("note"):
        return short(row["note"])
    return render(row)


def warm_up(url):
    run_wrk(url, 1, 50)


# ---------------------------------------------------------------- E3 and quick

def e3_plan(opts, ctx, with_php):
    """(run, server, kind, paths served by one start); the C floor serves one file a start."""
    static = [f for f, _ in FILES]
    kinds = [("static", static)] + ([("php", [PHPINFO])] if with_php else [])
    return [(k, s, kind, group) for k in range(1, opts.runs + 1)
            for s in order(opts.servers, k) for kind, paths in kinds
            for group in ([[p] for p in paths] if s == "floor" else [paths])]


def floor_body(ctx, server, path):
    """The C floor's @FLOOR_BODY@ for a file, as E5 measures it: 2 B in one write with its
    head (the floor's default body), a larger file by sendfile after the head; {} for any
    other server."""
    if server != "floor" or path == "2b.txt":
        return {}
    return {"@FLOOR_BODY@": f"@{ctx.root / path}"}


def exp_e3(opts, scratch, quick=False):
    """E3 (doc 003): static 2 B / 21 KB / 92 KB and phpinfo(); rps, CPU µs/req, RSS."""
    ctx = Ctx(opts, scratch)
    # quick measures phpinfo() only once vireo can (the peers' figure alone says nothing)
    with_php = not quick or ctx.unsupported("vireo", "php") is None
    plan = e3_plan(opts, ctx, with_php)
    steps = sum(len(paths) for k, s, kind, paths in plan if not ctx.unsupported(s, kind))
    progress, results = Progress(steps, "quick" if quick else "E3"), []
    for k, s, kind, paths in plan:
        why = ctx.unsupported(s, kind)
        if why:
            if k == 1:
                results += [{"server": s, "path": p, "run": k, "unsupported": why} for p in paths]
            continue
        done = 0
        try:
            with ctx.serving(s, kind, subst=floor_body(ctx, s, paths[0])) as (front, backends):
                for path in paths:
                    progress.step(f"{s:8} {path:8} run {k}/{opts.runs}")
                    done += 1
                    url = ctx.check(s, path)
                    warm_up(url)
                    with Meter(front, backends) as m:
                        w = run_wrk(url, opts.duration, opts.connections)
                    results.append(dict(w, server=s, path=path, run=k, **m.result(w["requests"])))
        except ERRORS as e:
            for path in paths[max(done - 1, 0):]:
                results.append({"server": s, "path": path, "run": k, "error": failure(e)})
            for _ in paths[done:]:
                progress.step(f"{s:8} skipped after an error")
    progress.close()
    return results


def exp_quick(opts, scratch):
    """vireo vs nginx on E3's files (phpinfo() too when vireo has FastCGI), under 3 min."""
    return exp_e3(opts, scratch, quick=True)


PAPER_003 = {  # seed document 003: req/s (and memory) per server; 1 vCPU VM, JMeter over 1 Gb/s
    "2b.txt": {"Apache 2.4 event": 4810, "nginx": 6650},
    "21k.txt": {"Apache 2.4 event": 2300, "nginx": 2600},
    "92k.txt": {"Apache 2.4 event": 820, "nginx": 1000},
    PHPINFO: {"Apache 2.4 prefork (mod_php)": 575, "nginx FastCGI": 450},
}


def markdown_e3(rows, servers):
    files = list(dict.fromkeys(r["file"] for r in rows))
    head = ["workload"] + [label(s) for s in servers]

    def pivot(render):
        return [[SIZES.get(f, f)] + [cell(find(rows, s, file=f), render) for s in servers]
                for f in files]

    out = ["Requests/s (median of runs, wrk -c50, keep-alive):\n\n",
           table(head + ["paper 003 (req/s)"],
                 [r + ["; ".join(f"{k} {v:,}" for k, v in PAPER_003.get(f, {}).items())]
                  for r, f in zip(pivot(lambda r: fmt(r["rps"], ",.0f")), files)]),
           "\nServer CPU µs per request (median, min–max; phpinfo(): the web server only, "
           "php-fpm's own CPU is in the detail table):\n\n",
           table(head, pivot(lambda r: spread(dict(r, cpu_us_min=r["cpu_min"],
                                                   cpu_us_max=r["cpu_max"]), "cpu_us", ".2f"))),
           "\nRSS of the server's processes at the end of the run, MB (paper 003, 92 KB file: "
           "nginx 2 MB, Apache 2.4 event 20 MB):\n\n",
           table(head, pivot(lambda r: fmt(r["rss_mb"]))),
           "\nDetail:\n\n", vb.markdown(rows, servers)]
    return "".join(out)


# ---------------------------------------------------------------- E3's variants

GZIP_HEADER = "Accept-Encoding: gzip"


class Workload(NamedTuple):
    """One E3-style load: key (the row's "file"), the path requested, extra request
    headers, "static" or "php"."""
    key: str
    path: str
    headers: tuple = ()
    kind: str = "static"


class Variant(NamedTuple):
    """An E3 variant: one nginx-syntax template that vireo and nginx both run, and its loads."""
    conf: str
    workloads: tuple
    what: str


E3_VARIANTS = {
    # seed document 002's tuned directives (conf/tuned.conf, as E5) on E3's files: as wrk
    # sends, and for 21 KB and 92 KB also with Accept-Encoding: gzip, where that
    # configuration's `gzip on; gzip_min_length 10240` compresses them
    "E3-seed": Variant("tuned.conf",
                       tuple(Workload(f, f) for f, _ in FILES)
                       + tuple(Workload(f"{f} gzip", f, (GZIP_HEADER,)) for f in ("21k.txt", "92k.txt")),
                       "the seed's tuned configuration"),
    # phpinfo() through a pooled FastCGI upstream (keepalive 8, fastcgi_keep_conn on)
    "E3-pool": Variant("php-pool.conf", (Workload(PHPINFO, PHPINFO, kind="php"),),
                       "pooled FastCGI"),
}
NGINX_SYNTAX = ("vireo", "nginx")  # the servers that run nginx's configuration grammar
SIZES.update({"21k.txt gzip": "21 KB (gzip)", "92k.txt gzip": "92 KB (gzip)"})


def get_gzip(url, plain):
    """One GET with Accept-Encoding: gzip before measuring: the answer must be the file
    gzipped.  Returns the compressed size."""
    import gzip
    import urllib.request
    get = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(get, timeout=10) as r:
            body, coding = r.read(), r.headers.get("Content-Encoding")
    except OSError as e:
        raise RuntimeError(f"GET {url} (gzip): {e}") from e
    if coding != "gzip" or gzip.decompress(body) != plain:
        raise RuntimeError(f"GET {url}: not the file gzipped ({coding}, {len(body)} B)")
    return len(body)


def exp_e3_variant(opts, scratch, name):
    """Measure the variant `name` of E3 (E3_VARIANTS): each server on the variant's
    template, E3's load (wrk -c50, keep-alive, 1 s warm-up) on each workload."""
    v = E3_VARIANTS[name]
    ctx = Ctx(opts, scratch)
    kind = v.workloads[0].kind
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results, why = Progress(len(plan) * len(v.workloads), name), [], {}
    for k, s in plan:
        if s not in NGINX_SYNTAX:
            why[s] = f"no nginx-syntax configuration for {label(s)} ({v.what} is nginx's)"
        if s in why:
            if k == 1:
                results += [{"server": s, "path": w.key, "run": k, "unsupported": why[s]}
                            for w in v.workloads]
            for _ in v.workloads:
                progress.step(f"{s:8} not measured")
            continue
        done = 0
        try:
            with ctx.serving(s, kind, conf=v.conf) as (front, backends):
                for w in v.workloads:
                    progress.step(f"{s:8} {w.key:12} {v.conf} run {k}/{opts.runs}")
                    done += 1
                    if w.headers:
                        url = ctx.url(s, w.path)
                        get_gzip(url, (ctx.root / w.path).read_bytes())
                    else:
                        url = ctx.check(s, w.path)
                    run_wrk(url, 1, opts.connections, headers=w.headers)
                    with Meter(front, backends) as m:
                        r = run_wrk(url, opts.duration, opts.connections, headers=w.headers)
                    results.append(dict(r, server=s, path=w.key, run=k, conf=v.conf,
                                        **m.result(r["requests"])))
        except vb.StartError as e:
            why[s] = refused(s, e)
            results += [{"server": s, "path": w.key, "run": k, "unsupported": why[s]}
                        for w in v.workloads]
            for _ in v.workloads[done:]:
                progress.step(f"{s:8} does not start")
        except ERRORS as e:
            for w in v.workloads[max(done - 1, 0):]:
                results.append({"server": s, "path": w.key, "run": k, "error": failure(e)})
            for _ in v.workloads[done:]:
                progress.step(f"{s:8} skipped after an error")
    progress.close()
    return results


def exp_e3_seed(opts, scratch):
    """E3-seed: E3's files (and gzip) with vireo and nginx on doc 002's tuned nginx.conf."""
    return exp_e3_variant(opts, scratch, "E3-seed")


def exp_e3_pool(opts, scratch):
    """E3-pool: E3's phpinfo() through a pooled FastCGI upstream (keepalive 8, keep_conn)."""
    return exp_e3_variant(opts, scratch, "E3-pool")


# metric, higher is better: the "vireo ÷ best peer" columns of the variants
VS_BEST = (("cpu_us", False), ("rps", True))


def summarize_variant(results, servers):
    """vb.summarize's rows; vireo's also carry, per metric of VS_BEST, its ratio to the
    best peer's median ("vs_best_cpu_us", "best_cpu_us": that peer)."""
    rows = vb.summarize(results, servers)
    for r in rows:
        if r["server"] != "vireo" or r.get("note"):
            continue
        peers = [p for p in rows if p["file"] == r["file"] and p["server"] != "vireo"
                 and not p.get("note")]
        for metric, higher in VS_BEST:
            vals = [p for p in peers if p.get(metric)]
            if r.get(metric) and vals:
                best = (max if higher else min)(vals, key=lambda p: p[metric])
                r[f"vs_best_{metric}"], r[f"best_{metric}"] = r[metric] / best[metric], best["server"]
    return rows


def markdown_variant(rows, servers):
    """Per workload and server: CPU µs/req, req/s, p99, RSS, errors, and on vireo's row
    its ratio to the best peer (CPU: below 1 is better; req/s: above 1 is better)."""
    body = []
    for r in rows:
        name = SIZES.get(r["file"], r["file"])
        if r.get("note"):
            body.append([name, label(r["server"]), short(r["note"])] + [""] * 6)
            continue

        def vs(metric):
            x = r.get(f"vs_best_{metric}")
            return f"{x:.2f}× ({label(r[f'best_{metric}'])})" if x is not None else ""
        body.append([name, label(r["server"]),
                     spread(dict(r, cpu_us_min=r["cpu_min"], cpu_us_max=r["cpu_max"]), "cpu_us", ".2f"),
                     spread(r, "rps", ",.0f"), fmt(r["p99_ms"], ".2f"), fmt(r["rss_mb"]),
                     str(r["errors"]), vs("cpu_us"), vs("rps")])
    return table(["workload", "server", "CPU µs/req (median, min–max)", "req/s (median, min–max)",
                  "p99 ms", "RSS MB", "errors", "vireo ÷ best peer, CPU", "vireo ÷ best peer, req/s"],
                 body)


# ---------------------------------------------------------------- E1

def e1_warmup(clients):
    """Seconds h2load opens connections before counting (0.3 s + 1 s per 5,000 clients):
    at 15,000 clients the listen queue (somaxconn 4,096) overflows and handshakes wait
    for SYN retransmits."""
    return round(0.3 + clients / 5000, 1)


E1_CYCLES = 3
E1_MAX_S = 30


def e1_duration(base, clients, prev_rps):
    """Seconds to count requests at one point: at least `base`, and at least E1_CYCLES
    turns of every client (clients ÷ the req/s of the point before, capped at the paper's
    30 s). A closed loop of c clients answered at X req/s makes each wait c ÷ X on
    average; a window shorter than that counts only the requests a queue happened to
    drain first, so its p99 measures the queue's order, not the server."""
    if not prev_rps:
        return base
    return round(min(E1_MAX_S, max(base, E1_CYCLES * clients / prev_rps)), 1)


def exp_e1(opts, scratch):
    """E1 (doc 000): clients 50 → 15,000 on a 21 KB file and phpinfo(), fixed time each."""
    ctx = Ctx(opts, scratch)
    workloads = [(STATIC_PAGE, "static"), (PHPINFO, "php")]
    plan = [(k, path, kind, s) for k in range(1, opts.runs + 1) for path, kind in workloads
            for s in order(opts.servers, k)]
    steps = sum(len(opts.points) for k, path, kind, s in plan if not ctx.unsupported(s, kind))
    progress, results = Progress(steps, "E1"), []
    for k, path, kind, s in plan:
        why = ctx.unsupported(s, kind)
        if why:
            if k == 1:
                results += [{"server": s, "path": path, "clients": c, "run": k,
                             "unsupported": why} for c in opts.points]
            continue
        done, rps = 0, None
        try:
            with ctx.serving(s, kind, subst=floor_body(ctx, s, path)) as (front, backends):
                url = ctx.check(s, path)
                warm_up(url)
                for c in opts.points:
                    progress.step(f"{s:8} {path:8} c={c:<5} run {k}/{opts.runs}")
                    done += 1
                    settle(front)
                    m = Meter(front, backends)
                    seconds = e1_duration(opts.duration, c, rps)
                    h = run_h2load(url, c, seconds, e1_warmup(c),
                                   ctx.scratch / "h2load.log", on_main=m.mark)
                    rps = h["ok_rps"] or rps
                    results.append(dict(h, server=s, path=path, clients=c, run=k,
                                        warmup_s=e1_warmup(c), **m.result(h["requests"])))
        except ERRORS as e:
            for c in opts.points[max(done - 1, 0):]:
                results.append({"server": s, "path": path, "clients": c, "run": k,
                                "error": failure(e)})
            for _ in opts.points[done:]:
                progress.step(f"{s:8} skipped after an error")
    progress.close()
    return results


E1_METRICS = ["succeeded", "errors", "ok_rps", "p50_ms", "p99_ms", "cpu_us_per_req",
              "backend_cpu_us_per_req", "in_flight"]


def summarize_e1(results, servers):
    return summarize_points(results, servers, ["path", "clients"], E1_METRICS)


PAPER_000 = {  # seed document 000, table 1: webbench 30 s on phpinfo(); succeeded, failed
    50: ((40073, 0), (23243, 0)), 100: ((39452, 0), (22002, 0)), 250: ((39992, 0), (20648, 0)),
    500: ((41719, 0), (19639, 5)), 1000: ((42088, 0), (20733, 54)),
    1500: ((39577, 0), (18823, 179)), 2000: ((40756, 0), (21526, 142)),
    3000: ((43104, 0), (17902, 437)), 4000: ((41714, 0), (13591, 483)),
    6000: ((41386, 2), None), 8000: ((44553, 37), None), 10000: ((41689, 357), None),
    15000: ((40439, 234), None)}


def markdown_e1(rows, servers):
    out = []
    for path in dict.fromkeys(r["path"] for r in rows):
        pts = list(dict.fromkeys(r["clients"] for r in rows if r["path"] == path))
        head = ["clients"] + [label(s) for s in servers]

        def body(render):
            return [[f"{c:,}"] + [cell(find(rows, s, path=path, clients=c), render)
                                  for s in servers] for c in pts]
        name = SIZES.get(path, path)
        out += [f"**{name}** — succeeded / failed requests per run (median):\n\n",
                table(head, body(lambda r: f"{fmt(r['succeeded'], ',.0f')} / "
                                           f"{fmt(r['errors'], ',.0f')}")),
                f"\n**{name}** — successful requests/s (median, min–max) · p99 ms:\n\n",
                table(head, body(lambda r: f"{spread(r, 'ok_rps', ',.0f')} · "
                                           f"{fmt(r['p99_ms'], ',.1f')}")),
                f"\n**{name}** — server CPU µs per request (median, min–max; the robust figure: "
                "when a server's CPU is not saturated its req/s is set by what the shared machine "
                "leaves the load generator):\n\n",
                table(head, body(lambda r: spread(r, "cpu_us_per_req", ".1f"))), "\n"]
    out += ["Paper 000, table 1 (webbench, 30 s per point, phpinfo(), Core i5, Ubuntu 11.04): "
            "succeeded / failed; Apache has no figures from 6,000 clients on (the machine ran out of "
            "memory and froze):\n\n",
            table(["clients", "nginx", "Apache"],
                  [[f"{c:,}", f"{n[0]:,} / {n[1]}", f"{a[0]:,} / {a[1]}" if a else "–"]
                   for c, (n, a) in PAPER_000.items()])]
    return "".join(out)


# ---------------------------------------------------------------- E4

PCTS = ["50", "66", "75", "80", "90", "95", "98", "99", "100"]


def exp_e4(opts, scratch):
    """E4 (doc 004): ab -n N -c 1000 (no keep-alive) on phpinfo() and a 21 KB page."""
    ctx = Ctx(opts, scratch)
    workloads = [(PHPINFO, "php", opts.ab_n_php), (STATIC_PAGE, "static", opts.ab_n)]
    plan = [(k, path, kind, n, s) for k in range(1, opts.runs + 1)
            for path, kind, n in workloads for s in order(opts.servers, k)]
    steps = sum(1 for k, path, kind, n, s in plan if not ctx.unsupported(s, kind))
    progress, results = Progress(steps, "E4"), []
    for k, path, kind, n, s in plan:
        why = ctx.unsupported(s, kind)
        if why:
            if k == 1:
                results.append({"server": s, "path": path, "run": k, "unsupported": why})
            continue
        progress.step(f"{s:8} ab -n {n} -c {opts.ab_c} {path} run {k}/{opts.runs}")
        try:
            with ctx.serving(s, kind) as (front, backends):
                url = ctx.check(s, path)
                warm_up(url)
                settle(front)
                with Meter(front, backends) as m:
                    a = run_ab(url, n, opts.ab_c, opts.ab_time)
                row = dict(a, server=s, path=path, run=k, requests=n, **m.result(a["complete"]))
                row.update({f"pct_{p}": a["percentiles_ms"].get(p) for p in PCTS})
                results.append(row)
        except (*ERRORS, subprocess.TimeoutExpired) as e:
            results.append({"server": s, "path": path, "run": k, "error": failure(e)})
    progress.close()
    return results


E4_METRICS = ["rps", "complete", "failed_real", "failed", "non2xx", "time_per_req_ms",
              "cpu_us_per_req", "backend_cpu_us_per_req", "p50_ms", "p99_ms", "requests"] + \
    [f"pct_{p}" for p in PCTS]


def summarize_e4(results, servers):
    return summarize_points(results, servers, ["path"], E4_METRICS)


PAPER_004 = {  # seed document 004: ab -n 100000 -c 1000, phpinfo() via FastCGI, FreeBSD 8.2
    "nginx 1.0.0": {"rps": 1155.03, "failed": 0, "time_per_req_ms": 865.78,
                    "pct": [473, 584, 699, 776, 3308, 3473, 3688, 3817, 10222]},
    "lighttpd 1.4.28": {"rps": 1203.27, "failed": 0, "time_per_req_ms": 831.07,
                        "pct": [826, 843, 854, 862, 894, 939, 1006, 1094, 4248]},
}
PAPER_004_STATIC = {"nginx 1.0.0": 11622.50, "lighttpd 1.4.28": 9045.68}


def markdown_e4(rows, servers):
    out = []
    for path in dict.fromkeys(r["path"] for r in rows):
        php = path == PHPINFO
        papers = list(PAPER_004) if php else list(PAPER_004_STATIC)
        head = [""] + [label(s) for s in servers] + [f"paper 004: {p}" for p in papers]

        def line(name, render, paper=lambda p: ""):
            first = not body
            return [name] + [cell(find(rows, s, path=path), render)
                             if first or not (find(rows, s, path=path) or {}).get("note") else "–"
                             for s in servers] + [paper(p) for p in papers]
        body = []
        n = next((r.get("requests") for r in rows if r["path"] == path and r.get("requests")), None)
        body.append(line("Requests per second", lambda r: spread(r, "rps", ",.0f"),
                     (lambda p: f"{PAPER_004[p]['rps']:,.0f}") if php
                     else (lambda p: f"{PAPER_004_STATIC[p]:,.0f}")))
        body += [line("Complete requests", lambda r: fmt(r["complete"], ",.0f"),
                     (lambda p: "100,000") if php else (lambda p: "")),
                line("Failed (connect, receive, exceptions)", lambda r: fmt(r["failed_real"], ",.0f"),
                     (lambda p: "0") if php else (lambda p: "")),
                line("“Length” failures (page size varied)", lambda r: fmt(r["failed"] - r["failed_real"], ",.0f")),
                line("Non-2xx responses", lambda r: fmt(r["non2xx"], ",.0f")),
                line("Time per request, ms (mean)", lambda r: fmt(r["time_per_req_ms"], ",.1f"),
                     (lambda p: f"{PAPER_004[p]['time_per_req_ms']:,.1f}") if php else (lambda p: "")),
                line("Server CPU µs/request", lambda r: spread(r, "cpu_us_per_req", ".1f"))]
        if php:
            body.append(line("php-fpm CPU µs/request", lambda r: fmt(r.get("backend_cpu_us_per_req"), ".0f")))
        for i, p in enumerate(PCTS):
            body.append(line(f"{p}% served within (ms)" if p != "100" else "100% (longest request)",
                             lambda r, p=p: fmt(r.get(f"pct_{p}"), ",.0f"),
                             (lambda q, i=i: f"{PAPER_004[q]['pct'][i]:,}") if php else (lambda q: "")))
        out += [f"**{SIZES.get(path, path)}** — `ab -n {int(n) if n else '?'} -c 1000`, each run stopped after "
                f"the time cap (medians of runs; spread in brackets):\n\n", table(head, body), "\n"]
    return "".join(out)


# ---------------------------------------------------------------- E5

E5_FILES = ["2b.txt", "21k.txt"]


def exp_e5(opts, scratch):
    """E5 (doc 002): the 2 B and 21 KB files, the tuned directives, one pinned worker; vs a
    C epoll floor doing the same kernel work (2 B: one write of head and body; 21 KB: the
    head with MSG_MORE, then sendfile)."""
    ctx = Ctx(opts, scratch)
    plan = [(k, s, f) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)
            for f in E5_FILES]
    progress, results = Progress(len(plan), "E5"), []
    for k, s, f in plan:
        progress.step(f"{s:8} {f} tuned run {k}/{opts.runs}")
        try:
            conf = SERVERS[s].get("tuned") if s != "floor" else None
            with ctx.serving(s, "static", conf=conf, subst=floor_body(ctx, s, f)) as (front, _):
                url = ctx.check(s, f)
                warm_up(url)
                with Meter(front) as m:
                    w = run_wrk(url, opts.duration, opts.connections)
                r = dict(w, server=s, path=f, run=k, conf=conf, **m.result(w["requests"]))
                r["ceiling_rps"] = 1e6 / r["cpu_us_per_req"] if r["cpu_us_per_req"] else None
                results.append(r)
        except ERRORS as e:
            results.append({"server": s, "path": f, "run": k, "error": failure(e)})
    progress.close()
    return results


def summarize_e5(results, servers):
    """Rows per (file, server); "vs_floor", "vs_nginx": CPU µs/req ÷ theirs for the file
    (medians)."""
    rows = summarize_points(results, servers, ["path"],
                            ["rps", "cpu_us_per_req", "cpu_util", "ceiling_rps", "p99_ms", "rss_mb"])
    for r in rows:
        for name, base in (("vs_floor", find(rows, "floor", path=r["path"])),
                           ("vs_nginx", find(rows, "nginx", path=r["path"]))):
            ok = base and base.get("cpu_us_per_req") and r.get("cpu_us_per_req")
            r[name] = r["cpu_us_per_req"] / base["cpu_us_per_req"] if ok else None
    return rows


def markdown_e5(rows, servers):
    body = [[SIZES.get(r["path"], r["path"]), label(r["server"])] +
            ([short(r["note"])] + [""] * 6 if r.get("note") else
             [spread(r, "rps", ",.0f"), spread(r, "cpu_us_per_req", ".2f"),
              fmt(100 * r["cpu_util"], ".0f") + " %" if r.get("cpu_util") is not None else "–",
              fmt(r["ceiling_rps"], ",.0f"), fmt(r["vs_floor"], ".2f") + "×",
              fmt(r["vs_nginx"], ".2f") + "×"]) for r in rows]
    return (table(["file", "server", "rps (wrk -c50, median)", "CPU µs/req (median, min–max)",
                   "CPU 0 busy", "ceiling per core, req/s (10⁶ ÷ µs)", "CPU vs floor",
                   "CPU vs nginx"], body)
            + "\nPaper 002: 904,000 req/s from 24 nginx workers after tuning (560,000 before the "
              "open-file cache), i.e. about 37,700 req/s per worker, over the network on a "
              "24-core machine.\n")


# ---------------------------------------------------------------- M (idle)

def open_idle(port, n, path, batch=500, timeout=5.0):
    """Open up to n keep-alive connections that each get one response and stay open.
    Stops early (server at its limit) when a batch is not fully served in time.
    Returns (sockets, number served)."""
    import resource
    import socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, n + 100), hard), hard))
    socks, served, req = [], 0, f"GET /{path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    try:
        while len(socks) < n:
            want, new = min(batch, n - len(socks)), []
            for _ in range(want):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
                    new.append(s)
                    s.sendall(req)
                except OSError:
                    break
            ok, deadline = 0, time.monotonic() + 2 * timeout  # Apache spawns children meanwhile
            for s in new:
                try:
                    s.settimeout(max(0.1, deadline - time.monotonic()))
                    if not s.recv(65536).startswith(b"HTTP/1.1 200"):
                        break
                except OSError:
                    break
                ok += 1
            socks += new
            served += ok
            if ok < want:
                break
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks, served


def exp_idle(opts, scratch):
    """M: RSS growth per 10,000 idle keep-alive connections that each served one request."""
    ctx = Ctx(opts, scratch)
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results = Progress(len(plan), "M"), []
    for k, s in plan:
        progress.step(f"{s:8} {opts.idle_conns} idle connections, run {k}/{opts.runs}")
        why = ctx.unsupported(s, "static")
        if why:
            if k == 1:
                results.append({"server": s, "run": k, "unsupported": why})
            continue
        try:
            with ctx.serving(s) as (srv, _):
                ctx.check(s, "2b.txt")
                # The idle server, once what it does after starting is done
                # (vireo unmaps its start-up pages 250-500 ms after it starts).
                time.sleep(1)
                before = vb.rss_mb(srv.pids())
                socks, served = open_idle(ctx.port(s), opts.idle_conns, "2b.txt")
                try:
                    time.sleep(1)
                    after = vb.rss_mb(srv.pids())
                finally:
                    for c in socks:
                        c.close()
        except ERRORS as e:
            results.append({"server": s, "run": k, "error": failure(e)})
            continue
        growth = after - before
        results.append({"server": s, "run": k, "connections": opts.idle_conns, "served": served,
                        "rss_before_mb": before, "rss_after_mb": after,
                        "mb_per_10k": growth * 10000 / served if served else None})
    progress.close()
    return results


def summarize_idle(results, servers):
    return summarize_points(results, servers, [],
                            ["mb_per_10k", "served", "rss_before_mb", "rss_after_mb", "connections"])


DESIGN_IDLE = {"nginx": 5.7, "h2o": 10.3, "lighttpd": 39, "apache": 110}


def markdown_idle(rows, servers):
    body = [[label(r["server"])] + ([short(r["note"]), "", "", ""] if r.get("note") else [
        f"{fmt(r['served'], ',.0f')} of {fmt(r['connections'], ',.0f')}",
        fmt(r["rss_before_mb"]), spread(r, "mb_per_10k", ".1f"),
        fmt(DESIGN_IDLE.get(r["server"]), "g")]) for r in rows]
    return table(["server", "connections served and held", "RSS before MB",
                  "RSS growth per 10k MB (median, min–max)", "DESIGN.md §3 (earlier run)"], body)


# ---------------------------------------------------------------- E2

# key, label, front server, kind, backend, path, what to compare it with
E2_SETUPS = [
    ("prefork", "Apache prefork + mod_php", "apache-prefork", "modphp", None, "/sleep.php"),
    ("nginx-fpm", "nginx + php-fpm", "nginx", "php", None, "/sleep.php"),
    ("vireo-fpm", "vireo + php-fpm", "vireo", "php", None, "/sleep.php"),
    ("nginx-apache", "nginx → Apache prefork + mod_php", "nginx", "proxy", "apache-prefork",
     "/proxy/sleep/"),
    ("vireo-apache", "vireo → Apache prefork + mod_php", "vireo", "proxy", "apache-prefork",
     "/proxy/sleep/"),
]
E2_FPM = [("pm.max_children = 20", "pm.max_children = 500")]  # doc 001's php-fpm


def oha_ramp(url, opts, workdir):
    """opts.e2_conns connections ramped up over opts.e2_ramp s, each sending a request
    every opts.e2_interval s, for opts.e2_duration s in all.  oha cannot ramp, so this
    starts opts.e2_steps oha processes at even intervals, each with conns/steps
    connections and a rate of conns/steps/interval requests/s, all ending together."""
    steps = opts.e2_steps
    conns = opts.e2_conns // steps
    qps = conns / opts.e2_interval
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time() + 0.2
    procs = []
    try:
        for i in range(steps):
            at = i * opts.e2_ramp / steps
            time.sleep(max(0.0, t0 + at - time.time()))
            out, db = workdir / f"oha-{i}.json", workdir / f"oha-{i}.db"
            cmd = ["taskset", "-c", vb.LOAD_CPU, "oha", "--no-tui", "-c", str(conns),
                   "-q", f"{qps:g}", "-z", f"{opts.e2_duration - at:g}s",
                   "-t", f"{opts.e2_timeout}s", "--db-url", str(db),
                   "--output-format", "json", "-o", str(out), url]
            procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE, text=True),
                          time.time() - t0, out, db))
        deadline = t0 + opts.e2_duration + opts.e2_timeout + 60
        for p, *_ in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    finally:
        for p, *_ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    seconds = int(opts.e2_duration + opts.e2_timeout) + 1
    totals, events = {}, []
    for p, started, out, db in procs:
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"oha exited with {p.returncode}: {p.stderr.read()[-500:]}")
        t = vb.parse_oha_json(out.read_text())
        for key in ("sent", "responses", "ok", "non2xx", "failed", "aborted"):
            totals[key] = totals.get(key, 0) + t[key]
        for kind, v in t["errors"].items():
            totals.setdefault("errors", {})
            totals["errors"][kind] = totals["errors"].get(kind, 0) + v
        totals.setdefault("p50s", []).append(t["p50_ms"])
        totals.setdefault("p99s", []).append(t["p99_ms"])
        if db.exists():
            events += [(started + end, 200 <= status < 300)
                       for _, end, status in vb.oha_records(db)]
    ok, bad = vb.per_second(events, seconds)
    offered = [min(steps, int(t // (opts.e2_ramp / steps)) + 1) * qps
               if t < opts.e2_duration else 0 for t in range(seconds)]
    return totals, {"ok_per_s": ok, "non2xx_per_s": bad, "offered_per_s": offered}


def e2_stats(totals, series, opts):
    done = totals["sent"] - totals["aborted"]
    steady = series["ok_per_s"][int(opts.e2_ramp) + 1:int(opts.e2_duration)]
    return {
        "sent": totals["sent"], "succeeded": totals["ok"], "non2xx": totals["non2xx"],
        "failed": totals["failed"], "aborted": totals["aborted"],
        "error_rate": (totals["failed"] + totals["non2xx"]) / done if done else None,
        "qps_steady_median": statistics.median(steady) if steady else None,
        "qps_steady_min": min(steady, default=None), "qps_max": max(series["ok_per_s"], default=0),
        "p50_ms": statistics.median([p for p in totals["p50s"] if p is not None] or [0]),
        "p99_ms": max([p for p in totals["p99s"] if p is not None] or [0]),
    }


def exp_e2(opts, scratch):
    """E2 (doc 001): 5,000 connections, 1 request / 5 s each (≈1,000 QPS), 500 ms PHP route."""
    ctx = Ctx(opts, scratch)
    setups = [s for s in E2_SETUPS if s[2] in opts.servers]
    why = {s[0]: (ctx.unsupported(s[2], s[3]) if s[3] in ("php", "proxy") else None)
           for s in setups}
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in setups]
    progress, results = Progress(sum(1 for k, s in plan if not why[s[0]]), "E2"), []
    for k, (key, name, front_name, kind, backend, path) in plan:
        base = {"server": front_name, "setup": key, "label": name, "kind": kind, "run": k}
        if why[key]:
            if k == 1:
                results.append(dict(base, unsupported=why[key]))
            continue
        progress.step(f"{name}: {opts.e2_conns} connections, {opts.e2_duration} s, "
                      f"run {k}/{opts.runs}")
        try:
            serve_kind = "php" if kind == "modphp" else kind
            edits = E2_FPM if kind == "php" else ()
            with ctx.serving(front_name, serve_kind, fpm_edits=edits, backend=backend) \
                    as (front, backends):
                url = ctx.url(front_name, path)
                check_get(url, contains=b"slept 500 ms")
                settle(front)
                with Meter(front, backends) as m:
                    totals, series = oha_ramp(url, opts, ctx.scratch / f"oha-{key}-{k}")
                stats = e2_stats(totals, series, opts)
                row = dict(base, **stats, **m.result(totals["responses"]), errors=totals.get("errors", {}),
                           series=series)
                results.append(row)
        except (*ERRORS, subprocess.TimeoutExpired) as e:
            results.append(dict(base, error=failure(e)))
        time.sleep(3)  # let the closed connections clear before the next set-up
    progress.close()
    return results


E2_METRICS = ["sent", "succeeded", "failed", "non2xx", "aborted", "error_rate",
              "qps_steady_median", "qps_steady_min", "qps_max", "p50_ms", "p99_ms",
              "cpu_us_per_req", "backend_cpu_us_per_req"]


def summarize_e2(results, servers):
    rows = summarize_points(results, servers, ["setup", "label", "kind"], E2_METRICS)
    for r in rows:  # the first run's time series, for the plot
        first = next((x for x in results if x.get("setup") == r["setup"] and x.get("series")), None)
        if first:
            r["series"] = first["series"]
    return rows


PAPER_001 = {  # seed document 001: JMeter, 5,000 threads in 50 s, 100 s, 64-vCPU VM
    "prefork": "error rate 43 %; QPS low and unstable",
    "nginx-fpm": "59,146 sent, about 50,000 succeeded; QPS up to 800, stable",
    "nginx-apache": "56,464 sent, about 52,000 succeeded; QPS up to 1,000, unstable",
}


def markdown_e2(rows, servers):
    body = []
    for r in rows:
        if r.get("note"):
            body.append([r["label"], short(r["note"])] + [""] * 7 + [PAPER_001.get(r["setup"], "")])
            continue
        body.append([r["label"], fmt(r["sent"], ",.0f"), fmt(r["succeeded"], ",.0f"),
                     fmt(r["failed"] + r["non2xx"], ",.0f"),
                     fmt(100 * r["error_rate"], ".1f") + " %" if r["error_rate"] is not None else "–",
                     f"{fmt(r['qps_steady_median'], ',.0f')} ({fmt(r['qps_steady_min'], ',.0f')})",
                     fmt(r["qps_max"], ",.0f"), f"{fmt(r['p50_ms'], ',.0f')} / {fmt(r['p99_ms'], ',.0f')}",
                     f"{fmt(r['cpu_us_per_req'], '.0f')} / {fmt(r.get('backend_cpu_us_per_req'), '.0f')}",
                     PAPER_001.get(r["setup"], "")])
    return table(["set-up", "requests sent", "succeeded (2xx)", "failed", "error rate",
                  "2xx/s after the ramp: median (min)", "2xx/s max", "latency p50 / p99 ms",
                  "CPU µs/req front / backend", "paper 001"], body)


# ---------------------------------------------------------------- the table

E3_GAPS = (Gap("cpu_us", "CPU µs/req", False, "cpu_min", "cpu_max", ".2f"),
           Gap("rps", "req/s", True, "rps_min", "rps_max", ",.0f"),
           Gap("p99_ms", "p99 ms", False, "p99_min", "p99_max", ".2f"),
           Gap("rss_mb", "RSS MB", False, "rss_min", "rss_max", ".1f"),
           Gap("errors", "errors", False, spec=COUNT))
M_GAPS = (Gap("mb_per_10k", "RSS MB per 10k idle connections", False,
              "mb_per_10k_min", "mb_per_10k_max", ".1f"),
          Gap("served", "idle connections held", True, spec=",.0f"))

# ---------------------------------------------------------------- gzip

def exp_gzip(opts, scratch):
    """gzip level 5 of a 92 KB JS file at c=50: vireo (without, with its variant cache) vs nginx."""
    import random
    ctx = Ctx(opts, scratch)
    # A real minified script where the toolchain ships one (rustdoc's), else JS-like text.
    size, data = 94208, b""
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True,
                             text=True).stdout.strip()
    if sysroot:
        found = sorted(Path(sysroot, "share/doc/rust/html/static.files").glob("*.js"),
                       key=lambda p: (-p.stat().st_size, p.name))
        data = b"".join(p.read_bytes() for p in found)
    source = "rustdoc's static.files/*.js"
    if len(data) < size:
        rnd, source = random.Random(5), "generated JS-like text"
        words = ["function", "return", "var", "this", "length", "null", "if", "else", "for",
                 "prototype", "document", "value", "=", "(", ")", "{", "}", ";", ".", ",", "+"]
        data = " ".join(rnd.choice(words) + (str(rnd.randrange(999)) if rnd.random() < .2
                                             else "") for _ in range(size // 3)).encode()
    plain = data[:size]
    (ctx.root / "app.js").write_bytes(plain)
    variants = [("vireo", "vireo-gzip.conf", (), "vireo"),
                ("vireo", "vireo-gzip.conf", (("compress_cache off;", "compress_cache 16m;"),),
                 "vireo-cache"),
                ("nginx", "nginx-gzip.conf", (), "nginx")]
    plan = [(k, v) for k in range(1, opts.runs + 1) for v in variants if v[0] in opts.servers]
    progress, results, sizes = Progress(len(plan), "gzip"), [], {}
    for k, (name, conf, edits, tag) in plan:
        progress.step(f"{tag:11} app.js gzip 5 run {k}/{opts.runs}")
        try:
            with Server(name, ctx.scratch, ctx.root, ctx.port(name), conf=conf, edits=edits,
                        subst=ctx.subst(), tag=tag) as srv:
                url = ctx.url(name, "app.js")
                sizes[tag] = get_gzip(url, plain)
                run_wrk(url, 1, opts.connections, headers=(GZIP_HEADER,))
                with Meter(srv) as m:
                    w = run_wrk(url, opts.duration, opts.connections, headers=(GZIP_HEADER,))
                results.append(dict(w, server=name, tag=tag, run=k, **m.result(w["requests"])))
        except ERRORS as e:
            results.append({"server": name, "tag": tag, "run": k, "error": failure(e)})
    progress.close()

    def ratio(tag):
        return f"{size / sizes[tag]:.2f}:1" if tag in sizes else "–"
    # Rows for vb.summarize: one "file" group per vireo variant, nginx's runs in each.
    groups = {"vireo": f"92 KB JS ({source}), gzip 5; compression ratio vireo "
                       f"{ratio('vireo')}, nginx {ratio('nginx')}",
              "vireo-cache": f"the same, vireo with compress_cache 16m (ratio "
                             f"{ratio('vireo-cache')})"}
    return [dict(r, path=path, compressed_bytes=sizes.get(r["tag"]))
            for tag, path in groups.items() for r in results if r["tag"] in (tag, "nginx")]



# ---------------------------------------------------------------- proxy (issue 6)

def exp_proxy(opts, scratch):
    """proxy (issue 6): vireo, nginx and HAProxy proxying 2 B and 21 KB to h2o, keep-alive,
    and 2 B to h2o over TLS (an https upstream).

    vireo and nginx with upstream keepalive 64 (and TLS session reuse), HAProxy with
    http-reuse always, in front of the same h2o; front server's CPU µs/req (target
    ≤ 0.7× nginx)."""
    ctx = Ctx(opts, scratch)
    cert, key = make_cert(ctx.scratch)
    points = [(f, "proxy/" + f) for f in PROXY_FILES] + \
             [(f"https:{f}", "proxys/" + f) for f in PROXY_TLS_FILES]
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results = Progress(len(plan) * len(points), "proxy"), []
    for k, s in plan:
        why = ctx.unsupported(s, "proxy")
        if why:
            if k == 1:
                results += [{"server": s, "path": p, "run": k, "unsupported": why}
                            for p, _ in points]
            for _ in points:
                progress.step(f"{s:8} unsupported")
            continue
        tls_backend = Server("h2o", ctx.scratch, ctx.root, ctx.upstream_tls_port,
                             conf="h2o-tls.conf", tag="h2o-tls-backend",
                             subst={"@CERT@": cert, "@KEY@": key,
                                    "@PORT_H2@": ctx.upstream_tls_port + H2_PORT_OFFSET})
        try:
            with ctx.serving(s, "proxy", backend="h2o", edits=PROXY_TLS_EDITS.get(s, ())) \
                    as (front, backends), tls_backend:
                for p, path in points:
                    progress.step(f"{s:8} proxy {p:12} run {k}/{opts.runs}")
                    url = ctx.url(s, path)
                    vb.check_get(url, (ctx.root / path.split("/", 1)[1]).read_bytes())
                    warm_up(url)
                    with Meter(front, backends + [tls_backend]) as m:
                        w = run_wrk(url, opts.duration, opts.connections)
                    results.append(dict(w, server=s, path=p, run=k, **m.result(w["requests"])))
        except ERRORS as e:
            done = {r["path"] for r in results if r["server"] == s and r["run"] == k}
            results += [{"server": s, "path": p, "run": k, "error": failure(e)}
                        for p, _ in points if p not in done]
        progress.step(f"{s:8} proxy grpc unary  run {k}/{opts.runs}")
        results.append(dict(grpc_point(opts, ctx, s), server=s, path="grpc:unary", run=k))
    progress.close()
    return results


GRPC_CALLS = 20000


def grpc_point(opts, ctx, s):
    """Unary gRPC calls (`/test.Echo/Unary`, an 8-byte message) through the front's
    cleartext HTTP/2 listener to a grpcio server: h2load, 10 connections of 10 streams."""
    msg = ctx.scratch / "grpc-unary.bin"
    msg.write_bytes(b"\0\0\0\0\x08" + b"8 bytes!")
    backend = Server("grpc-echo", ctx.scratch, ctx.root, ctx.grpc_port)
    try:
        with ctx.serving(s, "proxy", backend="h2o", edits=PROXY_TLS_EDITS.get(s, ())) \
                as (front, backends), backend:
            cmd = ["taskset", "-c", vb.LOAD_CPU, "h2load", "-n", str(GRPC_CALLS), "-c", "10",
                   "-m", "10", "-d", str(msg), "-H", "content-type: application/grpc",
                   "-H", "te: trailers", f"http://127.0.0.1:{ctx.h2c_port}/test.Echo/Unary"]
            subprocess.run(cmd[:5] + ["1000"] + cmd[6:], capture_output=True, timeout=120)
            with Meter(front, backends + [backend]) as m:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            h = vb.parse_h2load(r.stdout)
            if h["succeeded"] < GRPC_CALLS:
                raise RuntimeError(f"{h['succeeded']} of {GRPC_CALLS} calls succeeded: "
                                   f"{r.stdout[-500:]}")
            return dict(m.result(h["requests"]), errors=h["failed"], p99_ms=None,
                        rps=h["requests"] / m.wall if m.wall else 0.0)
    except ERRORS as e:
        return {"error": failure(e)}


PROXY_FILES = ["2b.txt", "21k.txt"]
PROXY_TLS_FILES = ["2b.txt"]  # proxied from an https upstream (`proxys/`)
# nginx.conf is the peers' own: its https upstream and /proxys/ location are added here
# (vireo-proxy.conf and haproxy.cfg have theirs written in). nginx 1.22 offers TLS 1.3
# to upstreams only when told (the h2o backend speaks nothing older).
GRPC_BLOCK = ("  upstream beg { server @GRPC@; keepalive 64; }\n"
              "  server {\n    listen 127.0.0.1:@PORT_H2C@ http2;\n"
              "    location /test.Echo/ { grpc_pass grpc://beg; }\n  }\n")
PROXY_TLS_EDITS = {"nginx": (
    ("  server {\n", GRPC_BLOCK + "  server {\n"),
    ("  upstream be { server @UPSTREAM@; keepalive 64; }\n",
     "  upstream be { server @UPSTREAM@; keepalive 64; }\n"
     "  upstream bes { server @UPSTREAM_TLS@; keepalive 64; }\n"),
    ('    location /proxy/ { proxy_pass http://be/; proxy_http_version 1.1; '
     'proxy_set_header Connection ""; }\n',
     '    location /proxy/ { proxy_pass http://be/; proxy_http_version 1.1; '
     'proxy_set_header Connection ""; }\n'
     '    location /proxys/ { proxy_pass https://bes/; proxy_http_version 1.1; '
     'proxy_set_header Connection ""; proxy_ssl_session_reuse on; '
     'proxy_ssl_protocols TLSv1.2 TLSv1.3; }\n'),
)}

# ---------------------------------------------------------------- stream (issue 20)

STREAM_SERVERS = ("vireo", "nginx", "haproxy", "relay")
STREAM_SIZE = 1024  # bytes each way of one echo exchange
STREAM_WORKLOADS = {"echo": "1 KB echo exchanges",
                    "bulk": f"{vb.ECHO_SOURCE_MB} MB transfer"}
STREAM_UNITS = {"echo": "exchange", "bulk": "MB"}
STREAM_PEERS = ("nginx", "haproxy")  # vireo's CPU is set beside each, within each run
# The C floor: bench/echo/echo.c relay, copying both ways in 16 KB reads with no
# configuration, parsing or timers; every CPU figure is also set beside its, per run.
STREAM_FLOOR = "relay"
STREAM_ECHO_PORT, STREAM_SOURCE_PORT = 55, 56  # the backends: port-base + these


def parse_echo(out):
    """The line `echo exchange` and `echo fetch` print: exchanges or transfers
    completed, bytes, errors, seconds."""
    m = re.search(r"units=(\d+) bytes=(\d+) errors=(\d+) seconds=([\d.]+)", out)
    if not m:
        raise ValueError(f"no figures in the echo client's output: {out[-300:]!r}")
    return {"units": int(m[1]), "bytes": int(m[2]), "errors": int(m[3]),
            "seconds": float(m[4])}


def echo_client(*args, timeout):
    """bench/echo/echo as a client, pinned to the load CPU: its figures."""
    r = subprocess.run(["taskset", "-c", vb.LOAD_CPU, str(vb.ECHO), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"echo {args[0]}: {(r.stderr or r.stdout).strip()[:300]}")
    return parse_echo(r.stdout)


def stream_point(opts, workload, port, front, backends):
    """One measured load on the front's address `port`, after a check that goes
    through: "echo", exchanges of STREAM_SIZE bytes each way on --connections
    connections for --duration s; "bulk", ECHO_SOURCE_MB transfers one after another
    for --duration s. CPU µs per exchange, or per MB (2^20 bytes) passed."""
    timeout = opts.duration + 60
    if workload == "echo":
        check = echo_client("exchange", port, opts.connections, 1, STREAM_SIZE, timeout=60)
        if not check["units"] or check["errors"]:
            raise RuntimeError(f"echo check: {check['units']} exchanges, {check['errors']} errors")
        with Meter(front, backends) as m:
            c = echo_client("exchange", port, opts.connections, opts.duration, STREAM_SIZE,
                            timeout=timeout)
        units = c["units"]
    else:
        check = echo_client("fetch", port, 0, vb.ECHO_SOURCE_MB, timeout=60)
        if check["units"] != 1 or check["errors"]:
            raise RuntimeError(f"transfer check: {check['bytes']:,} bytes of "
                               f"{vb.ECHO_SOURCE_MB << 20:,}, {check['errors']} errors")
        with Meter(front, backends) as m:
            c = echo_client("fetch", port, opts.duration, vb.ECHO_SOURCE_MB, timeout=timeout)
        units = c["bytes"] / 2**20
    if not c["units"]:
        raise RuntimeError(f"nothing completed ({c['errors']} errors)")
    r = m.result(units)
    return {"completed": c["units"], "per_s": units / c["seconds"] if c["seconds"] else None,
            "cpu_us_per_unit": r["cpu_us_per_req"], "cpu_util": r["cpu_util"],
            "backend_cpu_us_per_unit": r.get("backend_cpu_us_per_req"), "rss_mb": r["rss_mb"],
            "errors": c["errors"]}


def exp_stream(opts, scratch):
    """stream (issue 20): TCP proxy of 1 KB echo exchanges and 100 MB transfers; vireo, nginx, HAProxy.

    vireo's stream {}, nginx's stream module and HAProxy in mode tcp. Each front proxies its address to a C epoll echo backend (c=50, many exchanges per
    connection) and its second address (port + 20) to a C byte source sending 100 MB per
    connection; both backends pinned with the front. Front server's CPU µs per exchange
    and per MB (target: vireo ≤ nginx and HAProxy)."""
    vb.ensure_echo()
    ctx = Ctx(opts, scratch)
    echo_port = opts.port_base + STREAM_ECHO_PORT
    source_port = opts.port_base + STREAM_SOURCE_PORT
    subst = dict(ctx.subst(), **{"@ECHO@": f"127.0.0.1:{echo_port}",
                                 "@SOURCE@": f"127.0.0.1:{source_port}"})
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results, why = Progress(len(plan) * len(STREAM_WORKLOADS), "stream"), [], {}
    with Server("echo", ctx.scratch, ctx.root, echo_port) as echo, \
            Server("echo-source", ctx.scratch, ctx.root, source_port) as source:
        for k, s in plan:
            base = {"server": s, "run": k}
            if s != STREAM_FLOOR and not ctx.conf(s, "stream"):
                why[s] = f"no stream configuration for {s} in bench/conf"
            if s in why:
                if k == 1:
                    results += [dict(base, workload=w, unsupported=why[s])
                                for w in STREAM_WORKLOADS]
                for _ in STREAM_WORKLOADS:
                    progress.step(f"{s:8} not measured")
                continue
            ports = {"echo": ctx.port(s), "bulk": ctx.port(s) + H2_PORT_OFFSET}
            try:
                with Server(s, ctx.scratch, ctx.root, ctx.port(s), conf=ctx.conf(s, "stream"),
                            subst=dict(subst, **{"@PORT_BULK@": ports["bulk"]}),
                            tag=f"{s}-stream") as front:
                    for w in STREAM_WORKLOADS:
                        progress.step(f"{s:8} {STREAM_WORKLOADS[w]:20} run {k}/{opts.runs}")
                        try:
                            results.append(dict(base, workload=w, **stream_point(
                                opts, w, ports[w], front, [echo if w == "echo" else source])))
                        except ERRORS as e:
                            results.append(dict(base, workload=w, error=failure(e)))
            except vb.StartError as e:
                why[s] = refused(s, e)
                results += [dict(base, workload=w, unsupported=why[s]) for w in STREAM_WORKLOADS]
                for _ in STREAM_WORKLOADS:
                    progress.step(f"{s:8} does not start")
            except ERRORS as e:  # not set up (port in use, template): no figure for the rest
                results += [dict(base, workload=w, error=failure(e)) for w in STREAM_WORKLOADS
                            if not any(r["run"] == k and r["server"] == s and r["workload"] == w
                                       for r in results)]
    progress.close()
    return results


STREAM_METRICS = ["cpu_us_per_unit", "per_s", "backend_cpu_us_per_unit", "rss_mb", "errors"]


def summarize_stream(results, servers):
    """Rows per (workload, server); each also carries "vs_nginx", "vs_haproxy" and
    "vs_relay": its CPU per exchange or MB ÷ that peer's or the C floor's, per run
    (median, min–max)."""
    rows = summarize_points(results, servers, ["workload"], STREAM_METRICS)
    for r in rows:
        if r.get("note"):
            continue
        for peer in STREAM_PEERS + (STREAM_FLOOR,):
            if r["server"] != peer:
                r[f"vs_{peer}"], r[f"vs_{peer}_min"], r[f"vs_{peer}_max"] = paired(
                    results, "cpu_us_per_unit", {"server": r["server"], "workload": r["workload"]},
                    {"server": peer, "workload": r["workload"]}, ())
    return rows


def markdown_stream(rows, servers):
    body = []
    for w in dict.fromkeys(r["workload"] for r in rows):
        unit, what = STREAM_UNITS.get(w, "unit"), STREAM_WORKLOADS.get(w, w)
        for s in servers:
            r = find(rows, s, workload=w)
            if r is None:
                continue
            if r.get("note"):
                body.append([what, label(s), short(r["note"])] + [""] * 6)
                continue
            rate = fmt(r.get("per_s"), ",.0f") + (" exchanges/s" if w == "echo" else " MB/s")
            body.append([what, label(s), spread(r, "cpu_us_per_unit", ".2f") + f" per {unit}",
                         *(ratio_cell(r, f"vs_{p}") if s != p else "1"
                           for p in STREAM_PEERS + (STREAM_FLOOR,)),
                         rate, fmt(r.get("backend_cpu_us_per_unit"), ".2f"),
                         fmt(r.get("errors"), ",.0f")])
    return ("Server CPU µs per 1 KB exchange and per MB passed (median, min–max) and its "
            "ratio to nginx's, HAProxy's and the C floor's within each run (target: vireo ≤ "
            "nginx and HAProxy; the floor, bench/echo/echo.c `relay`, is one epoll loop "
            "copying both ways in 16 KB reads, the kernel work every proxy here does):\n\n"
            + table(["workload", "server", "CPU µs", "CPU ÷ nginx", "CPU ÷ HAProxy",
                     "CPU ÷ C floor", "rate", "backend CPU µs (echo, source)", "errors"], body))


# ---------------------------------------------------------------- cache (issue 19)

# The cache in front of the proxy experiment's h2o: /cache/ caches for an hour,
# /storm/ with proxy_cache_lock, logging what went to the origin. The same lines
# for vireo and nginx (both read nginx's grammar).
CACHE_HTTP = ("  proxy_cache_path @DIR@/cache levels=1:2 keys_zone=bench:10m;\n"
              "  proxy_cache_path @DIR@/keys levels=1:2 keys_zone=keys:16m;\n"
              "  log_format up \"$upstream_cache_status $upstream_addr\";\n")
CACHE_LOCATIONS = (
    "    location /cache/ { proxy_pass http://be/; proxy_http_version 1.1; "
    "proxy_set_header Connection \"\"; proxy_cache bench; proxy_cache_valid 200 1h; }\n"
    "    location /storm/ { proxy_pass http://be/; proxy_http_version 1.1; "
    "proxy_set_header Connection \"\"; proxy_cache bench; proxy_cache_valid 200 1h; "
    "proxy_cache_lock on; access_log @DIR@/storm.log up; }\n"
    "    location /keys/ { rewrite ^ /2b.txt break; proxy_pass http://be; "
    "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_cache keys; "
    "proxy_cache_key $request_uri; proxy_cache_valid 200 1h; access_log off; }\n")
CACHE_EDITS = {
    "vireo": (("  upstream be {", CACHE_HTTP + "  upstream be {"),
              ("    location /proxy/ {", CACHE_LOCATIONS + "    location /proxy/ {")),
    "nginx": (("  upstream be {", CACHE_HTTP + "  upstream be {"),
              ("    location /proxy/ {", CACHE_LOCATIONS + "    location /proxy/ {")),
}
STORM_CLIENTS = 1000
# Keys put in the `keys` zone (one 2 B body each) to weigh the index per entry.
KEYS = 100_000


def fill_keys(url, n, scratch):
    """Request n distinct URIs under `url`, one after another (h2load --h1 -c1 from a URI
    list: each client walks the whole list), each a cache MISS stored under its own key;
    the number of 2xx answers."""
    uris = Path(scratch) / "keys.txt"
    uris.write_text("".join(f"{url}{i}\n" for i in range(n)))
    r = subprocess.run(["taskset", "-c", vb.LOAD_CPU, "h2load", "--h1", "-t1", "-c1",
                        f"-n{n}", f"-i{uris}"], capture_output=True, text=True, timeout=600)
    m = re.search(r"status codes: (\d+) 2xx", r.stdout)
    return int(m.group(1)) if m else 0


def exp_cache(opts, scratch):
    """cache (issue 19): HITs of 2 B, 21 KB and 92 KB from proxy_cache beside the same
    server's static file, vireo and nginx in front of h2o; then a MISS storm, 1,000
    clients at once on one cold key with proxy_cache_lock: requests that reached the
    origin (the target is one); then 100,000 keys stored in a fresh zone: the server's
    RSS growth, per 100,000 entries."""
    ctx = Ctx(opts, scratch)
    files = [f for f, _ in FILES]
    points = [(f"static:{f}", f) for f in files] + [(f"hit:{f}", "cache/" + f) for f in files]
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results = Progress(len(plan) * (len(points) + 2), "cache"), []
    for k, s in plan:
        try:
            with ctx.serving(s, "proxy", backend="h2o", edits=CACHE_EDITS[s]) \
                    as (front, backends):
                for p, path in points:
                    progress.step(f"{s:8} {p:14} run {k}/{opts.runs}")
                    url = ctx.url(s, path)
                    vb.check_get(url, (ctx.root / path.split("/")[-1]).read_bytes())
                    warm_up(url)
                    with Meter(front, backends) as m:
                        w = run_wrk(url, opts.duration, opts.connections)
                    results.append(dict(w, server=s, path=p, run=k, **m.result(w["requests"])))
                progress.step(f"{s:8} MISS storm   run {k}/{opts.runs}")
                url = ctx.url(s, f"storm/21k.txt?run={k}")
                log = front.dir / "storm.log"
                before = len(log.read_text().splitlines()) if log.exists() else 0
                a = vb.run_ab(url, STORM_CLIENTS, STORM_CLIENTS, 30)
                time.sleep(0.5)
                lines = log.read_text().splitlines()[before:] if log.exists() else []
                origin = sum(1 for line in lines
                             if line.split(" ", 1)[-1].strip() not in ("", "-"))
                results.append({"server": s, "path": "storm", "run": k, "origin_requests": origin,
                                "complete": a["complete"], "errors": a["errors"],
                                "p99_ms": a["p99_ms"]})
        except ERRORS as e:
            results.append({"server": s, "path": "storm", "run": k, "error": failure(e)})
        # The keys zone on a server just started, with an empty cache: what else it holds
        # is as small as it gets and as steady.
        progress.step(f"{s:8} {KEYS:,} keys   run {k}/{opts.runs}")
        try:
            with ctx.serving(s, "proxy", backend="h2o", edits=CACHE_EDITS[s]) \
                    as (front, backends):
                vb.check_get(ctx.url(s, "2b.txt"), (ctx.root / "2b.txt").read_bytes())
                time.sleep(1)
                before = vb.rss_mb(front.pids())
                answered = fill_keys(ctx.url(s, "keys/"), KEYS, scratch)
                time.sleep(1)
                grown = vb.rss_mb(front.pids()) - before
                # Entries are files: count what the zone holds.
                stored = sum(1 for f in (front.dir / "keys").rglob("*") if f.is_file())
                if answered != KEYS:
                    raise RuntimeError(f"{answered} of {KEYS:,} keys answered 2xx")
                vb.check_get(ctx.url(s, "keys/0"), (ctx.root / "2b.txt").read_bytes())
                results.append({"server": s, "path": "keys", "run": k, "stored": stored,
                                "rss_mb_per_100k": grown * 100_000 / stored if stored else None})
            # The next run starts with an empty zone again (a loader would read these).
            shutil.rmtree(front.dir / "keys", ignore_errors=True)
        except ERRORS as e:
            results.append({"server": s, "path": "keys", "run": k, "error": failure(e)})
    progress.close()
    return results


def summarize_cache(results, servers):
    rows = summarize_points([r for r in results if r["path"] not in ("storm", "keys")],
                            servers, ["path"], ["cpu_us_per_req", "rps"])
    rows += summarize_points([r for r in results if r["path"] == "storm"], servers, ["path"],
                             ["origin_requests", "errors", "p99_ms"])
    rows += summarize_points([r for r in results if r["path"] == "keys"], servers, ["path"],
                             ["rss_mb_per_100k", "stored"])
    return rows


def markdown_cache(rows, servers):
    def cpu(path, server):
        return next((r.get("cpu_us_per_req") for r in rows
                     if r["path"] == path and r["server"] == server), None)
    body = []
    for r in rows:
        if r["path"] in ("storm", "keys"):
            continue
        kind, f = r["path"].split(":")
        static, nginx = cpu(f"static:{f}", r["server"]), cpu(r["path"], "nginx")
        body.append([f, kind, label(r["server"]), spread(r, "cpu_us_per_req", ".2f"),
                     fmt(r.get("rps"), ",.0f"),
                     fmt(r["cpu_us_per_req"] / static, ".2f") + "×"
                     if kind == "hit" and static and r.get("cpu_us_per_req") else "–",
                     fmt(r["cpu_us_per_req"] / nginx, ".2f") + "×"
                     if nginx and r.get("cpu_us_per_req") else "–"])
    out = table(["file", "served", "server", "CPU µs/req", "rps", "÷ own static", "÷ nginx"],
                body)
    storm = [[label(r["server"]), r.get("note") or fmt(r.get("origin_requests"), ".0f"),
              fmt(r.get("errors"), ".0f"), fmt(r.get("p99_ms"), ".0f")]
             for r in rows if r["path"] == "storm"]
    keys = [[label(r["server"]), r.get("note") or spread(r, "rss_mb_per_100k", ".1f"),
             fmt(r.get("stored"), ",.0f")]
            for r in rows if r["path"] == "keys"]
    return (out + "\n" + table([f"MISS storm ({STORM_CLIENTS} clients, one cold key, "
                                "proxy_cache_lock)", "requests to the origin", "errors",
                                "p99 ms"], storm)
            + "\n" + table([f"{KEYS:,} keys stored (2 B bodies, a fresh keys zone)",
                             "RSS growth, MB per 100,000 entries", "entries stored"], keys))


# ---------------------------------------------------------------- paired ratios

def paired(results, metric, num, den, same):
    """Ratios metric(num) ÷ metric(den) between results of the same run that agree on
    the keys `same`; num and den select the two sides ({key: value}).  In one run the
    two were measured minutes apart on the same machine, so the ratio is steadier than
    one of medians.  Returns (median, min, max) of the per-run ratios."""
    ok = [r for r in results if r.get(metric) and not r.get("error") and not r.get("unsupported")]

    def side(r, want):
        return all(r.get(k) == v for k, v in want.items())
    ratios = []
    for a in ok:
        if side(a, num):
            b = next((b for b in ok if side(b, den) and
                      all(b.get(k) == a.get(k) for k in (*same, "run"))), None)
            if b:
                ratios.append(a[metric] / b[metric])
    return median_spread(ratios)


def refused(name, e):
    """The note for a server that did not start with an experiment's config."""
    return f"{name}: does not start with this config: {e.reason}"


def ratio_cell(row, key="ratio"):
    """A ratio: median× (min–max) over runs."""
    if row.get(key) is None:
        return "–"
    cell = f"{row[key]:.3f}×"
    lo, hi = row.get(key + "_min"), row.get(key + "_max")
    return cell + (f" ({lo:.3f}–{hi:.3f})" if row.get("runs", 1) > 1 and lo != hi else "")


# ---------------------------------------------------------------- routes (issue 4)

ROUTES_FILES = ["21k.txt", "2b.txt"]
# "single": E3's config; "routes": the same with conf/routes.inc's 30 locations
ROUTES_CONFIGS = ["single", "routes"]
ROUTES_LABELS = {"single": "E3's config", "routes": "30 locations"}
# nginx.conf's proxy and PHP locations are not part of static serving: without them its
# pair of configs routes exactly as vireo's
NGINX_STATIC = [
    ('    location /proxy/ { proxy_pass http://be/; proxy_http_version 1.1; '
     'proxy_set_header Connection ""; }\n', ""),
    ("    location ~ \\.php$ {\n      fastcgi_pass @FPM@;\n      include /etc/nginx/fastcgi_params;\n"
     "      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n    }\n", ""),
]
# GETs that show the 30-location config routes as intended: try_files' named fallback,
# regex captures (numbered and named)
ROUTES_PROBES = [("nothing/here", b"app /nothing/here\n"), ("users/42", b"user 42\n"),
                 ("api/v2/items/7", b"items 7\n"), ("healthz", b"ok\n")]
ROUTES_SERVERS = ("vireo", "nginx")  # the servers with nginx's config grammar


def routes_edits(name, config):
    """Edits of the server's E3 template that make the `config` variant."""
    edits = list(NGINX_STATIC) if name == "nginx" else []
    if config == "routes":
        edits.append(("    root @ROOT@;\n", (vb.CONF / "routes.inc").read_text()))
    return edits


def exp_routes(opts, scratch):
    """routing (issue 4): 2 B and 21 KB with E3's config and with 30 locations; CPU µs/req."""
    ctx = Ctx(opts, scratch)
    plan = [(k, s, c) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)
            for c in order(ROUTES_CONFIGS, k)]
    progress, results, why = Progress(len(plan) * len(ROUTES_FILES), "routes"), [], {}
    for k, s, config in plan:
        base = {"server": s, "config": config, "run": k}
        if s not in ROUTES_SERVERS:
            why[s, config] = f"no nginx-syntax configuration for {s}"
        if (s, config) in why:
            if k == 1:
                results += [dict(base, path=p, unsupported=why[s, config]) for p in ROUTES_FILES]
            for _ in ROUTES_FILES:
                progress.step(f"{s:8} {config:6} not measured")
            continue
        done = 0
        try:
            with Server(s, ctx.scratch, ctx.root, ctx.port(s), edits=routes_edits(s, config),
                        subst=ctx.subst(), tag=f"{s}-{config}") as srv:
                if config == "routes":
                    for path, body in ROUTES_PROBES:
                        check_get(ctx.url(s, path), body)
                for path in ROUTES_FILES:
                    progress.step(f"{s:8} {config:6} {path:8} run {k}/{opts.runs}")
                    done += 1
                    url = ctx.check(s, path)
                    warm_up(url)
                    with Meter(srv) as m:
                        w = run_wrk(url, opts.duration, opts.connections)
                    results.append(dict(w, **base, path=path, **m.result(w["requests"])))
        except vb.StartError as e:
            why[s, config] = refused(s, e)
            results += [dict(base, path=p, unsupported=why[s, config]) for p in ROUTES_FILES]
            for _ in ROUTES_FILES:
                progress.step(f"{s:8} {config:6} does not start")
        except ERRORS as e:
            for path in ROUTES_FILES[max(done - 1, 0):]:
                results.append(dict(base, path=path, error=failure(e)))
            for _ in ROUTES_FILES[done:]:
                progress.step(f"{s:8} skipped after an error")
    progress.close()
    return results


ROUTES_METRICS = ["rps", "cpu_us_per_req", "p99_ms", "rss_mb", "errors"]


def summarize_routes(results, servers):
    """Rows per (file, config, server); the 30-location rows also carry "ratio": their
    CPU µs/req ÷ that of E3's config, per run (median, min–max)."""
    rows = summarize_points(results, servers, ["path", "config"], ROUTES_METRICS)
    for r in rows:
        if r["config"] == "routes" and not r.get("note"):
            r["ratio"], r["ratio_min"], r["ratio_max"] = paired(
                results, "cpu_us_per_req", {"server": r["server"], "path": r["path"],
                                            "config": "routes"},
                {"server": r["server"], "path": r["path"], "config": "single"}, ())
    return rows


def markdown_routes(rows, servers):
    body = []
    for path in dict.fromkeys(r["path"] for r in rows):
        for s in servers:
            one, many = find(rows, s, path=path, config="single"), \
                find(rows, s, path=path, config="routes")
            if one is None and many is None:
                continue
            note = next((r["note"] for r in (one, many) if r and r.get("note")), None)
            if note:
                body.append([SIZES.get(path, path), label(s), note, "", "", "", ""])
                continue
            body.append([SIZES.get(path, path), label(s), spread(one, "cpu_us_per_req", ".2f"),
                         spread(many, "cpu_us_per_req", ".2f"), ratio_cell(many),
                         f"{fmt(one['rps'], ',.0f')} / {fmt(many['rps'], ',.0f')}",
                         fmt(one["errors"] + many["errors"], ",.0f")])
    return ("Server CPU µs per request with E3's config and with the 30-location one "
            "(median, min–max), and their ratio within each run (target ≤ 1.05):\n\n"
            + table(["file", "server", "CPU µs/req, E3's config", "CPU µs/req, 30 locations",
                     "30 locations ÷ E3's config", "req/s (E3's / 30 locations)", "errors"],
                    body))


# ---------------------------------------------------------------- modules (filters and subrequests)

MODULES_HTML = "page.html"          # the 92 KB HTML page sub_filter rewrites
MODULES_HTML_SIZE = 94208
MODULES_FROM, MODULES_TO = b"http://example.com/", b"https://www.example.org/"
# path -> (what it measures, the file it serves)
MODULES_PATHS = {
    "sub/page.html": ("sub_filter, 92 KB HTML", MODULES_HTML),
    "page.html": ("92 KB HTML, no filter", MODULES_HTML),
    "auth/2b.txt": ("auth_request (204), 2 B", "2b.txt"),
    "2b.txt": ("2 B, no auth_request", "2b.txt"),
}
# This block replaces the E3 template's "root @ROOT@;" line in both servers: sub_filter
# rewriting every link of the page, and auth_request to a local location answering 204.
MODULES_CONF = (
    "    root @ROOT@;\n"
    "    location /sub/ {\n"
    "      alias @ROOT@/;\n"
    f"      sub_filter '{MODULES_FROM.decode()}' '{MODULES_TO.decode()}';\n"
    "      sub_filter_once off;\n"
    "    }\n"
    "    location /auth/ { alias @ROOT@/; auth_request /_auth; }\n"
    "    location = /_auth { internal; return 204; }\n")
MODULES_SERVERS = ("vireo", "nginx")
SIZES.update({p: w for p, (w, _) in MODULES_PATHS.items() if p not in SIZES})


def modules_page():
    """A 92 KB HTML page of paragraphs and lists of links, as a site's page has them."""
    head = (b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Catalogue</title>\n"
            b"<link rel=\"stylesheet\" href=\"" + MODULES_FROM + b"static/site.css\">\n"
            b"</head>\n<body>\n<h1>Catalogue</h1>\n")
    parts, i = [head], 0
    while sum(map(len, parts)) < MODULES_HTML_SIZE:
        parts.append(
            b"<div class=\"item\"><h2>Item %d</h2>\n<p>Item %d is described here in a few "
            b"sentences of running text, with its price, its size and where to find it.</p>\n"
            b"<ul><li><a href=\"%sitems/%d\">details</a></li><li><a href=\"%sreviews/%d\">"
            b"reviews</a></li></ul></div>\n" % (i, i, MODULES_FROM, i, MODULES_FROM, i))
        i += 1
    tail = b"</body></html>\n"
    body = b"".join(parts)[:MODULES_HTML_SIZE - len(tail)]
    return body[:body.rindex(b"\n") + 1] + tail


def modules_edits(name):
    return (list(NGINX_STATIC) if name == "nginx" else []) + [("    root @ROOT@;\n", MODULES_CONF)]


def exp_modules(opts, scratch):
    """modules: sub_filter on 92 KB HTML and auth_request before a 2 B file, vireo vs nginx."""
    ctx = Ctx(opts, scratch)
    page = modules_page()
    (ctx.root / MODULES_HTML).write_bytes(page)
    expect = {p: (ctx.root / f).read_bytes() for p, (_, f) in MODULES_PATHS.items()}
    expect["sub/page.html"] = page.replace(MODULES_FROM, MODULES_TO)
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results = Progress(len(plan) * len(MODULES_PATHS), "modules"), []
    for k, s in plan:
        base = {"server": s, "run": k}
        if s not in MODULES_SERVERS:
            if k == 1:
                results += [dict(base, path=p, unsupported=f"no nginx-syntax configuration for {s}")
                            for p in MODULES_PATHS]
            for _ in MODULES_PATHS:
                progress.step(f"{s:8} not measured")
            continue
        done = 0
        try:
            with Server(s, ctx.scratch, ctx.root, ctx.port(s), edits=modules_edits(s),
                        subst=ctx.subst(), tag=f"{s}-modules") as srv:
                for path in MODULES_PATHS:
                    progress.step(f"{s:8} {path:14} run {k}/{opts.runs}")
                    done += 1
                    url = ctx.url(s, path)
                    check_get(url, expect[path])
                    warm_up(url)
                    with Meter(srv) as m:
                        w = run_wrk(url, opts.duration, opts.connections)
                    results.append(dict(w, **base, path=path, **m.result(w["requests"])))
        except vb.StartError as e:
            results += [dict(base, path=p, unsupported=refused(s, e)) for p in MODULES_PATHS]
            for _ in list(MODULES_PATHS)[done:]:
                progress.step(f"{s:8} does not start")
        except ERRORS as e:
            results += [dict(base, path=p, error=failure(e)) for p in list(MODULES_PATHS)[max(done - 1, 0):]]
            for _ in list(MODULES_PATHS)[done:]:
                progress.step(f"{s:8} skipped after an error")
    progress.close()
    return results


MODULES_METRICS = ["rps", "cpu_us_per_req", "p99_ms", "rss_mb", "errors"]


def summarize_modules(results, servers):
    """Rows per (path, server); vireo's also carry "vs_nginx": its CPU µs/req ÷ nginx's,
    per run (median, min–max)."""
    rows = summarize_points(results, servers, ["path"], MODULES_METRICS)
    for r in rows:
        if r["server"] != "nginx" and not r.get("note"):
            r["vs_nginx"], r["vs_nginx_min"], r["vs_nginx_max"] = paired(
                results, "cpu_us_per_req", {"server": r["server"], "path": r["path"]},
                {"server": "nginx", "path": r["path"]}, ())
    return rows


def markdown_modules(rows, servers):
    body = []
    for path in dict.fromkeys(r["path"] for r in rows):
        for s in servers:
            r = find(rows, s, path=path)
            if r is None:
                continue
            what = MODULES_PATHS.get(path, (path,))[0]
            if r.get("note"):
                body.append([what, label(s), short(r["note"]), "", "", ""])
                continue
            body.append([what, label(s), spread(r, "cpu_us_per_req", ".2f"),
                         ratio_cell(r, "vs_nginx") if s != "nginx" else "1", fmt(r["rps"], ",.0f"),
                         fmt(r["errors"], ",.0f")])
    return ("Server CPU µs per request (median, min–max) and its ratio to nginx's within "
            "each run:\n\n"
            + table(["workload", "server", "CPU µs/req", "CPU ÷ nginx", "req/s", "errors"], body))


# ---------------------------------------------------------------- TLS and HTTP/2 (issue 9)

TLS_FILE = "21k.txt"
TLS_PROTOS = ["h1", "h2", "h3"]
TLS_LABELS = {"h1": "TLS 1.3, HTTP/1.1 keep-alive", "h2": "TLS 1.3, HTTP/2",
              "h3": "QUIC, HTTP/3"}
H2_PORT_OFFSET = 20  # a server's second address (tls: HTTP/2; stream: the transfers): port + 20
H3_PORT_OFFSET = 40  # tls: the UDP port of HTTP/3, port + 40
TLS_WARMUP = 1.0     # s of h2load warm-up: the handshakes, before the counted requests


def make_cert(d):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost in d:
    (cert.pem, key.pem)."""
    cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


def tls_point(opts, ctx, srv, proto, url, cert, expect):
    """One measured h2load run over TLS against a started server: checked first with
    curl, refused if h2load negotiated anything but TLS 1.3 and the expected ALPN.
    HTTP/3 runs bench/h3load (curl here has no HTTP/3): it counts a body whose length
    is not its Content-Length as failed."""
    if proto != "h3":
        vb.check_tls(url, expect, cert, "2" if proto == "h2" else "1.1")
    settle(srv)
    m = Meter(srv)
    streams = opts.h2_streams if proto == "h2" else None
    h = run_h2load(url, opts.connections, opts.duration, TLS_WARMUP, ctx.scratch / "h2load.log",
                   on_main=m.mark, streams=streams, h3=proto == "h3")
    want = ("TLSv1.3", {"h1": "http/1.1"}.get(proto, proto))
    if (h["tls_protocol"], h["alpn"]) != want:
        raise RuntimeError(f"h2load negotiated {h['tls_protocol']} and ALPN {h['alpn']}, "
                           f"not {want[0]} and {want[1]}")
    return dict(h, streams=streams or 1, **m.result(h["requests"]))


def tls_protos(conf):
    """The protocols a TLS template offers: HTTP/3 where it has a @PORT_H3@ to listen on."""
    return [p for p in TLS_PROTOS if p != "h3" or "@PORT_H3@" in (vb.CONF / conf).read_text()]


def exp_tls(opts, scratch):
    """TLS (issue 9): 21 KB over TLS 1.3 keep-alive (h2load --h1), HTTP/2 (h2load -m) and
    HTTP/3 (bench/h3load) where the server offers it."""
    ctx = Ctx(opts, scratch)
    cert, key = make_cert(ctx.scratch)
    expect = (ctx.root / TLS_FILE).read_bytes()
    plan = [(k, s) for k in range(1, opts.runs + 1) for s in order(opts.servers, k)]
    progress, results, why = Progress(len(plan) * len(TLS_PROTOS), "tls"), [], {}
    for k, s in plan:
        base = {"server": s, "path": TLS_FILE, "run": k}
        if not ctx.conf(s, "tls"):
            why[s] = f"no TLS configuration for {s} in bench/conf"
        if s in why:
            if k == 1:
                results += [dict(base, proto=p, unsupported=why[s]) for p in TLS_PROTOS]
            for _ in TLS_PROTOS:
                progress.step(f"{s:8} not measured")
            continue
        protos = tls_protos(ctx.conf(s, "tls"))
        for p in TLS_PROTOS:
            if p not in protos:
                if k == 1:
                    results.append(dict(base, proto=p, unsupported=f"no {TLS_LABELS[p]} in {s}"))
                progress.step(f"{s:8} no {p}")
        h2_port = ctx.port(s) + H2_PORT_OFFSET
        h3_port = ctx.port(s) + H3_PORT_OFFSET
        subst = dict(ctx.subst(), **{"@CERT@": cert, "@KEY@": key, "@PORT_H2@": h2_port,
                                     "@PORT_H3@": h3_port})
        ports = {"h1": ctx.port(s), "h2": h2_port, "h3": h3_port}
        try:
            with Server(s, ctx.scratch, ctx.root, ctx.port(s), conf=ctx.conf(s, "tls"),
                        subst=subst, tag=f"{s}-tls") as srv:
                for proto in order(protos, k):  # one failing (no h2 yet) spares the other
                    progress.step(f"{s:8} {TLS_LABELS[proto]} run {k}/{opts.runs}")
                    url = f"https://127.0.0.1:{ports[proto]}/{TLS_FILE}"
                    try:
                        results.append(dict(base, proto=proto, **tls_point(
                            opts, ctx, srv, proto, url, cert, expect)))
                    except ERRORS as e:
                        results.append(dict(base, proto=proto, error=failure(e)))
        except vb.StartError as e:
            why[s] = refused(s, e)
            results += [dict(base, proto=p, unsupported=why[s]) for p in protos]
            for _ in protos:
                progress.step(f"{s:8} does not start")
        except ERRORS as e:  # not set up (port in use, template): no figure for what is left
            results += [dict(base, proto=p, error=failure(e)) for p in protos
                        if not any(r["run"] == k and r["server"] == s and r["proto"] == p
                                   for r in results)]
    progress.close()
    return results


TLS_METRICS = ["ok_rps", "cpu_us_per_req", "p50_ms", "p99_ms", "succeeded", "errors",
               "rss_mb"]


TLS_REFERENCE = {"h1": "nginx", "h2": "nginx", "h3": "caddy"}  # nginx 1.22 has no HTTP/3


def summarize_tls(results, servers):
    """Rows per (protocol, server); "vs_ref": CPU µs/req ÷ the reference's in the same run
    (median, min–max): nginx's, Caddy's for HTTP/3; "negotiated": what TLS and ALPN
    agreed on."""
    rows = summarize_points(results, servers, ["proto", "path"], TLS_METRICS)
    for r in rows:
        if r.get("note"):
            continue
        r["vs_ref"], r["vs_ref_min"], r["vs_ref_max"] = paired(
            results, "cpu_us_per_req", {"server": r["server"], "proto": r["proto"]},
            {"server": TLS_REFERENCE[r["proto"]], "proto": r["proto"]}, ("path",))
        first = next(x for x in results if x["server"] == r["server"] and
                     x["proto"] == r["proto"] and x.get("tls_protocol"))
        r["negotiated"] = f"{first['tls_protocol']} {first['cipher']}, " \
                          f"{first['key_exchange']}, ALPN {first['alpn']}"
        r["streams"] = first.get("streams")
    return rows


def markdown_tls(rows, servers):
    body = []
    for r in rows:
        if r.get("note"):
            body.append([TLS_LABELS.get(r["proto"]), label(r["server"]), r["note"]]
                        + [""] * 5)
            continue
        body.append([TLS_LABELS.get(r["proto"]), label(r["server"]),
                     spread(r, "cpu_us_per_req", ".2f"), ratio_cell(r, "vs_ref"),
                     spread(r, "ok_rps", ",.0f"),
                     f"{fmt(r['p50_ms'], '.2f')} / {fmt(r['p99_ms'], '.2f')}",
                     fmt(r["errors"], ",.0f"), r["negotiated"]])
    return ("21 KB file; server CPU µs per request (median, min–max) and its ratio to nginx's "
            "within each run, to Caddy's for HTTP/3 (nginx 1.22 has none; target ≤ 1). "
            "HTTP/3 is driven by bench/h3load (h2load's runs over QUIC, one request at a "
            "time per connection):\n\n"
            + table(["protocol", "server", "CPU µs/req", "CPU ÷ nginx (HTTP/3: Caddy)",
                     "successful req/s",
                     "p50 / p99 ms", "failed", "negotiated"], body))


EXPERIMENTS = {
    "E1": Experiment(exp_e1, summarize_e1, markdown_e1, tuple(vb.PEERS) + ("floor",), ("wrk", "h2load"), duration=1.5,
                     php=True, keys=("path", "clients"),
                     gaps=(Gap("cpu_us_per_req", "server CPU µs/req", False, "cpu_us_per_req_min",
                               "cpu_us_per_req_max", ".1f"),
                           Gap("ok_rps", "successful req/s", True, "ok_rps_min", "ok_rps_max", ",.0f"),
                           Gap("errors", "failed requests", False, "errors_min", "errors_max", COUNT),
                           Gap("p99_ms", "p99 ms", False, "p99_ms_min", "p99_ms_max", ",.1f")),
                     title="E1 — concurrency sweep (paper 000, table 1)"),
    "E2": Experiment(exp_e2, summarize_e2, markdown_e2,
                     ("apache-prefork", "nginx", "vireo"), ("oha",), runs=1, php=True,
                     keys=("kind",),
                     gaps=(Gap("succeeded", "succeeded requests", True, spec=",.0f"),
                           Gap("error_rate", "error rate", False, spec=".3f")),
                     title="E2 — slow backend, 5,000 connections at ≈1,000 QPS (paper 001)"),
    "E3": Experiment(exp_e3, vb.summarize, markdown_e3, tuple(vb.PEERS) + ("floor",), ("wrk",), php=True, duration=4,
                     keys=("file",),
                     gaps=E3_GAPS,
                     title="E3 — static sizes, phpinfo() and memory (paper 003)"),
    "E3-seed": Experiment(exp_e3_seed, summarize_variant, markdown_variant, NGINX_SYNTAX,
                          ("wrk",), duration=4, keys=("file",), gaps=E3_GAPS,
                          title="E3-seed — E3's files on the seed's tuned nginx.conf (papers 002, 003)"),
    "E3-pool": Experiment(exp_e3_pool, summarize_variant, markdown_variant, NGINX_SYNTAX,
                          ("wrk",), duration=4, php=True, keys=("file",), gaps=E3_GAPS,
                          title="E3-pool — phpinfo() through a pooled FastCGI upstream (paper 003)"),
    "E4": Experiment(exp_e4, summarize_e4, markdown_e4, tuple(vb.PEERS), ("wrk", "ab"), runs=3,
                     php=True, keys=("path",),
                     gaps=(Gap("rps", "req/s", True, "rps_min", "rps_max", ",.0f"),
                           Gap("failed_real", "failed requests", False, "failed_real_min",
                               "failed_real_max", COUNT),
                           Gap("p50_ms", "p50 ms", False, "p50_ms_min", "p50_ms_max", ",.0f"),
                           Gap("p99_ms", "p99 ms", False, "p99_ms_min", "p99_ms_max", ",.0f"),
                           Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                               "cpu_us_per_req_max", ".1f")),
                     title="E4 — ab -c 1000 (paper 004)"),
    "E5": Experiment(exp_e5, summarize_e5, markdown_e5, ("vireo", "nginx", "floor"), ("wrk",),
                     keys=("path",), gaps=(Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                               "cpu_us_per_req_max", ".2f"),
                           Gap("rps", "req/s", True, "rps_min", "rps_max", ",.0f")),
                     title="E5 — per-core ceiling with the tuned directives (paper 002), and the C floor"),
    "M": Experiment(exp_idle, summarize_idle, markdown_idle, tuple(vb.PEERS), (),
                    gaps=M_GAPS,
                    title="M — memory per 10,000 idle keep-alive connections"),
    "quick": Experiment(exp_quick, vb.summarize, markdown_e3, ("vireo", "nginx"), ("wrk",),
                        php=True, duration=4, keys=("file",), gaps=E3_GAPS, title="quick — E3, vireo vs nginx"),
    "idle": Experiment(exp_idle, summarize_idle, markdown_idle, ("vireo", "nginx"), (),
                       gaps=M_GAPS, title="idle — M, vireo vs nginx"),
    "proxy": Experiment(exp_proxy, vb.summarize, vb.markdown, ("vireo", "nginx", "haproxy"),
                        ("wrk", "h2load", "h2o"), keys=("file",), gaps=E3_GAPS[:1],
                        title="proxy — reverse proxy to h2o with upstream keepalive (issue 6)"),
    "stream": Experiment(exp_stream, summarize_stream, markdown_stream, STREAM_SERVERS, ("cc",),
                         keys=("workload",),
                         gaps=(Gap("cpu_us_per_unit", "CPU µs per exchange / per MB", False,
                                   "cpu_us_per_unit_min", "cpu_us_per_unit_max", ".2f"),),
                         needs=(("nginx", "mod_stream"),),
                         title="stream — TCP proxy of 1 KB echo exchanges and of a 100 MB "
                               "transfer (issue 20)"),
    "routes": Experiment(exp_routes, summarize_routes, markdown_routes, ROUTES_SERVERS,
                         ("wrk",), duration=4, runs=5, keys=("path", "config"),
                         gaps=(Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                                   "cpu_us_per_req_max", ".2f"),
                               Gap("ratio", "CPU 30 locations ÷ E3's config", False,
                                   "ratio_min", "ratio_max", ".3f")),
                         title="routes — 30 locations against E3's config (issue 4)"),
    "tls": Experiment(exp_tls, summarize_tls, markdown_tls,
                      ("vireo", "nginx", "h2o", "lighttpd", "caddy"),
                      ("h2load", "h3load", "openssl", "curl"), duration=4, runs=3,
                      keys=("proto",),
                      gaps=(Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                                "cpu_us_per_req_max", ".2f"),
                            Gap("errors", "failed requests", False, "errors_min", "errors_max",
                                COUNT)),
                      needs=(("lighttpd", "mod_openssl"),),
                      title="tls — 21 KB over TLS 1.3, HTTP/2 and HTTP/3 (issues 9, 21)"),
    "modules": Experiment(exp_modules, summarize_modules, markdown_modules, MODULES_SERVERS,
                          ("wrk",), duration=4, runs=3, keys=("path",),
                          gaps=(Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                                    "cpu_us_per_req_max", ".2f"),),
                          title="modules — sub_filter on 92 KB HTML, auth_request before 2 B"),
    "cache": Experiment(exp_cache, summarize_cache, markdown_cache, ("vireo", "nginx"),
                        ("wrk", "ab", "h2load"), keys=("path",),
                        gaps=(Gap("cpu_us_per_req", "CPU µs/req", False, "cpu_us_per_req_min",
                                  "cpu_us_per_req_max", ".2f"),
                              Gap("rss_mb_per_100k", "RSS MB per 100,000 keys", False,
                                  "rss_mb_per_100k_min", "rss_mb_per_100k_max", ".1f")),
                        title="cache — proxy_cache HITs beside static files, a MISS storm, "
                              "and the keys zone's memory (issue 19)"),
    "gzip": Experiment(exp_gzip, vb.summarize, vb.markdown, ("vireo", "nginx"), ("wrk",),
                       keys=("file",), gaps=E3_GAPS[:1],
                       title="gzip — on-the-fly gzip 5 of a 92 KB JS file (issue 7)"),
}
