"""vireo benchmarks: the method of DESIGN.md section 3, as code.

Each server runs pinned to CPU 0 with one worker; wrk runs pinned to CPU 1.
The server's CPU (utime+stime of all its processes, from /proc) is read before
and after each wrk run; CPU us per request = delta / requests.  Servers are
interleaved and every measurement repeated, because the machine is shared.

Experiments are functions in EXPERIMENTS; `bench/run NAME` runs one.
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VIREO = REPO / "target" / "release" / "vireo"
RESULTS = BENCH / "results"

# name in the URL, size in bytes
FILES = [("2b.txt", 2), ("21k.txt", 21504), ("92k.txt", 94208)]

# How to start each server: config template in bench/conf/, command line, version command.
SERVERS = {
    "vireo": {
        "conf": "vireo.conf",
        "cmd": lambda d, conf: [str(VIREO), "-c", str(conf)],
        "version": [str(VIREO), "-V"],
    },
    "nginx": {
        "conf": "nginx.conf",
        "cmd": lambda d, conf: ["nginx", "-p", f"{d}/", "-e", str(d / "nginx-error.log"),
                                "-c", str(conf)],
        "version": ["nginx", "-v"],
    },
}


# ---------------------------------------------------------------- /proc accounting

def parse_stat(text):
    """(ppid, utime+stime in ticks) from the text of /proc/PID/stat.

    comm (field 2) may hold spaces and parentheses, so split after the last ')';
    the next token is field 3, hence ppid is [1], utime (14) [11], stime (15) [12].
    """
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[11]) + int(rest[12])


def _read(path):
    try:
        return Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def process_tree(pid, proc="/proc"):
    """pid and all its descendants (e.g. nginx master + worker)."""
    children = {}
    for entry in os.listdir(proc):
        if entry.isdigit():
            text = _read(f"{proc}/{entry}/stat")
            if text:
                children.setdefault(parse_stat(text)[0], []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def cpu_seconds(pids, proc="/proc", hz=None):
    """Sum of utime+stime over pids, in seconds (a process's stat covers all its threads)."""
    hz = hz or os.sysconf("SC_CLK_TCK")
    ticks = 0
    for p in pids:
        text = _read(f"{proc}/{p}/stat")
        if text:
            ticks += parse_stat(text)[1]
    return ticks / hz


def rss_mb(pids, proc="/proc"):
    kb = 0
    for p in pids:
        m = re.search(r"^VmRSS:\s+(\d+) kB", _read(f"{proc}/{p}/status") or "", re.M)
        kb += int(m.group(1)) if m else 0
    return kb / 1024


def cpu_us_per_req(cpu_before, cpu_after, requests):
    return (cpu_after - cpu_before) * 1e6 / requests if requests else None


# ---------------------------------------------------------------- wrk

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
    return {
        "requests": int(m.group(1)),
        "duration_s": float(m.group(2)) * _TIME_MS[m.group(3)] / 1e3,
        "rps": num(r"^Requests/sec:\s+([\d.]+)", float, 0.0),
        "latency_ms": pct,
        "p99_ms": pct.get("99"),
        "socket_errors": socket_errors,
        "non2xx": non2xx,
        "errors": sum(socket_errors.values()) + non2xx,
    }


def run_wrk(url, duration, connections, threads=1):
    cmd = ["taskset", "-c", "1", "wrk", f"-t{threads}", f"-c{connections}",
           f"-d{duration}s", "--latency", url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}")
    return parse_wrk(r.stdout)


# ---------------------------------------------------------------- servers

def port_open(port, host="127.0.0.1"):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


class Server:
    """One server process started from a bench/conf template, as a context manager."""

    def __init__(self, name, scratch, root, port):
        self.name, self.port = name, port
        spec = SERVERS[name]
        self.dir = Path(scratch).resolve() / name
        self.dir.mkdir(parents=True, exist_ok=True)
        text = (BENCH / "conf" / spec["conf"]).read_text()
        for key, val in (("@DIR@", self.dir), ("@ROOT@", Path(root).resolve()), ("@PORT@", port)):
            text = text.replace(key, str(val))
        self.conf = self.dir / Path(spec["conf"]).name
        self.conf.write_text(text)
        self.cmd = ["taskset", "-c", "0"] + spec["cmd"](self.dir, self.conf)
        self.log = self.dir / "stdout-stderr.log"

    def __enter__(self):
        if port_open(self.port):
            raise RuntimeError(f"port {self.port} already in use (try --port-base)")
        with open(self.log, "wb") as log:
            # taskset execs the server, so proc.pid is the server (nginx: the master)
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.name} did not come up on port {self.port}: "
                                   f"{' '.join(self.cmd)}\n{self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def pids(self):
        return process_tree(self.proc.pid)

    def __exit__(self, *exc):
        pids = self.pids() if self.proc.poll() is None else []
        if pids:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for p in pids:  # SIGKILL whatever is left, master and workers
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def check_get(url, expect):
    """One GET before measuring: a server that answers wrongly is not benchmarked."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            status, body = r.status, r.read()
    except (OSError, http.client.HTTPException) as e:
        raise RuntimeError(f"GET {url}: {e}") from e
    if status != 200 or body != expect:
        raise RuntimeError(f"GET {url}: status {status}, {len(body)} bytes "
                           f"(expected 200 and the file's {len(expect)} bytes)")


def measure(name, scratch, root, port, path, duration, connections):
    """Start server, check one GET, warm up 1 s, one measured wrk run; returns a dict."""
    url = f"http://127.0.0.1:{port}/{path}"
    with Server(name, scratch, root, port) as srv:
        check_get(url, (Path(root) / path).read_bytes())
        run_wrk(url, 1, connections)
        pids = srv.pids()
        before = cpu_seconds(pids)
        w = run_wrk(url, duration, connections)
        pids = srv.pids()
        after, rss = cpu_seconds(pids), rss_mb(pids)
    return dict(w, server=name, path=path, processes=len(pids), cpu_s=after - before,
                cpu_us_per_req=cpu_us_per_req(before, after, w["requests"]), rss_mb=rss)


# ---------------------------------------------------------------- setup

def ensure_tools():
    if not (shutil.which("wrk") and shutil.which("nginx")):
        print("installing wrk and nginx-light ...", file=sys.stderr)
        subprocess.run("apt-get update && apt-get install -y wrk nginx-light",
                       shell=True, check=True)


def ensure_vireo():
    """cargo build --release if the binary is missing or older than any source file."""
    sources = [p for p in (REPO / "src").rglob("*") if p.is_file()] + [REPO / "Cargo.toml"]
    newest = max(p.stat().st_mtime for p in sources)
    if not VIREO.exists() or VIREO.stat().st_mtime < newest:
        print("building vireo (cargo build --release) ...", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release"], cwd=REPO, check=True)


def make_docroot(scratch):
    root = scratch / "www"
    root.mkdir(parents=True, exist_ok=True)
    pattern = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\n"
    for name, size in FILES:
        (root / name).write_bytes((pattern * (size // len(pattern) + 1))[:size])
    return root


def command_output(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {e}"


def machine_info(servers):
    cpu = re.search(r"^model name\s*:\s*(.*)$", _read("/proc/cpuinfo") or "", re.M)
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu.group(1) if cpu else platform.processor(),
        "kernel": platform.release(),
        "loadavg": os.getloadavg(),
        "versions": {s: command_output(SERVERS[s]["version"]) for s in servers},
    }


# ---------------------------------------------------------------- reporting

def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def baseline(servers):
    """The server the CPU ratio column is relative to: nginx if measured."""
    return "nginx" if "nginx" in servers else servers[0]


def summarize(results, servers):
    """One row per (file, server): medians over runs, CPU min–max, summed errors."""
    rows = []
    for path in dict.fromkeys(r["path"] for r in results):
        group = []
        for s in servers:
            rs = [r for r in results if r["server"] == s and r["path"] == path]
            cpu = [r["cpu_us_per_req"] for r in rs if r["cpu_us_per_req"] is not None]
            if rs:
                group.append({
                    "file": path, "server": s, "runs": len(rs),
                    "rps": statistics.median(r["rps"] for r in rs),
                    "cpu_us": statistics.median(cpu) if cpu else None,
                    "cpu_min": min(cpu, default=None), "cpu_max": max(cpu, default=None),
                    "p99_ms": statistics.median(r["p99_ms"] or 0 for r in rs),
                    "rss_mb": statistics.median(r["rss_mb"] for r in rs),
                    "errors": sum(r["errors"] for r in rs),
                })
        base = next((r["cpu_us"] for r in group if r["server"] == baseline(servers)), None)
        for row in group:
            row["cpu_ratio"] = row["cpu_us"] / base if row["cpu_us"] and base else None
        rows += group
    return rows


def markdown(rows, servers):
    head = ["file", "server", "rps (median)", "CPU µs/req (median, min–max)", "p99 ms",
            "RSS MB", "errors", f"CPU vs {baseline(servers)}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["file"], r["server"], fmt(r["rps"], ",.0f"),
                 f"{fmt(r['cpu_us'], '.2f')} ({fmt(r['cpu_min'], '.2f')}–{fmt(r['cpu_max'], '.2f')})",
                 fmt(r["p99_ms"], ".2f"), fmt(r["rss_mb"]), str(r["errors"]),
                 fmt(r["cpu_ratio"], ".2f") + "×"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


class Progress:
    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.end = "\r" if sys.stderr.isatty() else "\n"

    def step(self, text):
        left = ""
        if self.done:
            secs = (time.monotonic() - self.start) / self.done * (self.total - self.done)
            left = f"  ~{int(secs) // 60}m{int(secs) % 60:02d}s left"
        clear = "\033[K" if self.end == "\r" else ""
        print(f"[{self.done + 1}/{self.total}] {text}{left}{clear}", end=self.end,
              file=sys.stderr, flush=True)
        self.done += 1

    def close(self):
        if self.end == "\r":
            print(file=sys.stderr)


# ---------------------------------------------------------------- experiments

def exp_quick(args, scratch):
    """Static files 2 B / 21 KB / 92 KB, keep-alive, wrk -t1 -cC, servers interleaved."""
    root = make_docroot(scratch)
    plan = [(k, s, path) for k in range(1, args.runs + 1)
            for path, _ in FILES for s in args.servers]
    progress, results = Progress(len(plan)), []
    for k, s, path in plan:
        progress.step(f"{s:6} {path:8} run {k}/{args.runs}")
        port = args.port_base + args.servers.index(s)
        results.append(dict(measure(s, scratch, root, port, path, args.duration,
                                    args.connections), run=k))
    progress.close()
    return results


def open_idle(port, n, path):
    """Open n keep-alive connections that each get one response, and keep them open."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, n + 100), hard), hard))
    socks, req = [], f"GET /{path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(req)
            socks.append(s)
            if len(socks) % 500 == 0 or i == n - 1:
                for t in socks[-(len(socks) % 500 or 500):]:
                    if not t.recv(65536).startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(f"connection {i}: no 200 response")
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def exp_idle(args, scratch):
    """Memory per 10,000 idle keep-alive connections that each served one request."""
    root = make_docroot(scratch)
    plan = [(k, s) for k in range(1, args.runs + 1) for s in args.servers]
    progress, results = Progress(len(plan)), []
    for k, s in plan:
        progress.step(f"{s:6} {args.idle_conns} idle connections, run {k}/{args.runs}")
        port = args.port_base + args.servers.index(s)
        with Server(s, scratch, root, port) as srv:
            check_get(f"http://127.0.0.1:{port}/2b.txt", (root / "2b.txt").read_bytes())
            before = rss_mb(srv.pids())
            socks = open_idle(port, args.idle_conns, "2b.txt")
            time.sleep(1)
            after = rss_mb(srv.pids())
            for c in socks:
                c.close()
        growth = after - before
        results.append({"server": s, "run": k, "connections": args.idle_conns,
                        "rss_before_mb": before, "rss_after_mb": after,
                        "mb_per_10k": growth * 10000 / args.idle_conns})
    progress.close()
    return results


