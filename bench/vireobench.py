"""vireo benchmarks: the method of DESIGN.md section 3, as code.

Every server (and its PHP or proxy backend) runs pinned to CPU 0 with one
worker; the load generator (wrk, ab, oha) runs pinned to CPU 1.  The server's
CPU (utime+stime of all its processes, plus children they reaped, from /proc)
is read before and after each load run; CPU us per request = delta / requests.
Servers are interleaved and every measurement repeated, because the machine is
shared: CPU us per request is the robust figure, rps and p99 are noisy.

Experiments are in experiments.py (EXPERIMENTS); `bench/run NAME` runs one,
`bench/run all` runs them all and writes the report and docs/benchmarks.md.
"""
import argparse
import datetime
import glob
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VIREO = REPO / "target" / "release" / "vireo"
H3LOAD = REPO / "target" / "release" / "h3load"  # bench/h3load: h2load's runs over HTTP/3
RESULTS = BENCH / "results"
CONF = BENCH / "conf"
FLOOR_SRC = BENCH / "floor" / "floor.c"
FLOOR = BENCH / "floor" / "floor"
ECHO_SRC = BENCH / "echo" / "echo.c"
ECHO = BENCH / "echo" / "echo"
ECHO_SOURCE_MB = 100  # MiB the stream experiment's byte source sends per connection
SHARED_PEERS = REPO.parent / "shared" / "peers"

SERVER_CPU, LOAD_CPU = "0", "1"

# name in the URL, size in bytes
FILES = [("2b.txt", 2), ("21k.txt", 21504), ("92k.txt", 94208)]
PHPINFO = "info.php"
SLEEP = "sleep.php"


def php_fpm_binary():
    found = sorted(glob.glob("/usr/sbin/php-fpm*"))
    return found[-1] if found else "php-fpm8.2"


# How to start each server: config template in bench/conf/, command line (given the
# Server), version command, stop signal.  "php": the template that serves PHP through
# php-fpm, or why the server has none; "proxy": the same for the reverse proxy.
SERVERS = {
    "vireo": {
        "conf": "vireo.conf", "php": "vireo-php.conf", "proxy": "vireo-proxy.conf",
        "tuned": "tuned.conf", "tls": "vireo-tls.conf", "stream": "vireo-stream.conf",
        "cmd": lambda s: [str(VIREO), "-c", str(s.conf)],
        "test": lambda conf: [str(VIREO), "-t", "-c", str(conf)],
        "version": [str(VIREO), "-V"], "stop": signal.SIGQUIT,
    },
    "nginx": {
        "conf": "nginx.conf", "php": "nginx.conf", "proxy": "nginx.conf", "tuned": "tuned.conf",
        "tls": "nginx-tls.conf", "stream": "nginx-stream.conf",
        "cmd": lambda s: ["nginx", "-p", f"{s.dir}/", "-e", str(s.dir / "nginx-error.log"),
                          "-c", str(s.conf)],
        "version": ["nginx", "-v"], "stop": signal.SIGQUIT,
        # peers/nginx.conf as an nginx user serving a connection per request tunes it
        # (README: How each peer is tuned); the other nginx templates have it written in
        "edits": {"nginx.conf": (("reuseport backlog=4096;", "reuseport backlog=4096 deferred;"),)},
    },
    "lighttpd": {
        "conf": "lighttpd.conf", "php": "lighttpd.conf", "tls": "lighttpd-tls.conf",
        "cmd": lambda s: ["lighttpd", "-D", "-f", str(s.conf)],
        "version": ["lighttpd", "-v"], "stop": signal.SIGTERM,
    },
    "h2o": {
        "conf": "h2o.conf", "php": "no PHP config for h2o in peers/ (static only)",
        "tls": "h2o-tls.conf",
        "cmd": lambda s: ["h2o", "-c", str(s.conf)],
        "version": ["h2o", "-v"], "stop": signal.SIGTERM,
        "ignore": ("perl",),  # h2o's backtrace helper: not part of serving
    },
    "apache": {  # Apache 2.4, event MPM, PHP through proxy_fcgi
        "conf": "apache-event.conf", "php": "apache-event.conf",
        "cmd": lambda s: ["apache2", "-f", str(s.conf), "-DFOREGROUND"],
        "version": ["apache2", "-v"], "stop": signal.SIGTERM,
    },
    "apache-prefork": {  # Apache 2.4, prefork MPM + mod_php (E2)
        "conf": "apache-prefork.conf", "php": "apache-prefork.conf",
        "cmd": lambda s: ["apache2", "-f", str(s.conf), "-DFOREGROUND"],
        "version": ["apache2", "-v"], "stop": signal.SIGTERM, "start_timeout": 60,
    },
    "php-fpm": {  # the FastCGI backend, not a web server
        "conf": "php-fpm.conf",
        "cmd": lambda s: [php_fpm_binary(), "-F", "-y", str(s.conf)],
        "version": [php_fpm_binary(), "-v"], "stop": signal.SIGTERM, "start_timeout": 60,
    },
    "caddy": {  # Caddy 2.6: static files, PHP through php_fastcgi, TLS; one Go thread
        "conf": "Caddyfile", "php": "Caddyfile", "tls": "Caddyfile-tls",
        "cmd": lambda s: ["env", "GOMAXPROCS=1", f"XDG_CONFIG_HOME={s.dir}",
                          f"XDG_DATA_HOME={s.dir}", "caddy", "run", "--config", str(s.conf),
                          "--adapter", "caddyfile"],
        "version": ["caddy", "version"], "stop": signal.SIGTERM,
    },
    "haproxy": {  # HAProxy 2.6: a proxy only (the proxy and stream experiments)
        "conf": "haproxy.cfg", "proxy": "haproxy.cfg", "stream": "haproxy-stream.cfg",
        "no_static": "HAProxy serves no files (a peer in the proxy and stream experiments only)",
        "cmd": lambda s: ["haproxy", "-db", "-f", str(s.conf)],
        "version": ["haproxy", "-v"], "stop": signal.SIGTERM,
    },
    "grpc-echo": {  # the proxy experiment's gRPC backend: tests/grpc/peer.py (grpcio)
        "conf": None,
        "cmd": lambda s: ["python3", str(REPO / "tests" / "grpc" / "peer.py"), "server",
                          str(s.port)],
        "version": ["python3", "-c", "import grpc; print('grpcio', grpc.__version__)"],
        "stop": signal.SIGTERM,
    },
    "echo": {  # bench/echo/echo.c serve: the stream experiment's echo backend
        "conf": None,
        "cmd": lambda s: [str(ECHO), "serve", str(s.port)],
        "version": ["cc", "--version"], "stop": signal.SIGTERM,
    },
    "echo-source": {  # bench/echo/echo.c source: the stream experiment's 100 MB sender
        "conf": None,
        "cmd": lambda s: [str(ECHO), "source", str(s.port), str(ECHO_SOURCE_MB)],
        "version": ["cc", "--version"], "stop": signal.SIGTERM,
    },
    "relay": {  # bench/echo/echo.c relay: the C floor of the stream experiment's proxies
        "conf": None,
        "cmd": lambda s: [str(ECHO), "relay", str(s.port), s.subst["@ECHO@"].rsplit(":", 1)[1],
                          str(s.subst["@PORT_BULK@"]), s.subst["@SOURCE@"].rsplit(":", 1)[1]],
        "version": ["cc", "--version"], "stop": signal.SIGTERM,
    },
    "floor": {  # bench/floor/floor.c: fixed response, the CPU floor of E5
        "conf": None,  # the body: subst @FLOOR_BODY@ ("@PATH": a file by sendfile), else 2b.txt's
        "cmd": lambda s: [str(FLOOR), str(s.port),
                          s.subst.get("@FLOOR_BODY@") or (s.root / "2b.txt").read_text()],
        "version": ["cc", "--version"], "stop": signal.SIGTERM,
    },
}

