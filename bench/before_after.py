#!/usr/bin/env python3
"""vireo against vireo: CPU per request of two builds, for a change that must not
cost speed (a refactor's "within 3 % of before").

    bench/before_after.py OLD_BINARY [NEW_BINARY] [--runs 5] [--duration 6] [--callgrind]

NEW_BINARY defaults to target/release/vireo. Each build serves E3's files (2 B, 21 KB)
with E3's configuration (conf/vireo.conf), pinned to CPU 0, while `wrk -t1 -c50` on
CPU 1 loads it; the server's utime+stime from /proc ÷ requests is its CPU µs per
request. Builds alternate (old, new, then new, old, …) and the medians are compared.
`--callgrind` also counts user-space instructions per request under valgrind: the
difference of two runs of 2,000 and 6,000 keep-alive requests (ab -k -c10), so start-up
cancels out; it does not move with the machine's load. Loopback only; nothing else is
measured or written.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONF = (REPO / "bench" / "conf" / "vireo.conf").read_text()
FILES = {"2b.txt": b"ok", "21k.bin": os.urandom(21 * 1024)}


def start(binary, scratch, port, wrap=()):
    d = Path(tempfile.mkdtemp(dir=scratch))
    conf = CONF.replace("@DIR@", str(d)).replace("@ROOT@", str(scratch / "www"))
    (d / "v.conf").write_text(conf.replace("@PORT@", str(port)))
    p = subprocess.Popen([*wrap, str(binary), "-c", str(d / "v.conf")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/2b.txt"]).returncode == 0:
            return p
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"{binary} did not start")


def cpu_ticks(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_per_request(binary, scratch, port, path, duration):
    p = start(binary, scratch, port, ("taskset", "-c", "0"))
    url = f"http://127.0.0.1:{port}/{path}"
    try:
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c50", "-d1s", url], capture_output=True)
        before = cpu_ticks(p.pid)
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c50", f"-d{duration}s", url],
                             capture_output=True, text=True).stdout
        used = cpu_ticks(p.pid) - before
    finally:
        p.terminate()
        p.wait()
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return used * 1e6 / os.sysconf("SC_CLK_TCK") / requests


def instructions(binary, scratch, port, path, n):
    out = scratch / f"cg-{port}-{n}.out"
    p = start(binary, scratch, port, ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"))
    subprocess.run(["ab", "-q", "-k", "-n", str(n), "-c", "10", f"http://127.0.0.1:{port}/{path}"],
                   capture_output=True)
    p.send_signal(2)
    p.wait()
    totals = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    return int(totals.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default=str(REPO / "target" / "release" / "vireo"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--port", type=int, default=18600)
    ap.add_argument("--callgrind", action="store_true")
    a = ap.parse_args()
    builds = {"old": Path(a.old).resolve(), "new": Path(a.new).resolve()}
    with tempfile.TemporaryDirectory(prefix="vireo-ab-") as s:
        scratch = Path(s)
        (scratch / "www").mkdir()
        for name, body in FILES.items():
            (scratch / "www" / name).write_bytes(body)
        for path in FILES:
            got = {"old": [], "new": []}
            for i in range(a.runs):
                for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
                    got[name].append(cpu_per_request(builds[name], scratch, a.port, path, a.duration))
            old, new = statistics.median(got["old"]), statistics.median(got["new"])
            print(f"{path:8} CPU µs/req  old {old:6.2f}  new {new:6.2f}  new/old {new / old:.3f}"
                  f"   (old {' '.join(f'{x:.2f}' for x in got['old'])}; new {' '.join(f'{x:.2f}' for x in got['new'])})")
            if a.callgrind:
                per = {}
                for name, b in builds.items():
                    per[name] = (instructions(b, scratch, a.port, path, 6000)
                                 - instructions(b, scratch, a.port, path, 2000)) / 4000
                print(f"{path:8} instructions/req  old {per['old']:.0f}  new {per['new']:.0f}"
                      f"  new/old {per['new'] / per['old']:.3f}")


if __name__ == "__main__":
    main()