def summarize_idle(results, servers):
    rows = []
    for s in servers:
        rs = [r for r in results if r["server"] == s]
        if rs:
            per = [r["mb_per_10k"] for r in rs]
            rows.append({"server": s, "runs": len(rs), "connections": rs[0]["connections"],
                         "rss_before_mb": statistics.median(r["rss_before_mb"] for r in rs),
                         "mb_per_10k": statistics.median(per),
                         "min": min(per), "max": max(per)})
    return rows


def markdown_idle(rows, servers):
    lines = ["| server | idle connections | RSS before MB | RSS growth per 10k MB (median, min–max) |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['server']} | {r['connections']:,} | {fmt(r['rss_before_mb'])} | "
                     f"{fmt(r['mb_per_10k'])} ({fmt(r['min'])}–{fmt(r['max'])}) |")
    return "\n".join(lines) + "\n"


# name: (run, summarize, markdown)
EXPERIMENTS = {
    "quick": (exp_quick, summarize, markdown),
    "idle": (exp_idle, summarize_idle, markdown_idle),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__,
        epilog="experiments:\n" + "\n".join(f"  {n:8} {e[0].__doc__.strip()}"
                                            for n, e in EXPERIMENTS.items()))
    ap.add_argument("experiment", choices=EXPERIMENTS)
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run (5)")
    ap.add_argument("--connections", type=int, default=50, help="wrk -c (50)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions per server and file (3)")
    ap.add_argument("--servers", default="vireo,nginx",
                    help="comma-separated, interleaved in this order (vireo,nginx)")
    ap.add_argument("--port-base", type=int, default=28080,
                    help="first port; server i listens on port-base+i (28080)")
    ap.add_argument("--idle-conns", type=int, default=10000,
                    help="idle: keep-alive connections to open (10000)")
    ap.add_argument("--markdown-out", type=Path, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(args.servers) - set(SERVERS)
    if unknown or not args.servers:
        ap.error(f"unknown servers {sorted(unknown)}; known: {', '.join(SERVERS)}")
    return args


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"\nbench/run: {e}", file=sys.stderr)
        return 1


def run(argv):
    args = parse_args(argv)
    ensure_tools()
    if "vireo" in args.servers:
        ensure_vireo()
    stamp = datetime.datetime.now()
    scratch = RESULTS / "tmp" / f"{args.experiment}-{stamp:%Y%m%d-%H%M%S}"
    scratch.mkdir(parents=True)
    machine = machine_info(args.servers)
    experiment, summarize_fn, markdown_fn = EXPERIMENTS[args.experiment]
    results = experiment(args, scratch)
    rows = summarize_fn(results, args.servers)
    table = markdown_fn(rows, args.servers)
    out = RESULTS / f"{stamp:%Y-%m-%d}-{args.experiment}.json"
    out.write_text(json.dumps({
        "experiment": args.experiment, "date": stamp.isoformat(timespec="seconds"),
        "command": "bench/run " + " ".join(argv),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": machine, "summary": rows, "runs": results,
    }, indent=1) + "\n")
    if args.markdown_out:
        args.markdown_out.write_text(table)
    print(table, end="")
    print(f"raw results: {out.relative_to(REPO)}", file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0