LABELS = {"caddy": "Caddy", "haproxy": "HAProxy", "apache": "Apache event", "apache-prefork": "Apache prefork + mod_php",
          "floor": "C epoll floor", "relay": "C epoll relay (floor)", "php-fpm": "php-fpm",
          "echo": "C epoll echo",
          "echo-source": "C epoll byte source"}
# Web servers compared in E1, E3, E4 and M (`--servers` overrides).
PEERS = ["vireo", "nginx", "lighttpd", "h2o", "caddy", "apache"]
NOT_YET = {"php": "not yet: needs FastCGI (issue 5)", "proxy": "not yet: needs proxy (issue 6)"}


def label(name):
    return LABELS.get(name, name)


# ---------------------------------------------------------------- /proc accounting

def parse_stat(text):
    """(ppid, utime+stime, cutime+cstime) in ticks from the text of /proc/PID/stat.

    comm (field 2) may hold spaces and parentheses, so split after the last ')';
    the next token is field 3, hence ppid is [1], utime (14) [11], stime (15) [12],
    cutime (16) [13], cstime (17) [14].  cutime+cstime is the CPU of children the
    process has reaped: Apache's children that exit during a run count that way.
    """
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])


def comm_of(text):
    return text[text.index("(") + 1:text.rindex(")")]


def _read(path):
    try:
        return Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def process_tree(pid, proc="/proc", ignore=()):
    """pid and all its descendants (e.g. nginx master + worker), without those whose
    command name is in ignore (and their descendants)."""
    children = {}
    for entry in os.listdir(proc):
        if entry.isdigit():
            text = _read(f"{proc}/{entry}/stat")
            if text and comm_of(text) not in ignore:
                children.setdefault(parse_stat(text)[0], []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def sched_runtime(pid, proc="/proc"):
    """CPU seconds of pid's live threads from se.sum_exec_runtime (ms, exact) in
    /proc/PID/task/TID/sched; None where the kernel has no such file."""
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return None
    total, seen = 0.0, False
    for tid in tids:
        m = re.search(r"^se\.sum_exec_runtime\s*:\s*([\d.]+)",
                      _read(f"{proc}/{pid}/task/{tid}/sched") or "", re.M)
        if m:
            total, seen = total + float(m.group(1)) / 1e3, True
    return total if seen else None


def cpu_seconds(pids, proc="/proc", hz=None):
    """CPU seconds of pids: per process utime+stime (its stat covers all its threads,
    dead ones too, but in whole clock ticks) or, when larger, the exact runtime of its
    live threads -- 500 php-fpm children that use 0.6 ms each would read 0 ticks each;
    plus cutime+cstime (children it has reaped, so a worker that exits mid-run is not
    lost; a delta over a run stays exact because the dead child's own time was in the
    'before' reading)."""
    hz = hz or os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        text = _read(f"{proc}/{p}/stat")
        if text:
            _, own, reaped = parse_stat(text)
            exact = sched_runtime(p, proc)
            total += max(own / hz, exact or 0.0) + reaped / hz
    return total


def rss_mb(pids, proc="/proc"):
    kb = 0
    for p in pids:
        m = re.search(r"^VmRSS:\s+(\d+) kB", _read(f"{proc}/{p}/status") or "", re.M)
        kb += int(m.group(1)) if m else 0
    return kb / 1024


def cpu_us_per_req(cpu_before, cpu_after, requests):
    return (cpu_after - cpu_before) * 1e6 / requests if requests else None


# ---------------------------------------------------------------- load generators

_TIME_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_wrk(out):
    """Parse `wrk --latency` output into a dict; latencies in ms."""
    def num(pattern, conv=int, default=0):
        m = re.search(pattern, out, re.M)
        return conv(m.group(1)) if m else default

    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(\w+)", out, re.M)
    if not m:
        raise ValueError("wrk output has no 'requests in' line:\n" + out)
    pct = {p: float(v) * _TIME_MS[u] for p, v, u in
           re.findall(r"^\s+(\d+(?:\.\d+)?)%\s+([\d.]+)(us|ms|s|m|h)\s*$", out, re.M)}
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    socket_errors = dict(zip(("connect", "read", "write", "timeout"),
                             map(int, sock.groups()))) if sock else {}
    non2xx = num(r"Non-2xx or 3xx responses: (\d+)")
    requests = int(m.group(1))
    duration = float(m.group(2)) * _TIME_MS[m.group(3)] / 1e3
    return {
        "requests": requests,
        "duration_s": duration,
        "rps": num(r"^Requests/sec:\s+([\d.]+)", float, 0.0),
        "latency_ms": pct,
        "p99_ms": pct.get("99"),
        "socket_errors": socket_errors,
        "non2xx": non2xx,
        "errors": sum(socket_errors.values()) + non2xx,
        "succeeded": requests - non2xx,
        "ok_rps": (requests - non2xx) / duration if duration else 0.0,
    }


def wrk_cmd(url, duration, connections, threads=1, headers=()):
    """wrk for `duration` s (rounded to whole seconds, at least 1: wrk takes no less)
    with `connections`, pinned to the load CPU; headers: extra request header lines
    ("Accept-Encoding: gzip")."""
    return (["taskset", "-c", LOAD_CPU, "wrk", f"-t{threads}", f"-c{connections}",
             f"-d{max(1, round(duration))}s", "--latency"]
            + [a for h in headers for a in ("-H", h)] + [url])


def run_wrk(url, duration, connections, threads=1, headers=()):
    duration = max(1, round(duration))
    cmd = wrk_cmd(url, duration, connections, threads, headers)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}")
    return parse_wrk(r.stdout)


