"""Tests of the parsers of ab, h2load and oha, the experiment summaries, the Markdown
report (tables, open gaps), the plots and the configuration templates."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiments as ex  # noqa: E402
import report  # noqa: E402
import vireobench as vb  # noqa: E402

AB = """This is ApacheBench, Version 2.3 <$Revision: 1913912 $>
Benchmarking 127.0.0.1 (be patient)
Finished 300 requests


Server Software:        nginx/1.22.1
Server Hostname:        127.0.0.1
Server Port:            29004

Document Path:          /info.php
Document Length:        68980 bytes

Concurrency Level:      20
Time taken for tests:   1.972 seconds
Complete requests:      300
Failed requests:        280
   (Connect: 0, Receive: 0, Length: 280, Exceptions: 0)
Total transferred:      20735561 bytes
HTML transferred:       20694461 bytes
Requests per second:    152.12 [#/sec] (mean)
Time per request:       131.475 [ms] (mean)
Time per request:       6.574 [ms] (mean, across all concurrent requests)
Transfer rate:          10267.92 [Kbytes/sec] received

Connection Times (ms)
              min  mean[+/-sd] median   max
Connect:        0    0   0.1      0       1
Processing:     1  131 282.1     21    1152
Waiting:        1  122 269.8     20    1151
Total:          1  131 282.2     21    1152

Percentage of the requests served within a certain time (ms)
  50%     21
  66%     31
  75%     44
  80%    264
  90%    316
  95%   1120
  98%   1152
  99%   1152
 100%   1152 (longest request)
"""

AB_ERRORS = """Document Length:        21504 bytes
Complete requests:      1000
Failed requests:        7
   (Connect: 0, Receive: 3, Length: 0, Exceptions: 4)
Non-2xx responses:      5
Requests per second:    99.50 [#/sec] (mean)
"""

H2LOAD = """starting benchmark...
spawning thread #0: 100 total client(s). Timing-based test with 1.5s of warm-up time and 2s of main duration for measurements.
Warm-up started for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.56s, 28265.00 req/s, 8.30MB/s
requests: 56530 total, 56540 started, 56530 done, 56000 succeeded, 530 failed, 30 errored, 2 timeout
status codes: 56000 2xx, 0 3xx, 500 4xx, 0 5xx
traffic: 16.60MB (17411240) total, 10.22MB (10717207) headers (space savings 0.00%), 14.35MB (15043419) data
"""

H2LOAD_TLS = """starting benchmark...
spawning thread #0: 50 total client(s). Timing-based test with 1s of warm-up time and 4s of main duration for measurements.
Warm-up started for thread #0.
progress: 100% of clients started
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 5.00s, 12877.00 req/s, 2.76MB/s
requests: 51508 total, 51558 started, 51508 done, 51500 succeeded, 8 failed, 3 errored, 1 timeout
status codes: 51500 2xx, 0 3xx, 0 4xx, 4 5xx
traffic: 1.08GB (1160000000) total, 1.00MB (1000000) headers (space savings 45.45%), 1.07GB (1107000000) data
"""

# h2load against a port that does not speak TLS: every client errored, no TLS lines
H2LOAD_NO_TLS = """starting benchmark...
spawning thread #0: 2 total client(s). 4 total requests

finished in 10.60ms, 0.00 req/s, 0B/s
requests: 4 total, 0 started, 0 done, 0 succeeded, 4 failed, 4 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx
"""

OHA = {"summary": {"successRate": 0.9}, "latencyPercentiles": {"p50": 0.5013, "p99": 1.2},
       "statusCodeDistribution": {"200": 900, "502": 10},
       "errorDistribution": {"aborted due to deadline": 40, "Timeout": 50}}


class AbParser(unittest.TestCase):
    def test_php_run(self):
        a = vb.parse_ab(AB)
        self.assertEqual(a["complete"], 300)
        self.assertEqual(a["failed"], 280)
        self.assertEqual(a["failed_kinds"]["length"], 280)
        self.assertEqual(a["failed_real"], 0)   # phpinfo() pages differ in length: not failures
        self.assertEqual(a["errors"], 0)
        self.assertAlmostEqual(a["rps"], 152.12)
        self.assertAlmostEqual(a["time_per_req_ms"], 131.475)
        self.assertAlmostEqual(a["time_per_req_all_ms"], 6.574)
        self.assertEqual(a["doc_length"], 68980)
        self.assertEqual(a["percentiles_ms"]["50"], 21)
        self.assertEqual(a["percentiles_ms"]["100"], 1152)
        self.assertEqual(a["p99_ms"], 1152)
        self.assertEqual(a["conn_times_ms"]["total"]["median"], 21)

    def test_errors(self):
        a = vb.parse_ab(AB_ERRORS)
        self.assertEqual((a["failed_real"], a["non2xx"], a["errors"]), (7, 5, 12))
        self.assertIsNone(a["p99_ms"])

    def test_garbage(self):
        with self.assertRaises(ValueError):
            vb.parse_ab("apr_socket_connect(): Connection refused (111)\n")


class H2loadParser(unittest.TestCase):
    def test_summary(self):
        h = vb.parse_h2load(H2LOAD)
        self.assertEqual((h["requests"], h["succeeded"], h["failed"], h["errored"], h["timeout"]),
                         (56530, 56000, 530, 30, 2))
        self.assertEqual(h["in_flight"], 10)
        self.assertEqual(h["status"]["4xx"], 500)

    def test_log_and_percentiles(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d, "h.log")
            log.write_text("".join(f"1795303953653265\t{200 if i % 10 else 503}\t{i * 1000}\n"
                                   for i in range(1, 101)) + "garbage\n")
            entries = vb.h2load_log(log)
        self.assertEqual(len(entries), 100)
        self.assertEqual(sum(1 for st, _ in entries if st == 503), 10)
        ms = [m for _, m in entries]
        self.assertEqual(vb.percentile(ms, 50), 50.0)
        self.assertEqual(vb.percentile(ms, 99), 99.0)
        self.assertEqual(vb.percentile(ms, 100), 100.0)
        self.assertIsNone(vb.percentile([], 99))

    def test_garbage(self):
        with self.assertRaises(ValueError):
            vb.parse_h2load("connect: Connection refused\n")

    def test_tls_and_failures(self):
        h = vb.parse_h2load(H2LOAD_TLS)
        self.assertEqual((h["requests"], h["succeeded"], h["failed"], h["errored"], h["timeout"]),
                         (51508, 51500, 8, 3, 1))
        self.assertEqual((h["errors"], h["in_flight"], h["status"]["5xx"]), (8, 50, 4))
        t = vb.parse_h2load_tls(H2LOAD_TLS)
        self.assertEqual(t, {"tls_protocol": "TLSv1.3", "cipher": "TLS_AES_128_GCM_SHA256",
                             "key_exchange": "X25519 253 bits", "alpn": "h2"})

    def test_no_tls_session(self):
        self.assertEqual(set(vb.parse_h2load_tls(H2LOAD_NO_TLS).values()), {None})
        h = vb.parse_h2load(H2LOAD_NO_TLS)
        self.assertEqual((h["requests"], h["failed"], h["errored"]), (0, 4, 4))

    def test_command(self):
        h1 = vb.h2load_cmd("https://127.0.0.1:1/x", 50, 4, 1, "/l")
        self.assertIn("--h1", h1)
        self.assertFalse(any(a.startswith("-m") for a in h1))
        h2 = vb.h2load_cmd("https://127.0.0.1:1/x", 50, 4, 1, "/l", streams=10)
        self.assertNotIn("--h1", h2)
        self.assertIn("-m10", h2)
        self.assertEqual(h2[-6:], ["-c50", "-D4000ms", "--warm-up-time=1000ms",
                                   f"-N{vb.H2LOAD_IDLE}s", "--log-file=/l", "https://127.0.0.1:1/x"])
        self.assertEqual(h2[:3], ["taskset", "-c", vb.LOAD_CPU])


class StartErrors(unittest.TestCase):
    def test_emerg_line_and_short_path(self):
        log = ("vireo: [emerg] unknown directive \"ssl_certificate\" in "
               "/work/x/bench/results/tmp/tls-1/vireo-tls/vireo-tls.conf:18\n")
        self.assertEqual(vb.start_error_reason(log),
                         'unknown directive "ssl_certificate" (vireo-tls.conf:18)')
        nginx = ('2026/11/22 01:50:55 [emerg] 123#123: pcre2_compile() failed: missing closing '
                 'parenthesis in "^/posts/(\\d" in /d/nginx-routes/nginx.conf:45\n')
        self.assertEqual(vb.start_error_reason(nginx), 'pcre2_compile() failed: missing '
                         'closing parenthesis in "^/posts/(\\d" (nginx.conf:45)')

    def test_last_line_without_emerg(self):
        self.assertEqual(vb.start_error_reason("starting\nError: bad key file\n\n"),
                         "Error: bad key file")
        self.assertEqual(vb.start_error_reason(""), "no output")

    def test_note(self):
        e = vb.StartError("vireo did not come up", 'unknown directive "http2"')
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual(ex.refused("vireo", e),
                         'vireo: does not start with this config: unknown directive "http2"')


class OhaParser(unittest.TestCase):
    def test_totals(self):
        t = vb.parse_oha_json(json.dumps(OHA))
        self.assertEqual((t["responses"], t["ok"], t["non2xx"]), (910, 900, 10))
        self.assertEqual((t["failed"], t["aborted"], t["sent"]), (50, 40, 1000))
        self.assertAlmostEqual(t["p50_ms"], 501.3)

    def test_records_and_seconds(self):
        with tempfile.TemporaryDirectory() as d:
            db = Path(d, "o.db")
            con = sqlite3.connect(db)
            con.execute("CREATE TABLE oha (url TEXT, start REAL, start_latency_correction REAL, "
                        "end REAL, duration REAL, status INTEGER, len_bytes INTEGER, run INTEGER)")
            con.executemany("INSERT INTO oha VALUES ('/', ?, NULL, ?, 0.5, ?, 10, 1)",
                            [(0.1, 0.6, 200), (0.9, 1.4, 200), (1.2, 1.7, 502), (2.5, 3.0, 200)])
            con.commit()
            con.close()
            recs = vb.oha_records(db)
        self.assertEqual(len(recs), 4)
        ok, bad = vb.per_second([(10 + end, 200 <= st < 300) for _, end, st in recs], 14)
        self.assertEqual(ok[10:14], [1, 1, 0, 1])
        self.assertEqual(bad[11], 1)
        self.assertEqual(sum(ok), 3)


def e3_rows():
    runs = []
    for k, (v, n, l) in enumerate([(5.0, 10.0, 6.0), (6.0, 11.0, 6.5), (5.5, 12.0, 7.0)], 1):
        for server, cpu, rps in (("vireo", v, 100), ("nginx", n, 90), ("lighttpd", l, 120)):
            runs.append(dict(server=server, path="2b.txt", run=k, rps=rps + k, cpu_us_per_req=cpu,
                             p99_ms=1.0, rss_mb=3.0, errors=0))
    runs += [dict(server="vireo", path="info.php", run=1,
                  unsupported="not yet: needs FastCGI (issue 5) — vireo -t: unknown directive"),
             dict(server="nginx", path="info.php", run=1, rps=1000, cpu_us_per_req=150,
                  backend_cpu_us_per_req=400, p99_ms=50, rss_mb=19, errors=0),
             dict(server="h2o", path="info.php", run=1, unsupported="no PHP config for h2o")]
    return runs


class Summaries(unittest.TestCase):
    def test_points(self):
        results = [{"server": "nginx", "clients": 50, "ok_rps": v, "errors": 0} for v in (3, 1, 2)]
        results += [{"server": "vireo", "clients": 50, "unsupported": "not yet"},
                    {"server": "h2o", "clients": 50, "error": "boom"},
                    {"server": "lighttpd", "clients": 50, "ok_rps": 5, "errors": 1},
                    {"server": "lighttpd", "clients": 50, "error": "crashed"}]
        rows = ex.summarize_points(results, ["vireo", "nginx", "lighttpd", "h2o"], ["clients"],
                                   ["ok_rps", "errors"])
        v, n, l, h = rows
        self.assertEqual(v["note"], "not yet")
        self.assertEqual((n["ok_rps"], n["ok_rps_min"], n["ok_rps_max"], n["runs"]), (2, 1, 3, 3))
        self.assertEqual((l["runs"], l["failed_runs"], l["failure"]), (1, 1, "crashed"))
        self.assertEqual(h["note"], "failed: boom")

    def test_e3_table_has_vireo_column_and_notes(self):
        rows = vb.summarize(e3_rows(), ["vireo", "nginx", "lighttpd", "h2o"])
        md = ex.markdown_e3(rows, ["vireo", "nginx", "lighttpd", "h2o"])
        self.assertIn("| workload | vireo | nginx | lighttpd | h2o |", md)
        self.assertIn("| 2 B | 102 | 92 | 122 | – | Apache 2.4 event 4,810; nginx 6,650 |", md)
        self.assertIn("| phpinfo() | not yet: needs FastCGI (issue 5) | 1,000 |", md)
        self.assertIn("5.50 (5.00–6.00)", md)
        self.assertNotIn("unknown directive", md.split("Detail")[0])

    def test_the_floor_serves_one_file_a_start(self):
        opts, ctx = SimpleNamespace(runs=1, servers=["vireo", "floor"]), SimpleNamespace(root=Path("/w"))
        plan = ex.e3_plan(opts, ctx, with_php=True)
        self.assertEqual(plan, [(1, "vireo", "static", ["2b.txt", "21k.txt", "92k.txt"]),
                                (1, "vireo", "php", [ex.PHPINFO]),
                                (1, "floor", "static", ["2b.txt"]), (1, "floor", "static", ["21k.txt"]),
                                (1, "floor", "static", ["92k.txt"]), (1, "floor", "php", [ex.PHPINFO])])
        self.assertEqual(ex.floor_body(ctx, "floor", "21k.txt"), {"@FLOOR_BODY@": "@/w/21k.txt"})
        self.assertEqual(ex.floor_body(ctx, "floor", "2b.txt"), {})  # its default body, one write
        self.assertEqual(ex.floor_body(ctx, "vireo", "21k.txt"), {})

    def test_e5_ratios(self):
        results = [dict(server=s, path=f, rps=r, cpu_us_per_req=c, cpu_util=0.9,
                        ceiling_rps=1e6 / c, p99_ms=1, rss_mb=3) for s, f, r, c in
                   (("vireo", "2b.txt", 100, 5.0), ("nginx", "2b.txt", 90, 10.0),
                    ("floor", "2b.txt", 120, 4.0), ("vireo", "21k.txt", 50, 8.0),
                    ("nginx", "21k.txt", 45, 10.0), ("floor", "21k.txt", 60, 7.0))]
        rows = ex.summarize_e5(results, ["vireo", "nginx", "floor"])
        v = ex.find(rows, "vireo", path="2b.txt")
        self.assertAlmostEqual(v["vs_nginx"], 0.5)
        self.assertAlmostEqual(v["vs_floor"], 1.25)
        v21 = ex.find(rows, "vireo", path="21k.txt")
        self.assertAlmostEqual(v21["vs_nginx"], 0.8)
        self.assertAlmostEqual(v21["vs_floor"], 8 / 7)
        md = ex.markdown_e5(rows, ["vireo", "nginx", "floor"])
        self.assertIn("| 2 B | vireo | 100 | 5.00 | 90 % | 200,000 | 1.25× | 0.50× |", md)
        self.assertIn("| 21 KB | vireo | 50 | 8.00 | 90 % | 125,000 | 1.14× | 0.80× |", md)
        self.assertIn("C epoll floor", md)

    def test_e1_and_paper_table(self):
        results = [dict(server=s, path="info.php", clients=c, run=1, succeeded=100, errors=e,
                        ok_rps=50.0, p50_ms=1, p99_ms=2.5, cpu_us_per_req=3.0, in_flight=0)
                   for s, e in (("nginx", 0), ("apache", 7)) for c in (50, 15000)]
        results += [dict(server="vireo", path="info.php", clients=c, run=1,
                         unsupported="not yet: needs FastCGI (issue 5)") for c in (50, 15000)]
        rows = ex.summarize_e1(results, ["vireo", "nginx", "apache"])
        md = ex.markdown_e1(rows, ["vireo", "nginx", "apache"])
        self.assertIn("| 15,000 | not yet: needs FastCGI (issue 5) | 100 / 0 | 100 / 7 |", md)
        self.assertIn("| 50 | 40,073 / 0 | 23,243 / 0 |", md)   # paper 000, table 1
        self.assertIn("| 15,000 | 40,439 / 234 | – |", md)

    def test_e4_percentile_table(self):
        row = dict(server="nginx", path="info.php", run=1, rps=1000.0, complete=100000,
                   failed_real=0, failed=5, non2xx=0, time_per_req_ms=900.0, cpu_us_per_req=150.0,
                   backend_cpu_us_per_req=400.0, p50_ms=470, p99_ms=3800, requests=100000,
                   **{f"pct_{p}": 400 + int(p) for p in ex.PCTS})
        rows = ex.summarize_e4([row, dict(server="vireo", path="info.php", run=1,
                                          unsupported="not yet: needs FastCGI (issue 5)")],
                               ["vireo", "nginx"])
        md = ex.markdown_e4(rows, ["vireo", "nginx"])
        self.assertIn("| Requests per second | not yet: needs FastCGI (issue 5) | 1,000 | 1,155 | 1,203 |", md)
        self.assertIn("| 99% served within (ms) | – | 499 | 3,817 | 1,094 |", md)
        self.assertIn("| “Length” failures (page size varied) | – | 5 |", md)

    def test_e2_and_idle(self):
        e2 = [dict(server="nginx", setup="nginx-fpm", label="nginx + php-fpm", kind="php", run=1,
                   sent=1000, succeeded=990, failed=5, non2xx=5, aborted=0, error_rate=0.01,
                   qps_steady_median=200, qps_steady_min=150, qps_max=210, p50_ms=501, p99_ms=900,
                   cpu_us_per_req=250, backend_cpu_us_per_req=300,
                   series={"ok_per_s": [1, 2], "non2xx_per_s": [0, 0], "offered_per_s": [2, 2]}),
              dict(server="vireo", setup="vireo-fpm", label="vireo + php-fpm", kind="php", run=1,
                   unsupported="not yet: needs FastCGI (issue 5)")]
        rows = ex.summarize_e2(e2, ["nginx", "vireo"])
        self.assertEqual(rows[0]["series"]["ok_per_s"], [1, 2])
        md = ex.markdown_e2(rows, ["nginx", "vireo"])
        self.assertIn("| nginx + php-fpm | 1,000 | 990 | 10 | 1.0 % | 200 (150) | 210 | 501 / 900 |", md)
        self.assertIn("| vireo + php-fpm | not yet: needs FastCGI (issue 5) |", md)
        idle = [dict(server="apache", run=1, connections=10000, served=5000, rss_before_mb=15,
                     rss_after_mb=65, mb_per_10k=100.0)]
        md = ex.markdown_idle(ex.summarize_idle(idle, ["apache"]), ["apache"])
        self.assertIn("| Apache event | 5,000 of 10,000 | 15.0 | 100.0 | 110 |", md)

    def test_e2_stats(self):
        opts = SimpleNamespace(e2_ramp=2, e2_duration=6)
        totals = {"sent": 100, "aborted": 10, "ok": 80, "failed": 6, "non2xx": 4,
                  "p50s": [500, 510], "p99s": [900, 1500]}
        series = {"ok_per_s": [1, 5, 10, 20, 30, 40, 0]}
        st = ex.e2_stats(totals, series, opts)
        self.assertAlmostEqual(st["error_rate"], 10 / 90)
        self.assertEqual((st["qps_steady_median"], st["qps_steady_min"], st["qps_max"]), (30, 20, 40))
        self.assertEqual((st["p50_ms"], st["p99_ms"]), (505, 1500))


def routes_results(vireo_refused=False):
    """Three runs: nginx 10 µs -> 11 µs with 30 locations; vireo 5 -> 5.1/5.2/5.4."""
    runs = []
    for k, v30 in enumerate((5.1, 5.2, 5.4), 1):
        for path in ("21k.txt", "2b.txt"):
            for server, one, many in (("vireo", 5.0, v30), ("nginx", 10.0, 11.0)):
                for config, cpu in (("single", one), ("routes", many)):
                    if server == "vireo" and config == "routes" and vireo_refused:
                        if k == 1:
                            runs.append(dict(server=server, path=path, config=config, run=k,
                                             unsupported="vireo: does not start with this "
                                                         "config: unknown directive \"expires\""))
                        continue
                    runs.append(dict(server=server, path=path, config=config, run=k, rps=1000.0,
                                     cpu_us_per_req=cpu, p99_ms=1.0, rss_mb=5.0, errors=0))
    return runs


def tls_results(vireo=None):
    """Two runs on three protocols: nginx 20 µs (h1), 16 µs (h2), no HTTP/3; vireo 18/17 (h1),
    16/18 (h2), 15/17 (h3), or its start failure; Caddy 20 µs (h3)."""
    runs = []
    for k in (1, 2):
        for proto, server, cpu in (("h1", "nginx", 20.0), ("h1", "vireo", (18.0, 17.0)[k - 1]),
                                   ("h2", "nginx", 16.0), ("h2", "vireo", (16.0, 18.0)[k - 1]),
                                   ("h3", "caddy", 20.0), ("h3", "vireo", (15.0, 17.0)[k - 1]),
                                   ("h3", "nginx", None)):
                base = dict(server=server, path="21k.txt", proto=proto, run=k)
                if (server == "vireo" and vireo) or cpu is None:
                    if k == 1:
                        runs.append(dict(base, unsupported=vireo if cpu else "no QUIC, HTTP/3 in nginx"))
                    continue
                runs.append(dict(base, ok_rps=9000.0, cpu_us_per_req=cpu, p50_ms=2.0, p99_ms=9.0,
                                 succeeded=36000, errors=0, rss_mb=8.0, tls_protocol="TLSv1.3",
                                 cipher="TLS_AES_128_GCM_SHA256", key_exchange="X25519 253 bits",
                                 alpn={"h1": "http/1.1"}.get(proto, proto),
                                 streams=10 if proto == "h2" else 1))
    return runs


def stream_results(haproxy=True, vireo=None):
    """Two runs of both workloads: vireo 4/5 µs per exchange and 90/110 per MB, nginx 5 and
    100, HAProxy 6 and 80 (per MB: better than vireo), the C floor 4.5 and 95; or vireo's
    start failure."""
    runs = []
    for k in (1, 2):
        for workload, figures in (("echo", {"vireo": (4.0, 5.0)[k - 1], "nginx": 5.0, "haproxy": 6.0,
                                            "relay": 4.5}),
                                  ("bulk", {"vireo": (90.0, 110.0)[k - 1], "nginx": 100.0,
                                            "haproxy": 80.0, "relay": 95.0})):
            for server, cpu in figures.items():
                base = dict(server=server, workload=workload, run=k)
                if server == "haproxy" and not haproxy:
                    continue
                if server == "vireo" and vireo:
                    if k == 1:
                        runs.append(dict(base, unsupported=vireo))
                    continue
                runs.append(dict(base, completed=1000, per_s=50000.0 if workload == "echo" else 2000.0,
                                 cpu_us_per_unit=cpu, cpu_util=0.9, backend_cpu_us_per_unit=3.0,
                                 rss_mb=4.0, errors=0))
    return runs


class StreamExperiment(unittest.TestCase):
    SERVERS = ["vireo", "nginx", "haproxy", "relay"]

    def test_echo_client_line(self):
        self.assertEqual(ex.parse_echo("units=7 bytes=7168 errors=1 seconds=2.500\n"),
                         {"units": 7, "bytes": 7168, "errors": 1, "seconds": 2.5})
        with self.assertRaises(ValueError):
            ex.parse_echo("echo: connect: refused")

    def test_summary_and_table(self):
        rows = ex.summarize_stream(stream_results(), self.SERVERS)
        v = ex.find(rows, "vireo", workload="echo")
        self.assertEqual((v["vs_nginx"], v["vs_nginx_min"], v["vs_nginx_max"]), (0.9, 0.8, 1.0))
        self.assertAlmostEqual(v["vs_haproxy"], 0.75)
        self.assertIsNone(ex.find(rows, "nginx", workload="echo").get("vs_nginx"))
        md = ex.markdown_stream(rows, self.SERVERS)
        self.assertIn("| 1 KB echo exchanges | vireo | 4.50 (4.00–5.00) per exchange | "
                      "0.900× (0.800–1.000) | 0.750× (0.667–0.833) | 1.000× (0.889–1.111) | "
                      "50,000 exchanges/s | 3.00 | 0 |", md)
        self.assertIn("| 100 MB transfer | HAProxy | 80.00 per MB | 0.800× | 1 | 0.842× | "
                      "2,000 MB/s |", md)
        self.assertIn("| 100 MB transfer | nginx | 100.00 per MB | 1 | 1.250× | 1.053× |", md)
        self.assertIn("| 100 MB transfer | C epoll relay (floor) | 95.00 per MB | 0.950× | "
                      "1.188× | 1 |", md)

    def test_target_and_gaps(self):
        data = dataset("stream", ex.summarize_stream(stream_results(), self.SERVERS), self.SERVERS)
        self.assertEqual(report.stream_targets(data), [
            "| stream, 1 KB echo exchanges: CPU µs per exchange ≤ nginx's and HAProxy's | "
            "4.50 µs = 0.90× nginx (5.00), 0.75× HAProxy (6.00); 1.00× the C floor (4.50) | met |",
            "| stream, 100 MB transfer: CPU µs per MB ≤ nginx's and HAProxy's | "
            "100.00 µs = 1.00× nginx (100.00), 1.25× HAProxy (80.00); 1.05× the C floor (95.00) "
            "| not met |"])
        gaps, missing = report.open_gaps({"stream": data})
        self.assertEqual([(g["where"], g["metric"], g["peer"]) for g in gaps],
                         [("100 MB transfer", "CPU µs per exchange / per MB", "haproxy")])
        self.assertEqual(missing, [])
        md = report.render_report({"stream": data})
        self.assertIn("## stream — TCP proxy of 1 KB echo exchanges and of a 100 MB transfer "
                      "(issue 20)", md)
        self.assertIn("Asked by: issue 20", md)
        self.assertIn("libnginx-mod-stream", md)
        self.assertIn("| stream, 1 KB echo exchanges: CPU µs per exchange", md)

    def test_peer_not_measured_and_vireo_refused(self):
        data = dataset("stream", ex.summarize_stream(stream_results(haproxy=False), ["vireo", "nginx"]),
                       ["vireo", "nginx"])
        self.assertEqual(report.stream_targets(data)[0],
                         "| stream, 1 KB echo exchanges: CPU µs per exchange ≤ nginx's and HAProxy's | "
                         "4.50 µs = 0.90× nginx (5.00) | met (HAProxy not measured) |")
        why = 'vireo: does not start with this config: unknown directive "stream" (vireo-stream.conf:12)'
        rows = ex.summarize_stream(stream_results(vireo=why), self.SERVERS)
        md = ex.markdown_stream(rows, self.SERVERS)
        self.assertIn(f"| 100 MB transfer | vireo | {why} |", md)
        data = dataset("stream", rows, self.SERVERS)
        self.assertIn(f"not measured ({why})", report.stream_targets(data)[1])
        _, missing = report.open_gaps({"stream": data})
        self.assertEqual([m["where"] for m in missing], ["1 KB echo exchanges", "100 MB transfer"])

    def test_tools_and_templates(self):
        o = ex.EXPERIMENTS["stream"].defaults(SimpleNamespace(servers=None, duration=None,
                                                              runs=None, points=None))
        self.assertEqual(o.servers, ["vireo", "nginx", "haproxy", "relay"])
        tools = ex.EXPERIMENTS["stream"].tools(o)
        self.assertTrue({"cc", "nginx", "mod_stream", "haproxy"} <= set(tools), tools)
        self.assertEqual(vb.PACKAGES["mod_stream"], "libnginx-mod-stream")
        keys = dict(Templates.KEYS)
        for name in ("vireo", "nginx"):
            text = vb.fill((vb.CONF / vb.SERVERS[name]["stream"]).read_text(), keys)
            self.assertIn("listen 127.0.0.1:1 reuseport backlog=4096; proxy_pass 127.0.0.1:8;", text)
            self.assertIn("listen 127.0.0.1:10 backlog=4096; proxy_pass 127.0.0.1:9;", text)
        self.assertIn("\nload_module /usr/lib/nginx/modules/ngx_stream_module.so;\n",
                      (vb.CONF / "nginx-stream.conf").read_text())
        text = vb.fill((vb.CONF / "haproxy-stream.cfg").read_text(), keys)
        for line in ("mode tcp", "nbthread 1", "bind 127.0.0.1:1 backlog 4096",
                     "bind 127.0.0.1:10 backlog 4096", "server echo 127.0.0.1:8",
                     "server source 127.0.0.1:9"):
            self.assertIn(line, text)
        self.assertFalse([l for l in text.splitlines() if l.strip().startswith(("log", "option splice"))])

    @unittest.skipUnless(shutil.which("nginx") and vb.have("mod_stream"),
                         "needs nginx and libnginx-mod-stream")
    def test_nginx_accepts_the_stream_template(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d, "stream.conf")
            path.write_text(vb.fill((vb.CONF / "nginx-stream.conf").read_text(),
                                    dict(Templates.KEYS, **{"@DIR@": d})))
            r = subprocess.run(["nginx", "-t", "-p", f"{d}/", "-e", f"{d}/e.log", "-c", str(path)],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)

    @unittest.skipUnless(shutil.which("cc"), "needs cc")
    def test_echo_peers_and_clients(self):
        with tempfile.TemporaryDirectory() as d:
            binary = Path(d, "echo")
            subprocess.run(["cc", "-O2", "-Wall", "-o", str(binary), str(vb.ECHO_SRC)], check=True)
            ports = [_free_port() for _ in range(2)]
            serve = subprocess.Popen([str(binary), "serve", str(ports[0])])
            source = subprocess.Popen([str(binary), "source", str(ports[1]), "2"])
            try:
                for p in ports:
                    for _ in range(100):
                        if vb.port_open(p):
                            break
                        time.sleep(0.02)
                out = subprocess.run([str(binary), "exchange", str(ports[0]), "3", "0.2", "1024"],
                                     capture_output=True, text=True, timeout=30).stdout
                e = ex.parse_echo(out)
                self.assertGreater(e["units"], 0)
                self.assertEqual((e["bytes"], e["errors"]), (e["units"] * 1024, 0))
                out = subprocess.run([str(binary), "fetch", str(ports[1]), "0", "2"],
                                     capture_output=True, text=True, timeout=30).stdout
                self.assertEqual(ex.parse_echo(out)["units"], 1)
                self.assertEqual(ex.parse_echo(out)["bytes"], 2 << 20)
            finally:
                serve.terminate()
                source.terminate()
                serve.wait()
                source.wait()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class IssueExperiments(unittest.TestCase):
    def test_paired_ratios(self):
        results = [dict(server="a", run=1, x=2.0), dict(server="b", run=1, x=4.0),
                   dict(server="a", run=2, x=3.0), dict(server="b", run=2, x=3.0),
                   dict(server="a", run=3, x=9.0), dict(server="b", run=3, error="boom")]
        self.assertEqual(ex.paired(results, "x", {"server": "a"}, {"server": "b"}, ()),
                         (0.75, 0.5, 1.0))

    def test_routes_summary_and_table(self):
        rows = ex.summarize_routes(routes_results(), ["vireo", "nginx"])
        v = ex.find(rows, "vireo", path="21k.txt", config="routes")
        self.assertAlmostEqual(v["ratio"], 1.04)
        self.assertAlmostEqual(v["ratio_max"], 1.08)
        self.assertIsNone(ex.find(rows, "vireo", path="21k.txt", config="single").get("ratio"))
        md = ex.markdown_routes(rows, ["vireo", "nginx"])
        self.assertIn("| 21 KB | vireo | 5.00 | 5.20 (5.10–5.40) | 1.040× (1.020–1.080) | "
                      "1,000 / 1,000 | 0 |", md)
        self.assertIn("| 2 B | nginx | 10.00 | 11.00 | 1.100× |", md)

    def test_routes_refused(self):
        rows = ex.summarize_routes(routes_results(vireo_refused=True), ["vireo", "nginx"])
        md = ex.markdown_routes(rows, ["vireo", "nginx"])
        self.assertIn('| 21 KB | vireo | vireo: does not start with this config: unknown '
                      'directive "expires" |', md)
        gaps, missing = report.open_gaps({"routes": dataset("routes", rows, ["vireo", "nginx"])})
        self.assertEqual({(m["where"], m["why"][:38]) for m in missing},
                         {("21 KB, 30 locations", "vireo: does not start with this config"),
                          ("2 B, 30 locations", "vireo: does not start with this config")})
        target = report.routes_target(dataset("routes", rows, ["vireo", "nginx"]))
        self.assertEqual(target, ['| routing: 30 locations ≤ 1.05× single (CPU µs/req) | – | not '
                                  'measured (vireo: does not start with this config: unknown '
                                  'directive "expires") |'])

    def test_routes_target_and_gaps(self):
        data = dataset("routes", ex.summarize_routes(routes_results(), ["vireo", "nginx"]),
                       ["vireo", "nginx"])
        self.assertEqual(report.routes_target(data), [
            "| routing: 30 locations ≤ 1.05× single (CPU µs/req) | 21 KB 1.040× (nginx 1.100×); "
            "2 B 1.040× (nginx 1.100×) | met |"])
        gaps, missing = report.open_gaps({"routes": data})
        self.assertEqual((gaps, missing), ([], []))   # vireo below nginx, its ratio too
        md = report.render_report({"routes": data})
        self.assertIn("## routes — 30 locations against E3's config (issue 4)", md)
        self.assertIn("Asked by: issue 4", md)
        self.assertIn("`bench/conf/routes.inc`", md)

    def test_tls_summary_table_and_target(self):
        servers = ["vireo", "nginx", "caddy"]
        rows = ex.summarize_tls(tls_results(), servers)
        v1 = ex.find(rows, "vireo", proto="h1")
        self.assertEqual((v1["vs_ref"], v1["vs_ref_min"], v1["vs_ref_max"]), (0.875, 0.85, 0.9))
        v3 = ex.find(rows, "vireo", proto="h3")
        self.assertEqual((v3["vs_ref"], v3["vs_ref_min"], v3["vs_ref_max"]), (0.8, 0.75, 0.85))
        md = ex.markdown_tls(rows, servers)
        self.assertIn("| TLS 1.3, HTTP/1.1 keep-alive | vireo | 17.50 (17.00–18.00) | "
                      "0.875× (0.850–0.900) | 9,000 | 2.00 / 9.00 | 0 | TLSv1.3 "
                      "TLS_AES_128_GCM_SHA256, X25519 253 bits, ALPN http/1.1 |", md)
        self.assertIn("ALPN h2 |", md)
        self.assertIn("| QUIC, HTTP/3 | vireo | 16.00 (15.00–17.00) | 0.800× (0.750–0.850) |", md)
        self.assertIn("| QUIC, HTTP/3 | nginx | no QUIC, HTTP/3 in nginx |", md)
        data = dataset("tls", rows, servers)
        self.assertEqual(report.tls_targets(data), [
            "| TLS 1.3, HTTP/1.1 keep-alive, 21 KB: CPU µs/req ≤ nginx's | 17.50 µs = 0.88× nginx "
            "(20.00) | met |",
            "| TLS 1.3, HTTP/2, 21 KB: CPU µs/req ≤ nginx's | 17.00 µs = 1.06× nginx (16.00) | "
            "not met |",
            "| QUIC, HTTP/3, 21 KB: CPU µs/req ≤ Caddy's | 16.00 µs = 0.80× Caddy (20.00) | met |"])
        gaps, _ = report.open_gaps({"tls": data})
        self.assertEqual([(g["where"], g["metric"], g["clear"]) for g in gaps],
                         [("TLS 1.3, HTTP/2", "CPU µs/req", False)])

    def test_tls_vireo_does_not_start(self):
        why = 'vireo: does not start with this config: unknown directive "ssl_certificate" ' \
              '(vireo-tls.conf:18)'
        rows = ex.summarize_tls(tls_results(vireo=why), ["vireo", "nginx"])
        md = ex.markdown_tls(rows, ["vireo", "nginx"])
        self.assertIn(f"| TLS 1.3, HTTP/2 | vireo | {why} |", md)
        self.assertIn("| TLS 1.3, HTTP/2 | nginx | 16.00 | 1.000× |", md)
        data = dataset("tls", rows, ["vireo", "nginx"])
        self.assertEqual(report.tls_targets(data)[0],
                         f"| TLS 1.3, HTTP/1.1 keep-alive, 21 KB: CPU µs/req ≤ nginx's | – | "
                         f"not measured ({why}) |")
        _, missing = report.open_gaps({"tls": data})
        self.assertEqual([m["where"] for m in missing], ["TLS 1.3, HTTP/1.1 keep-alive",
                                                         "TLS 1.3, HTTP/2", "QUIC, HTTP/3"])
        self.assertIn(f"- tls (TLS 1.3, HTTP/1.1 keep-alive, TLS 1.3, HTTP/2, QUIC, HTTP/3): {why}",
                      report.render_report({"tls": data}))


def dataset(name, rows, servers, **options):
    opts = dict(servers=servers, duration=5, runs=3, connections=50, points=[50], ab_n=100000,
                ab_n_php=100000, ab_c=1000, ab_time=20, idle_conns=10000, e2_conns=5000,
                e2_ramp=50, e2_duration=100, e2_interval=5.0, e2_steps=10, e2_timeout=10)
    opts.update(options)
    return {"experiment": name, "date": "2026-11-21T23:00:00", "command": f"bench/run {name}",
            "options": opts, "elapsed_s": 60, "summary": rows,
            "machine": {"nproc": 2, "cpu": "test", "kernel": "6", "loadavg": [1, 1, 1],
                        "versions": {"nginx": "nginx/1.22.1"}}}


class Report(unittest.TestCase):
    def data(self):
        servers = ["vireo", "nginx", "lighttpd", "h2o"]
        e3 = dataset("E3", vb.summarize(e3_rows(), servers), servers)
        idle = [dict(server=s, run=k, connections=10000, served=10000, rss_before_mb=4,
                     rss_after_mb=4 + mb, mb_per_10k=mb)
                for k, (v, n) in enumerate([(5.5, 5.0), (5.6, 5.1), (5.7, 5.2)], 1)
                for s, mb in (("vireo", v), ("nginx", n))]
        m = dataset("M", ex.summarize_idle(idle, ["vireo", "nginx"]), ["vireo", "nginx"])
        return {"E3": e3, "M": m}

    def test_gaps(self):
        gaps, missing = report.open_gaps(self.data())
        got = {(g["experiment"], g["where"], g["metric"], g["peer"]) for g in gaps}
        # vireo 5.5 µs vs lighttpd 6.5: no gap; rps 102 vs lighttpd 122: gap, ranges apart
        self.assertIn(("E3", "2 B", "req/s", "lighttpd"), got)
        self.assertNotIn(("E3", "2 B", "CPU µs/req", "lighttpd"), got)
        self.assertIn(("M", "–", "RSS MB per 10k idle connections", "nginx"), got)
        mem = next(g for g in gaps if g["experiment"] == "M")
        self.assertTrue(mem["clear"])          # 5.5–5.7 vs 5.0–5.2: apart
        self.assertAlmostEqual(mem["ratio"], 5.6 / 5.1)
        self.assertEqual(missing, [{"experiment": "E3", "where": "phpinfo()",
                                    "why": "not yet: needs FastCGI (issue 5) — vireo -t: unknown directive"}])

    def test_latency_only_beside_peers_that_failed_no_more(self):
        rows = [dict(server="vireo", path="21k.txt", clients=15000, ok_rps=57000, p99_ms=406.0, errors=0, runs=3),
                dict(server="lighttpd", path="21k.txt", clients=15000, ok_rps=59000, p99_ms=267.0, errors=3976,
                     runs=3),
                dict(server="nginx", path="21k.txt", clients=15000, ok_rps=62000, p99_ms=368.0, errors=0, runs=3)]
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "lighttpd", "nginx"])})
        p99 = [g for g in gaps if g["metric"] == "p99 ms"]
        self.assertEqual([(g["peer"], g["peer_value"]) for g in p99], [("nginx", 368.0)])
        rps = [g for g in gaps if g["metric"] == "successful req/s"]
        self.assertEqual(rps[0]["peer"], "nginx")  # throughput counts every peer

    def test_cpu_per_request_only_beside_peers_that_failed_no_more(self):
        rows = [dict(server="vireo", path="info.php", clients=15000, cpu_us_per_req=115.0, errors=0, runs=3),
                dict(server="lighttpd", path="info.php", clients=15000, cpu_us_per_req=13.4,
                     errors=231025, runs=3),
                dict(server="apache", path="info.php", clients=15000, cpu_us_per_req=306.0, errors=0, runs=3)]
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "lighttpd", "apache"])})
        self.assertEqual([g for g in gaps if g["metric"] == "server CPU µs/req"], [])
        rows[2]["cpu_us_per_req"] = 100.0
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "lighttpd", "apache"])})
        self.assertEqual([g["peer"] for g in gaps if g["metric"] == "server CPU µs/req"], ["apache"])

    def test_noisy_gaps_fold(self):
        gaps = [{"experiment": "E1", "where": f"21 KB, c={c}", "metric": "req/s", "vireo": 90,
                 "peer": "nginx", "peer_value": 100, "ratio": 0.9, "spec": ",.0f", "clear": False}
                for c in (50, 100)]
        md = report.gaps_markdown(gaps, [])
        self.assertIn("| E1 | 21 KB | req/s | c=50 90 vs nginx 100 (0.90×); c=100 90 vs nginx 100 (0.90×) |", md)

    def test_floor_beside_a_gap(self):
        rows = [dict(server="vireo", path="21k.txt", clients=1000, ok_rps=60000, ok_rps_min=59000,
                     ok_rps_max=60500, runs=2),
                dict(server="nginx", path="21k.txt", clients=1000, ok_rps=70000, ok_rps_min=69000,
                     ok_rps_max=71000, runs=2),
                dict(server="floor", path="21k.txt", clients=1000, ok_rps=61000, runs=2)]
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "nginx", "floor"])})
        self.assertEqual([(g["peer"], g["floor"]) for g in gaps], [("nginx", 61000)])
        md = report.gaps_markdown(gaps, [])
        self.assertIn("| E1 | 21 KB, c=1,000 | successful req/s | 60,000 | nginx 70,000 | 0.86× | "
                      "apart | 61,000 |", md)
        del rows[2]
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "nginx"])})
        self.assertIn("| apart | – |", report.gaps_markdown(gaps, []))

    def test_a_median_of_failures_keeps_its_half(self):
        rows = [dict(server="vireo", path="info.php", clients=15000, errors=0.5, errors_min=0,
                     errors_max=1, runs=2),
                dict(server="apache", path="info.php", clients=15000, errors=0, errors_min=0,
                     errors_max=0, runs=2)]
        gaps, _ = report.open_gaps({"E1": dataset("E1", rows, ["vireo", "apache"])})
        self.assertIn("c=15,000 0.5 vs Apache event 0", report.gaps_markdown(gaps, []))

    def test_no_gap_when_vireo_best(self):
        rows = [dict(server="vireo", mb_per_10k=4.0, runs=3), dict(server="nginx", mb_per_10k=5.0, runs=3),
                dict(server="floor", mb_per_10k=1.0, runs=3)]  # the floor is not a peer
        gaps, _ = report.open_gaps({"M": dataset("M", rows, ["vireo", "nginx", "floor"])})
        self.assertEqual(gaps, [])

    def test_render(self):
        md = report.render_report(self.data(), {"E3": "x-E3.svg"})
        gaps_at = md.index("## Open gaps")
        self.assertLess(gaps_at, md.index("## E3"))
        self.assertLess(md.index("## E3"), md.index("## M"))
        self.assertIn("| E3 | 2 B | req/s | 102 | lighttpd 122 | 0.84× | apart |", md)
        self.assertIn("- E3 (phpinfo()): not yet: needs FastCGI (issue 5)", md)
        self.assertIn("![E3](x-E3.svg)", md)
        self.assertIn("requests/s and p99 are noisy", md)
        self.assertIn("Open files: 20,000", md)
        self.assertIn("Command: `bench/run E3`", md)

    def test_causes_per_experiment(self):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "causes.md"
            f.write_text("# Causes\n\nintro\n\n## E3\n\n- the 21 KB copy: sendfile now.\n\n## M\n\n")
            self.assertEqual(report.causes(f), {"E3": "- the 21 KB copy: sendfile now.\n"})
        md = report.section("E3", self.data()["E3"], None, "- the cause.\n")
        self.assertIn("**Causes measured, and what was done** (bench/causes.md):\n\n- the cause.\n", md)

    def test_targets(self):
        md = report.targets_markdown(self.data())
        # 2 B: vireo 5.5 µs vs nginx 11.0 = 0.50x, target 4.2/6.2 = 0.68x
        self.assertIn("| 2 B: CPU µs/req ≤ nginx's (issue 2); aim ≤ 4.2 (≈0.68× nginx) | "
                      "5.50 µs = 0.50× nginx (11.00) | met |", md)
        self.assertIn("| idle memory ≤ 6 MB per 10k connections (issue 2); aim ≤ 5 MB (DESIGN.md) | "
                      "5.6 MB | met; aim not met |", md)
        self.assertIn("| FastCGI: front-server CPU ≤ 0.5× nginx's | – | not measured (needs FastCGI, issue 5) |", md)

    def test_proxy_gzip_and_e2_targets(self):
        def row(file, server, cpu, ratio):
            return dict(file=file, server=server, cpu_us=cpu, cpu_ratio=ratio, cpu_min=cpu, cpu_max=cpu,
                        rps=1000, p99_ms=1.0, rss_mb=6.0, errors=0, runs=3)
        proxy = dataset("proxy", [row("2b.txt", "vireo", 10.0, 0.68), row("2b.txt", "nginx", 14.7, 1.0),
                                  row("21k.txt", "vireo", 17.6, 0.81), row("21k.txt", "nginx", 21.6, 1.0)],
                        ["vireo", "nginx"])
        self.assertEqual(report.proxy_targets(proxy), [
            "| proxy to a fast backend, keep-alive: CPU µs/req ≤ 0.7× nginx's | 2 B: 10.00 µs = 0.68× "
            "nginx (14.70); 21 KB: 17.60 µs = 0.81× nginx (21.60) | not met |"])
        plain, cached = "92 KB JS, gzip 5; compression ratio vireo 4.28:1, nginx 4.28:1", \
            "the same, vireo with compress_cache 16m (ratio 4.28:1)"
        gz = dataset("gzip", [row(plain, "vireo", 1000.0, 0.62), row(plain, "nginx", 1600.0, 1.0),
                              row(cached, "vireo", 12.0, 0.01), row(cached, "nginx", 1600.0, 1.0)],
                     ["vireo", "nginx"])
        self.assertEqual(report.gzip_targets(gz), [
            "| gzip 5, 92 KB JS: CPU µs/req ≤ 0.8× nginx's | compression 4.28:1: 1000.00 µs = 0.62× "
            "nginx (1600.00) | met |",
            "| gzip 5 with compress_cache: CPU µs/req ≤ 0.2× nginx's | compression 4.28:1: 12.00 µs = "
            "0.01× nginx (1600.00) | met |"])
        e2 = dataset("E2", [dict(setup="vireo-apache", server="vireo", error_rate=0.008, qps_steady_median=990),
                            dict(setup="nginx-apache", server="nginx", error_rate=0.009, qps_steady_median=987)],
                     ["vireo", "nginx"])
        self.assertEqual(report.e2_proxy_target(e2), [
            "| proxy: E2 → Apache error rate and QPS at least nginx's | error rate 0.800% vs nginx "
            "0.900%, steady QPS 990 vs 987 | met |"])
        md = report.render_report({"proxy": proxy, "gzip": gz})
        self.assertIn("## proxy — reverse proxy to h2o", md)
        self.assertIn("## gzip — on-the-fly gzip 5", md)

    def test_docs_header(self):
        h = report.docs_header(self.data(), "bench/run all", 41.5)
        self.assertIn("`bench/run all` (42 min)", h)
        self.assertIn("2026-11-21 23:00", h)

    def test_plots(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib not installed")
        with tempfile.TemporaryDirectory() as d:
            data = self.data()
            for name in ("E3", "M"):
                path = Path(d, f"{name}.svg")
                report.PLOTS[name](data[name], path)
                self.assertTrue(path.read_text().lstrip().startswith("<?xml"))


class Templates(unittest.TestCase):
    KEYS = {"@DIR@": "/d", "@ROOT@": "/r", "@PORT@": 1, "@FPM@": "127.0.0.1:2",
            "@FPM_HOST@": "127.0.0.1", "@FPM_PORT@": 2, "@UPSTREAM@": "127.0.0.1:3",
            "@UPSTREAM_TLS@": "127.0.0.1:5",
            "@GRPC@": "127.0.0.1:6", "@PORT_H2C@": 7,
            "@CERT@": "/c.pem", "@KEY@": "/k.pem", "@PORT_H2@": 4, "@PORT_H3@": 5,
            "@FPM_CONNS@": 40, "@UPSTREAM_CONNS@": 500,
            "@ECHO@": "127.0.0.1:8", "@SOURCE@": "127.0.0.1:9", "@PORT_BULK@": 10}

    def test_every_template_fills(self):
        for spec in vb.SERVERS.values():
            for key in ("conf", "php", "proxy", "tuned", "tls", "stream"):
                name = spec.get(key)
                if name and (vb.CONF / name).is_file():
                    text = vb.fill((vb.CONF / name).read_text(), self.KEYS)
                    self.assertNotRegex(text, r"@[A-Z_]+@", name)

    def test_proxy_max_conns_follow_the_backend(self):
        # vireo-proxy.conf's max_conns: Apache prefork's MaxRequestWorkers, else no limit
        self.assertEqual(ex.backend_workers("apache-prefork"), 500)
        self.assertEqual(ex.backend_workers("h2o"), 0)
        text = vb.fill((vb.CONF / "vireo-proxy.conf").read_text(),
                       dict(self.KEYS, **{"@UPSTREAM_CONNS@": 500}))
        self.assertIn("max_conns=500; queue 20000", text)

    def test_proxy_tls_edits_apply_to_nginx_conf(self):
        text = (vb.CONF / "nginx.conf").read_text()
        for old, new in ex.PROXY_TLS_EDITS["nginx"]:
            self.assertEqual(text.count(old), 1, old)
            text = text.replace(old, new)
        text = vb.fill(text, self.KEYS)
        self.assertIn("upstream bes { server 127.0.0.1:5;", text)
        self.assertIn("location /proxys/ { proxy_pass https://bes/;", text)

    def test_cache_edits_apply_to_both_proxy_templates(self):
        for name in ("vireo", "nginx"):
            text = (vb.CONF / vb.SERVERS[name]["proxy"]).read_text()
            for old, new in ex.CACHE_EDITS[name]:
                self.assertEqual(text.count(old), 1, (name, old))
                text = text.replace(old, new)
            text = vb.fill(text, dict(self.KEYS, **{"@UPSTREAM_CONNS@": 0}))
            self.assertIn("keys_zone=bench:10m", text)
            self.assertIn("location /storm/", text)

    def routes_conf(self, name, config):
        text = (vb.CONF / vb.SERVERS[name]["conf"]).read_text()
        for old, new in ex.routes_edits(name, config):
            self.assertEqual(text.count(old), 1, old)
            text = text.replace(old, new)
        return vb.fill(text, self.KEYS)

    def test_routes_configs(self):
        for name in ex.ROUTES_SERVERS:
            one, many = self.routes_conf(name, "single"), self.routes_conf(name, "routes")
            self.assertEqual(one.count("location"), 0, name)  # nginx: no proxy, no PHP
            self.assertEqual(many.count("\n    location "), 30, name)
            self.assertEqual(many.count("location ~"), 10)
            self.assertEqual(many.count("location ^~"), 4)
            self.assertIn("location @app", many)
            # the files are served by the last regex, the only one whose root has them
            self.assertTrue(many.rstrip().splitlines()[-3].endswith("{ root /r; }"))

    @unittest.skipUnless(shutil.which("nginx") and shutil.which("openssl"), "needs nginx, openssl")
    def test_nginx_accepts_routes_and_tls(self):
        with tempfile.TemporaryDirectory() as d:
            cert, key = ex.make_cert(d)
            keys = dict(self.KEYS, **{"@DIR@": d, "@CERT@": cert, "@KEY@": key})
            for conf, text in (("routes", self.routes_conf("nginx", "routes")),
                               ("tls", (vb.CONF / "nginx-tls.conf").read_text())):
                path = Path(d, f"{conf}.conf")
                path.write_text(vb.fill(text.replace("/d/", f"{d}/"), keys))
                r = subprocess.run(["nginx", "-t", "-p", f"{d}/", "-e", f"{d}/e.log", "-c",
                                    str(path)], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_fill_refuses_leftovers(self):
        with self.assertRaises(RuntimeError):
            vb.fill("listen @PORT@; root @NOPE@;", {"@PORT@": 1})

    @unittest.skipUnless(vb.SHARED_PEERS.is_dir(), "no ../shared/peers")
    def test_peer_templates_are_copies(self):
        for f in sorted(vb.SHARED_PEERS.glob("*.conf")):
            self.assertEqual((vb.CONF / f.name).read_text(), f.read_text(),
                             f"bench/conf/{f.name} differs from {f}")

    def test_experiment_defaults(self):
        args = SimpleNamespace(servers=None, duration=None, runs=None, points=None)
        o = ex.EXPERIMENTS["E5"].defaults(args)
        self.assertEqual((o.servers, o.duration, o.runs), (["vireo", "nginx", "floor"], 5, 3))
        self.assertEqual(ex.EXPERIMENTS["E2"].defaults(args).runs, 1)
        self.assertEqual(ex.EXPERIMENTS["E1"].defaults(args).points, ex.E1_POINTS)
        args = SimpleNamespace(servers=["nginx"], duration=9, runs=5, points=[7])
        o = ex.EXPERIMENTS["E1"].defaults(args)
        self.assertEqual((o.servers, o.duration, o.runs, o.points), (["nginx"], 9, 5, [7]))
        self.assertIn("h2load", ex.EXPERIMENTS["E1"].tools(o))
        self.assertIn("php-fpm", ex.EXPERIMENTS["E1"].tools(o))

    def test_order_rotates(self):
        self.assertEqual(ex.order(["a", "b", "c"], 1), ["a", "b", "c"])
        self.assertEqual(ex.order(["a", "b", "c"], 2), ["b", "c", "a"])
        self.assertEqual(ex.order(["a", "b", "c"], 4), ["a", "b", "c"])

    def test_e1_warmup(self):
        self.assertEqual(ex.e1_warmup(50), 0.3)
        self.assertEqual(ex.e1_warmup(15000), 3.3)


if __name__ == "__main__":
    unittest.main()