def parse_ab(out):
    """Parse ApacheBench output: counts, rps, times in ms, the percentile table.

    ab counts a response whose length differs from the first one as a "Length"
    failure; phpinfo() pages differ in length from request to request, so
    failed_real leaves those out."""
    def num(pattern, conv=int, default=None):
        m = re.search(pattern, out, re.M)
        return conv(m.group(1)) if m else default

    complete = num(r"^Complete requests:\s+(\d+)")
    if complete is None:
        raise ValueError("ab output has no 'Complete requests' line:\n" + out[-2000:])
    kinds = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", out)
    failed_kinds = dict(zip(("connect", "receive", "length", "exceptions"),
                            map(int, kinds.groups()))) if kinds else {}
    failed = num(r"^Failed requests:\s+(\d+)", default=0)
    non2xx = num(r"^Non-2xx responses:\s+(\d+)", default=0)
    conn_times = {}
    for row in ("Connect", "Processing", "Waiting", "Total"):
        m = re.search(rf"^{row}:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
        if m:
            conn_times[row.lower()] = dict(zip(("min", "mean", "sd", "median", "max"),
                                               map(float, m.groups())))
    pct = {p: float(v) for p, v in re.findall(r"^\s+(\d+)%\s+(\d+)", out, re.M)}
    return {
        "complete": complete,
        "failed": failed,
        "failed_kinds": failed_kinds,
        "failed_real": failed - failed_kinds.get("length", 0),
        "non2xx": non2xx,
        "doc_length": num(r"^Document Length:\s+(\d+)"),
        "time_taken_s": num(r"^Time taken for tests:\s+([\d.]+)", float),
        "rps": num(r"^Requests per second:\s+([\d.]+)", float, 0.0),
        "time_per_req_ms": num(r"^Time per request:\s+([\d.]+) \[ms\] \(mean\)$", float),
        "time_per_req_all_ms": num(r"^Time per request:\s+([\d.]+) \[ms\] \(mean, across", float),
        "conn_times_ms": conn_times,
        "percentiles_ms": pct,
        "p50_ms": pct.get("50"),
        "p99_ms": pct.get("99"),
        "errors": failed - failed_kinds.get("length", 0) + non2xx,
    }


def run_ab(url, requests, concurrency, time_limit):
    """ab -n N -c C, no keep-alive (as in seed document 004), stopped after time_limit s
    (-t before -n: ab then honours both); -r: go on after socket errors."""
    cmd = ["taskset", "-c", LOAD_CPU, "ab", "-r", "-s", "30", "-t", str(time_limit),
           "-n", str(requests), "-c", str(concurrency), url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit + 90)
    if r.returncode != 0 and "Complete requests" not in r.stdout:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-500:]}")
    return parse_ab(r.stdout)


def parse_h2load(out):
    """Counts from h2load's summary: requests, succeeded (2xx/3xx), failed (any
    failure, HTTP status >= 400 included), errored, timeout, status classes."""
    m = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", out, re.M)
    if not m:
        raise ValueError("h2load output has no 'requests:' line:\n" + out[-2000:])
    total, started, done, ok, failed, errored, timeout = map(int, m.groups())
    st = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
    status = dict(zip(("2xx", "3xx", "4xx", "5xx"), map(int, st.groups()))) if st else {}
    return {"requests": done, "started": started, "succeeded": ok, "failed": failed,
            "errored": errored, "timeout": timeout, "status": status,
            "in_flight": started - done, "errors": failed}


def parse_h2load_tls(out):
    """What h2load negotiated over TLS, from the lines it prints once the first client
    has connected: protocol (TLSv1.3), cipher, key exchange ("Server Temp Key") and the
    ALPN result ("h2", "http/1.1"); None where a line is missing (no TLS session)."""
    def line(name):
        m = re.search(rf"^{name}: (.+)$", out, re.M)
        return m.group(1).strip() if m else None
    return {"tls_protocol": line("TLS Protocol"), "cipher": line("Cipher"),
            "key_exchange": line("Server Temp Key"), "alpn": line("Application protocol")}


def percentile(values, q):
    """q-th percentile (0-100) of values by the nearest-rank method."""
    if not values:
        return None
    import math
    vals = sorted(values)
    k = max(0, min(len(vals) - 1, math.ceil(q / 100 * len(vals)) - 1))
    return vals[k]


H2LOAD_IDLE = 10   # h2load -N: a connection silent this long (s) fails its request
H2LOAD_GRACE = 2   # s after h2load's main phase before bench/run stops it


def open_client_sockets(port):
    """Client-side TCP sockets to 127.0.0.1:port that are not closed (ss)."""
    r = subprocess.run(["ss", "-Htn", "exclude", "time-wait", f"dport = :{port}"],
                       capture_output=True, text=True, timeout=10)
    return len([l for l in r.stdout.splitlines() if l.strip()])


def h2load_log(log):
    """(status, duration ms) per request from an h2load --log-file
    (start µs, status, duration µs per line)."""
    out = []
    for line in Path(log).read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1].lstrip("-").isdigit() and parts[2].isdigit():
            out.append((int(parts[1]), int(parts[2]) / 1e3))
    return out


def h2load_cmd(url, clients, duration, warmup, log, streams=None, h3=False):
    """h2load -t1 -cC for `duration` s after a warm-up: HTTP/1.1 (--h1) when streams is
    None, else HTTP/2 with `streams` concurrent streams per connection (-m); with h3,
    bench/h3load's HTTP/3 requests, one at a time per connection, instead."""
    if h3:
        tool, proto = [str(H3LOAD)], []
    else:
        tool, proto = ["h2load"], ["--h1"] if streams is None else [f"-m{streams}"]
    return (["taskset", "-c", LOAD_CPU] + tool + proto +
            ["-t1", f"-c{clients}", f"-D{int(duration * 1000)}ms",
             f"--warm-up-time={int(warmup * 1000)}ms", f"-N{H2LOAD_IDLE}s",
             f"--log-file={log}", url])


def run_h2load(url, clients, duration, warmup, log, on_main=None, streams=None, h3=False):
    """h2load -t1 -cC (--h1, or HTTP/2 with -m streams): connections are opened during
    `warmup` s, then requests are counted for `duration` s.  on_main("start"/"stop") is
    called as h2load enters and leaves its main phase, so CPU is read around exactly the
    counted requests.  Over https the result also has what TLS negotiated
    (parse_h2load_tls).

    Against a server that stops accepting, h2load waits minutes for connects after its
    main phase; then it is stopped H2LOAD_GRACE s after it, the figures come from its
    per-request log, and the clients still not served count as failed."""
    import threading
    from urllib.parse import urlparse
    Path(log).unlink(missing_ok=True)
    cmd = h2load_cmd(url, clients, duration, warmup, log, streams, h3)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    limit = warmup + duration + H2LOAD_IDLE + 30
    stalled = []

    def stop_now():
        if p.poll() is None:
            stalled.append(open_client_sockets(urlparse(url).port))
            p.kill()
    timers = [threading.Timer(limit, p.kill)]
    timers[0].start()
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if on_main and "Main benchmark duration is started" in line:
                on_main("start")
            elif "Main benchmark duration is over" in line:
                if on_main:
                    on_main("stop")
                timers.append(threading.Timer(H2LOAD_GRACE, stop_now))
                timers[-1].start()
        p.wait()
    finally:
        for t in timers:
            t.cancel()
    out = "".join(lines)
    entries = h2load_log(log) if Path(log).exists() else []
    lat = [ms for _, ms in entries]
    if stalled:
        ok = sum(1 for st, _ in entries if 200 <= st < 400)
        r = {"requests": len(entries), "started": None, "succeeded": ok,
             "failed": len(entries) - ok + stalled[0], "errored": None, "timeout": None,
             "status": {}, "in_flight": None, "errors": len(entries) - ok + stalled[0],
             "unserved_connections": stalled[0],
             "note": f"h2load stopped {H2LOAD_GRACE} s after its main phase; "
                     f"{stalled[0]} connections never served count as failed"}
    elif p.returncode != 0 and "Main benchmark duration is over" in out and entries:
        # h2load 1.52 sometimes aborts (SIGABRT) while stopping thousands of clients:
        # its per-request log of the main phase is what is left
        ok = sum(1 for st, _ in entries if 200 <= st < 400)
        r = {"requests": len(entries), "started": None, "succeeded": ok,
             "failed": len(entries) - ok, "errored": None, "timeout": None, "status": {},
             "in_flight": None, "errors": len(entries) - ok,
             "note": f"h2load exited with {p.returncode} after its main phase; figures from "
                     "its per-request log (connection errors not counted)"}
    elif p.returncode != 0:
        raise RuntimeError(f"h2load did not finish within {limit:g} s (killed)" if p.returncode == -9
                           else f"h2load failed ({p.returncode}): {out[-300:]}")
    else:
        r = parse_h2load(out)
    r.update(ok_rps=r["succeeded"] / duration, duration_s=duration, clients=clients,
             p50_ms=percentile(lat, 50), p99_ms=percentile(lat, 99))
    if url.startswith("https:"):
        r.update(parse_h2load_tls(out))
    return r


def parse_oha_json(text):
    """Totals from `oha --output-format json`: responses per status, errors per kind.
    Requests cut off by the end of the run are counted apart ("aborted due to
    deadline": still in flight, not failed)."""
    j = json.loads(text)
    status = {int(k): v for k, v in (j.get("statusCodeDistribution") or {}).items()}
    errors = dict(j.get("errorDistribution") or {})
    aborted = sum(v for k, v in errors.items() if "deadline" in k)
    failed = sum(v for k, v in errors.items() if "deadline" not in k)
    responses = sum(status.values())
    ok = sum(v for k, v in status.items() if 200 <= k < 300)
    lat = j.get("latencyPercentiles") or {}
    return {
        "responses": responses, "ok": ok, "non2xx": responses - ok, "status": status,
        "errors": errors, "failed": failed, "aborted": aborted,
        "sent": responses + failed + aborted,
        "p50_ms": lat["p50"] * 1e3 if lat.get("p50") is not None else None,
        "p99_ms": lat["p99"] * 1e3 if lat.get("p99") is not None else None,
    }


def oha_records(db):
    """(start, end, status) per response from an `oha --db-url` database; times in
    seconds from that oha's start."""
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT start, end, status FROM oha").fetchall()
    finally:
        con.close()


def per_second(events, seconds):
    """Count (time, ok) events into 1 s bins [0, seconds): (ok per s, not ok per s)."""
    ok, bad = [0] * seconds, [0] * seconds
    for t, good in events:
        i = int(t)
        if 0 <= i < seconds:
            (ok if good else bad)[i] += 1
    return ok, bad


# ---------------------------------------------------------------- servers

def port_open(port, host="127.0.0.1"):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def fill(text, values):
    for key, val in values.items():
        text = text.replace(key, str(val))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise RuntimeError(f"template placeholders not filled: {sorted(set(left))}")
    return text


class StartError(RuntimeError):
    """A server that did not come up; reason: its own error (e.g. the config line it
    refused), for the report."""

    def __init__(self, message, reason):
        super().__init__(message)
        self.reason = reason


def start_error_reason(log):
    """The line of a server's output that says why it did not start: nginx's (and
    vireo's) "[emerg] ..." line, else the last non-empty line; the scratch path of a
    config file is cut to its name ("in /x/y/vireo-tls.conf:12" -> "vireo-tls.conf:12")."""
    lines = [l.strip() for l in log.splitlines() if l.strip()]
    line = next((l for l in lines if "[emerg]" in l), lines[-1] if lines else "no output")
    line = line.split("[emerg] ", 1)[-1]
    line = re.sub(r"^\d+#\d+: ", "", line)  # the error log's "pid#tid: "
    return re.sub(r" in (/[^\s:]*/)?([^/\s:]+:\d+)", r" (\2)", line)


class Server:
    """One server process started from a bench/conf template, as a context manager.

    conf: template name (default: the server's "conf"); subst: extra @KEY@ values
    (@FPM@, @UPSTREAM@, ...); edits: (old, new) replacements applied to the
    template, each of which must match; tag: name of its scratch folder."""

    def __init__(self, name, scratch, root, port, conf=None, subst=None, edits=(), tag=None):
        self.name, self.port, self.root = name, port, Path(root).resolve()
        self.spec = spec = SERVERS[name]
        self.subst = dict(subst or {})
        self.dir = Path(scratch).resolve() / (tag or name)
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = conf or spec["conf"]
        self.conf = None
        if conf:
            text = (CONF / conf).read_text()
            for old, new in tuple(spec.get("edits", {}).get(conf, ())) + tuple(edits):
                if old not in text:
                    raise RuntimeError(f"{conf}: '{old}' not found to replace")
                text = text.replace(old, new)
            values = {"@DIR@": self.dir, "@ROOT@": self.root, "@PORT@": port}
            values.update(subst or {})
            self.conf = self.dir / Path(conf).name
            self.conf.write_text(fill(text, values))
        self.cmd = ["taskset", "-c", SERVER_CPU] + spec["cmd"](self)
        self.log = self.dir / "stdout-stderr.log"
        self.proc = None

    def __enter__(self):
        if port_open(self.port):
            raise RuntimeError(f"port {self.port} already in use (try --port-base)")
        with open(self.log, "wb") as log:
            # taskset execs the server, so proc.pid is the server (nginx: the master).
            # Own session: Apache prefork signals its whole process group when it stops.
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.dir,
                                         start_new_session=True)
        deadline = time.monotonic() + self.spec.get("start_timeout", 15)
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                log = self.log.read_text()
                raise StartError(f"{self.name} did not come up on port {self.port}: "
                                 f"{' '.join(self.cmd)}\n{log[-2000:]}", start_error_reason(log))
            time.sleep(0.05)
        return self

    def pids(self):
        return process_tree(self.proc.pid, ignore=self.spec.get("ignore", ()))

    def __exit__(self, *exc):
        if self.proc is None:
            return
        pids = process_tree(self.proc.pid) if self.proc.poll() is None else []
        if pids:
            self.proc.send_signal(self.spec.get("stop", signal.SIGTERM))
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for p in pids:  # SIGKILL whatever is left of the tree we started, by pid
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        # a port still held (e.g. by an orphaned worker) would fail the next start
        deadline = time.monotonic() + 5
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)


class Meter:
    """CPU and RSS of a front server and its backends over one load run: a context
    manager, or start() and stop() called by hand (e.g. at h2load's main phase)."""

    def __init__(self, front, backends=()):
        self.front, self.backends = front, list(backends)
        self.t0 = self.wall = None

    def start(self):
        self.t0 = time.monotonic()
        self.before = cpu_seconds(self.front.pids())
        self.before_b = cpu_seconds([p for b in self.backends for p in b.pids()])

    def stop(self):
        if self.t0 is None or self.wall is not None:
            return
        self.wall = time.monotonic() - self.t0
        pids = self.front.pids()
        self.after, self.rss, self.processes = cpu_seconds(pids), rss_mb(pids), len(pids)
        bpids = [p for b in self.backends for p in b.pids()]
        self.after_b, self.rss_b = cpu_seconds(bpids), rss_mb(bpids)

    def mark(self, what):
        self.start() if what == "start" else self.stop()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def result(self, requests):
        if self.t0 is None or self.wall is None:
            raise RuntimeError("CPU was not read around the run (no main phase?)")
        out = {"cpu_s": self.after - self.before,
               "cpu_us_per_req": cpu_us_per_req(self.before, self.after, requests),
               "cpu_util": (self.after - self.before) / self.wall if self.wall else None,
               "rss_mb": self.rss, "processes": self.processes}
        if self.backends:
            out.update(backend_cpu_us_per_req=cpu_us_per_req(self.before_b, self.after_b, requests),
                       backend_rss_mb=self.rss_b)
        return out


def settle(server, limit=2.0, idle=0.05):
    """Wait (at most limit s) until the server uses under `idle` of a core, so that
    one point's leftovers (closing connections, queued PHP work) do not land in
    the next one."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(server.pids())
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_seconds(server.pids())
        if now - last < idle * 0.25:
            return
        last = now


def check_get(url, expect=None, contains=None):
    """One GET before measuring: a server that answers wrongly is not benchmarked."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            status, body = r.status, r.read()
    except (OSError, http.client.HTTPException) as e:
        raise RuntimeError(f"GET {url}: {e}") from e
    if status != 200 or (expect is not None and body != expect) or \
            (contains is not None and contains not in body):
        want = f"the file's {len(expect)} bytes" if expect is not None else repr(contains)
        raise RuntimeError(f"GET {url}: status {status}, {len(body)} bytes (expected 200 and "
                           f"{want}): {body[:200]!r}")


def check_tls(url, expect, cacert, http):
    """One GET with curl over TLS 1.3 before measuring, verified against cacert; http:
    "1.1" or "2", offered by ALPN: the server must answer 200 with the file's bytes in
    that version."""
    out = Path(cacert).parent / "curl-body"
    cmd = ["curl", "-sS", "--max-time", "10", "--tlsv1.3", "--cacert", str(cacert),
           f"--http{http}", "-o", str(out), "-w", "%{http_code} %{http_version}", url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"GET {url} (curl --http{http}): {r.stderr.strip()[:300]}")
    status, version = (r.stdout.split() + ["", ""])[:2]
    body = out.read_bytes()
    if status != "200" or version != http or body != expect:
        raise RuntimeError(f"GET {url} (curl --http{http}): status {status}, HTTP/{version}, "
                           f"{len(body)} bytes (expected 200, HTTP/{http} and the file's "
                           f"{len(expect)} bytes)")


def measure(name, scratch, root, port, path, duration, connections):
    """Start server, check one GET, warm up 1 s, one measured wrk run; returns a dict."""
    url = f"http://127.0.0.1:{port}/{path}"
    with Server(name, scratch, root, port) as srv:
        check_get(url, (Path(root) / path).read_bytes())
        run_wrk(url, 1, connections)
        with Meter(srv) as m:
            w = run_wrk(url, duration, connections)
    return dict(w, server=name, path=path, **m.result(w["requests"]))


# ---------------------------------------------------------------- setup

# command -> Debian package providing it
PACKAGES = {"wrk": "wrk", "ab": "apache2-utils", "h2load": "nghttp2-client", "nginx": "nginx",
            "apache2": "apache2", "lighttpd": "lighttpd", "h2o": "h2o", "php-fpm": "php-fpm",
            "cc": "gcc", "mod_php": "libapache2-mod-php", "openssl": "openssl", "curl": "curl",
            "mod_openssl": "lighttpd-mod-openssl", "caddy": "caddy", "haproxy": "haproxy",
            "mod_stream": "libnginx-mod-stream"}


def have(tool):
    if tool == "php-fpm":
        return bool(glob.glob("/usr/sbin/php-fpm*"))
    if tool == "mod_php":
        return bool(glob.glob("/usr/lib/apache2/modules/libphp*.so"))
    if tool == "mod_openssl":
        return Path("/usr/lib/lighttpd/mod_openssl.so").exists()
    if tool == "mod_stream":
        return Path("/usr/lib/nginx/modules/ngx_stream_module.so").exists()
    return shutil.which(tool) is not None


def ensure_tools(tools):
    """Install what is missing: Debian packages with apt-get, oha with cargo."""
    missing = sorted({PACKAGES[t] for t in tools if t in PACKAGES and not have(t)})
    if missing:
        print(f"installing {' '.join(missing)} ...", file=sys.stderr)
        # the packages' own services are not started by us; policy-rc.d may stop them too
        subprocess.run("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                       + " ".join(missing), shell=True, check=True)
    if "h3load" in tools:
        ensure_h3load()
    if "oha" in tools and not shutil.which("oha"):
        print("installing oha (cargo install --locked oha) ...", file=sys.stderr)
        subprocess.run(["cargo", "install", "--locked", "oha"], check=True)


VIREO_NOTE = []


def ensure_h3load():
    """cargo build --release -p h3load if the binary is missing or older than its sources."""
    sources = list((REPO / "bench" / "h3load").rglob("*.rs")) + [REPO / "bench" / "h3load" / "Cargo.toml"]
    if not H3LOAD.exists() or H3LOAD.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        print("building h3load (cargo build --release -p h3load) ...", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "-p", "h3load"], cwd=REPO, check=True)


def ensure_vireo():
    """cargo build --release if the binary is missing or older than any source file.
    The tree is shared with other engineers: if the build fails and a binary exists,
    that binary is measured and the report says so."""
    sources = [p for p in (REPO / "src").rglob("*") if p.is_file()] + [REPO / "Cargo.toml"]
    newest = max(p.stat().st_mtime for p in sources)
    if not VIREO.exists() or VIREO.stat().st_mtime < newest:
        print("building vireo (cargo build --release) ...", file=sys.stderr)
        r = subprocess.run(["cargo", "build", "--release"], cwd=REPO)
        if r.returncode != 0:
            if not VIREO.exists():
                raise RuntimeError("cargo build --release failed and there is no vireo binary")
            VIREO_NOTE.append("sources newer than the binary, cargo build failed: "
                              "measured the existing binary")
            print(f"bench/run: {VIREO_NOTE[-1]}", file=sys.stderr)
    stale = hot_symbols_note()
    if stale and stale not in VIREO_NOTE:
        VIREO_NOTE.append(stale)
        print(f"bench/run: {stale}", file=sys.stderr)


def hot_symbols_note():
    """A note when link/hot-symbols.txt no longer names this build's functions: the
    names carry hashes that change with the crate graph (a dependency's version or
    features), and the functions it misses are laid out by default, which takes the
    idle server's code pages from ~1 MB to ~4 MB (scripts/hot-symbols remakes it)."""
    order = REPO / "link" / "hot-symbols.txt"
    if not order.exists() or not VIREO.exists():
        return None
    want = set(order.read_text().split())
    r = subprocess.run(["nm", str(VIREO)], capture_output=True, text=True)
    have = {ln.split()[-1] for ln in r.stdout.splitlines() if ln.strip()}
    found = len(want & have) / len(want) if want else 1.0
    if found >= 0.9:
        return None
    return (f"link/hot-symbols.txt names {found:.0%} of this build's functions: code laid out "
            "by default (more resident pages); run scripts/hot-symbols")


def pin_vireo(scratch):
    """Measure a copy of the binary: others rebuild target/release/vireo meanwhile, and
    one invocation (e.g. `all`) must measure one build throughout."""
    global VIREO
    if VIREO.parent == Path(scratch):
        return
    Path(scratch).mkdir(parents=True, exist_ok=True)
    copy = Path(scratch) / "vireo"
    shutil.copy2(VIREO, copy)  # keeps the mtime: the report gives it as the build time
    VIREO = copy


def ensure_floor():
    """cc -O2 bench/floor/floor.c when the binary is missing or older than the source."""
    if not FLOOR.exists() or FLOOR.stat().st_mtime < FLOOR_SRC.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(FLOOR), str(FLOOR_SRC)], check=True)


def ensure_echo():
    """cc -O2 bench/echo/echo.c when the binary is missing or older than the source."""
    if not ECHO.exists() or ECHO.stat().st_mtime < ECHO_SRC.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(ECHO), str(ECHO_SRC)], check=True)


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("installing matplotlib (pip) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True)


def make_docroot(scratch):
    root = Path(scratch) / "www"
    root.mkdir(parents=True, exist_ok=True)
    pattern = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\n"
    for name, size in FILES:
        (root / name).write_bytes((pattern * (size // len(pattern) + 1))[:size])
    for php in (CONF / "www").glob("*.php"):
        shutil.copy(php, root / php.name)
    (root / "sleep").mkdir(exist_ok=True)  # /sleep/ -> sleep/index.php, for proxies (E2)
    shutil.copy(CONF / "www" / SLEEP, root / "sleep" / "index.php")
    return root


def command_output(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {e}"


def first_line(text):
    return text.splitlines()[0] if text else text


def machine_info(servers, tools=()):
    cpu = re.search(r"^model name\s*:\s*(.*)$", _read("/proc/cpuinfo") or "", re.M)
    mem = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo") or "", re.M)
    import resource
    versions = {s: first_line(command_output([str(VIREO), "-V"] if s == "vireo"
                                             else SERVERS[s]["version"])) for s in servers}
    tool_versions = {"wrk": ["wrk", "-v"], "ab": ["ab", "-V"], "oha": ["oha", "--version"],
                     "h2load": ["h2load", "--version"],
                     "php-fpm": [php_fpm_binary(), "-v"], "cc": ["cc", "--version"]}
    for t in tools:
        if t in tool_versions:
            versions[t] = first_line(command_output(tool_versions[t]))
    if "vireo" in servers:
        commit = command_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
        built = datetime.datetime.fromtimestamp(VIREO.stat().st_mtime) if VIREO.exists() else None
        versions["vireo"] += f" (commit {commit}, binary built {built:%Y-%m-%d %H:%M})" \
            if built else ""
        versions["vireo"] += "".join(f"; {n}" for n in VIREO_NOTE)
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu.group(1) if cpu else platform.processor(),
        "mem_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None,
        "kernel": platform.release(),
        "os": (re.search(r'^PRETTY_NAME="(.*)"', _read("/etc/os-release") or "", re.M)
               or re.match("(.*)", platform.platform())).group(1),
        "loadavg": os.getloadavg(),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "somaxconn": (_read("/proc/sys/net/core/somaxconn") or "").strip(),
        "versions": versions,
    }


# ---------------------------------------------------------------- reporting helpers

def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def baseline(servers):
    """The server the CPU ratio column is relative to: nginx if measured."""
    return "nginx" if "nginx" in servers else servers[0]


def median_spread(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None, None
    return statistics.median(vals), min(vals), max(vals)


def summarize(results, servers):
    """One row per (file, server): medians over runs, CPU min–max, summed errors.
    Results marked "unsupported" (or that failed) give a row with that text only."""
    rows = []
    for path in dict.fromkeys(r["path"] for r in results):
        group = []
        for s in servers:
            rs = [r for r in results if r["server"] == s and r["path"] == path]
            ok = [r for r in rs if not r.get("unsupported") and not r.get("error")]
            if rs and not ok:
                note = rs[0].get("unsupported") or "failed: " + rs[0]["error"]
                group.append({"file": path, "server": s, "runs": 0, "note": note})
                continue
            if not ok:
                continue
            cpu = [r["cpu_us_per_req"] for r in ok if r["cpu_us_per_req"] is not None]
            backend = [r.get("backend_cpu_us_per_req") for r in ok]
            group.append({
                "file": path, "server": s, "runs": len(ok),
                "rps": statistics.median(r["rps"] for r in ok),
                "rps_min": min(r["rps"] for r in ok), "rps_max": max(r["rps"] for r in ok),
                "cpu_us": statistics.median(cpu) if cpu else None,
                "cpu_min": min(cpu, default=None), "cpu_max": max(cpu, default=None),
                "backend_cpu_us": median_spread(backend)[0],
                "p99_ms": statistics.median(r["p99_ms"] or 0 for r in ok),
                "p99_min": min(r["p99_ms"] or 0 for r in ok),
                "p99_max": max(r["p99_ms"] or 0 for r in ok),
                "rss_mb": statistics.median(r["rss_mb"] for r in ok),
                "rss_min": min(r["rss_mb"] for r in ok), "rss_max": max(r["rss_mb"] for r in ok),
                "errors": sum(r["errors"] for r in ok),
            })
        base = next((r.get("cpu_us") for r in group if r["server"] == baseline(servers)), None)
        for row in group:
            row["cpu_ratio"] = row["cpu_us"] / base if row.get("cpu_us") and base else None
        rows += group
    return rows


def markdown(rows, servers):
    head = ["file", "server", "rps (median)", "CPU µs/req (median, min–max)", "p99 ms",
            "RSS MB", "errors", f"CPU vs {baseline(servers)}"]
    if any(r.get("backend_cpu_us") for r in rows):
        head.insert(4, "backend CPU µs/req (php-fpm, h2o)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("note"):
            cells = [r["file"], label(r["server"]), r["note"].split(" — ")[0]] + [""] * (len(head) - 3)
        else:
            cells = [r["file"], label(r["server"]), fmt(r["rps"], ",.0f"),
                     f"{fmt(r['cpu_us'], '.2f')} ({fmt(r['cpu_min'], '.2f')}–{fmt(r['cpu_max'], '.2f')})",
                     fmt(r["p99_ms"], ".2f"), fmt(r["rss_mb"]), str(r["errors"]),
                     fmt(r["cpu_ratio"], ".2f") + "×"]
            if len(head) == 9:
                cells.insert(4, fmt(r.get("backend_cpu_us"), ".0f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


class Progress:
    def __init__(self, total, label=""):
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.label = f"{label} " if label else ""
        self.end = "\r" if sys.stderr.isatty() else "\n"

    def step(self, text):
        left = ""
        if self.done:
            secs = (time.monotonic() - self.start) / self.done * (self.total - self.done)
            left = f"  ~{int(secs) // 60}m{int(secs) % 60:02d}s left"
        clear = "\033[K" if self.end == "\r" else ""
        print(f"[{self.label}{self.done + 1}/{self.total}] {text}{left}{clear}", end=self.end,
              file=sys.stderr, flush=True)
        self.done += 1

    def close(self):
        if self.end == "\r":
            print(file=sys.stderr)


# ---------------------------------------------------------------- command line

ALL_ORDER = ["E3", "E3-seed", "E3-pool", "E5", "proxy", "stream", "gzip", "routes", "tls", "modules", "M", "E4",
             "E1", "E2"]


def experiments():
    import experiments as ex  # experiments.py imports this module
    return ex.EXPERIMENTS


def parse_args(argv):
    exps = experiments()
    ap = argparse.ArgumentParser(
        prog="bench/run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__,
        epilog="experiments:\n" + "\n".join(f"  {n:7} {e.run.__doc__.strip().splitlines()[0]}"
                                            for n, e in exps.items())
        + f"\n  all     {', '.join(ALL_ORDER)} in turn, then the report and docs/benchmarks.md"
        + "\n  report  the report and docs/benchmarks.md from the latest results/*.json")
    ap.add_argument("experiment", choices=list(exps) + ["all", "report"])
    ap.add_argument("--duration", type=float, help="seconds per measured load run "
                    "(E1: 1.5 after a warm-up of 0.3 s + 1 s per 5,000 clients; E3, E3-seed, "
                    "E3-pool, quick, routes, tls, modules: 4; E5: 5)")
    ap.add_argument("--runs", type=int, help="repetitions of every point (3; routes: 5; "
                    "E2: 1)")
    ap.add_argument("--points", help="E1 client counts, comma-separated "
                    "(50,100,250,500,1000,1500,2000,3000,4000,6000,8000,10000,15000)")
    ap.add_argument("--connections", type=int, default=50,
                    help="wrk -c for E3/E3-seed/E3-pool/E5/quick/proxy/gzip/routes/modules, h2load -c "
                         "for tls, the echo connections of stream (50)")
    ap.add_argument("--h2-streams", type=int, default=10,
                    help="tls: h2load -m, concurrent streams per HTTP/2 connection (10)")
    ap.add_argument("--servers", help="comma-separated, interleaved in this order "
                    "(quick, idle, E3-seed, E3-pool, routes, gzip, modules: vireo,nginx; E5: "
                    "vireo,nginx,floor; E1, E3: " + ",".join(PEERS) + ",floor; proxy, stream: "
                    "vireo,nginx,haproxy; tls: vireo,nginx,h2o,lighttpd,caddy; others: "
                    + ",".join(PEERS) + ")")
    ap.add_argument("--port-base", type=int, default=28080,
                    help="first port; server i listens on port-base+i (tls: and on "
                         "port-base+20+i for HTTP/2; stream: for the 100 MB transfers), php-fpm "
                         "on +50, a proxied backend on +51, stream's echo and byte source on "
                         "+55 and +56 (28080)")
    ap.add_argument("--idle-conns", type=int, default=10000,
                    help="M: keep-alive connections to open (10000)")
    ap.add_argument("--ab-n", type=int, default=100000, help="E4: ab -n for the static page (100000)")
    ap.add_argument("--ab-n-php", type=int, default=100000, help="E4: ab -n for phpinfo() (100000)")
    ap.add_argument("--ab-time", type=int, default=15,
                    help="E4: ab -t, the cap in seconds on one ab run (15)")
    ap.add_argument("--ab-c", type=int, default=1000, help="E4: ab -c (1000)")
    ap.add_argument("--e2-duration", type=int, default=100, help="E2: seconds of load (100)")
    ap.add_argument("--e2-ramp", type=int, default=50, help="E2: seconds to ramp up (50)")
    ap.add_argument("--e2-conns", type=int, default=5000, help="E2: connections (5000)")
    ap.add_argument("--e2-interval", type=float, default=5.0,
                    help="E2: seconds between two requests of one connection (5)")
    ap.add_argument("--e2-steps", type=int, default=10, help="E2: ramp steps, one oha each (10)")
    ap.add_argument("--e2-timeout", type=int, default=10, help="E2: oha -t, seconds (10)")
    ap.add_argument("--results-dir", type=Path,
                    help="where JSON, plots and reports go (bench/results)")
    ap.add_argument("--markdown-out", type=Path, help="also write the Markdown table here")
    ap.add_argument("--no-docs", action="store_true",
                    help="all/report: do not rewrite docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.servers:
        args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
        unknown = set(args.servers) - set(SERVERS)
        if unknown or not args.servers:
            ap.error(f"unknown servers {sorted(unknown)}; known: {', '.join(SERVERS)}")
    if args.points:
        args.points = [int(p) for p in args.points.split(",") if p.strip()]
    return args


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"\nbench/run: {e}", file=sys.stderr)
        return 1


def run_one(name, args, argv, stamp):
    """Run one experiment; write results/<date>-<name>.json (and its plot); return the data."""
    exp = experiments()[name]
    opts = exp.defaults(args)
    servers = opts.servers
    ensure_tools(exp.tools(opts))
    if "vireo" in servers and not getattr(args, "vireo_built", False):
        ensure_vireo()
        pin_vireo(RESULTS / "tmp" / f"vireo-{stamp:%Y%m%d-%H%M%S}")
    if "floor" in servers:
        ensure_floor()
    scratch = RESULTS / "tmp" / f"{name}-{stamp:%Y%m%d-%H%M%S}"
    scratch.mkdir(parents=True, exist_ok=True)
    machine = machine_info([s for s in servers if s in SERVERS], exp.tools(opts))
    t0 = time.monotonic()
    results = exp.run(opts, scratch)
    elapsed = time.monotonic() - t0
    summary = exp.summarize(results, servers)
    table = exp.markdown(summary, servers)
    data = {
        "experiment": name, "date": stamp.isoformat(timespec="seconds"),
        "command": "bench/run " + " ".join(argv),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(opts).items()},
        "machine": machine, "elapsed_s": round(elapsed, 1),
        "loadavg_end": os.getloadavg(), "summary": summary, "runs": results,
    }
    out = RESULTS / f"{stamp:%Y-%m-%d}-{name}.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(table, end="")
    print(f"raw results: {out} ({elapsed / 60:.1f} min)", file=sys.stderr)
    if args.markdown_out:
        args.markdown_out.write_text(table)
    shutil.rmtree(scratch, ignore_errors=True)
    return data


def run(argv):
    global RESULTS
    args = parse_args(argv)
    if args.results_dir:
        RESULTS = args.results_dir.resolve()
        RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now()
    import report
    if args.experiment == "report":
        report.write_all(report.latest_results(), write_docs=not args.no_docs)
        return 0
    if args.experiment == "all":
        t0 = time.monotonic()
        ensure_vireo()  # once, and a copy: the whole run measures one binary
        pin_vireo(RESULTS / "tmp" / f"vireo-{stamp:%Y%m%d-%H%M%S}")
        args.vireo_built = True
        for name in ALL_ORDER:
            print(f"== {name}", file=sys.stderr)
            try:
                run_one(name, args, argv, stamp)
            except (RuntimeError, subprocess.CalledProcessError) as e:
                print(f"bench/run: {name} failed: {e}", file=sys.stderr)
        total = time.monotonic() - t0
        print(f"bench/run all: {total / 60:.1f} min", file=sys.stderr)
        shutil.rmtree(VIREO.parent, ignore_errors=True) if VIREO.parent.name.startswith("vireo-") else None
        report.write_all(report.latest_results(), write_docs=not args.no_docs,
                         all_command="bench/run " + " ".join(argv), all_minutes=total / 60)
        return 0
    data = run_one(args.experiment, args, argv, stamp)
    if VIREO.parent.name.startswith("vireo-"):
        shutil.rmtree(VIREO.parent, ignore_errors=True)
    report.write_all({args.experiment: data}, write_docs=False)
    return 0
