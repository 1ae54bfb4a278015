"""Tests of the load-generator parsers, /proc CPU accounting, summaries, report rendering
and templates: python3 -m unittest discover -s bench -p 'test_*.py'"""
import os
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vireobench as vb  # noqa: E402

WRK = """\
Running 5s test @ http://127.0.0.1:18081/2b.txt
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   604.21us  120.30us   5.12ms   91.20%
    Req/Sec    82.98k     2.01k   86.11k    72.00%
  Latency Distribution
     50%  590.00us
     75%  630.00us
     90%  670.00us
     99%    1.52ms
  412893 requests in 5.00s, 95.68MB read
Requests/sec:  82578.31
Transfer/sec:     19.14MB
"""

WRK_ERRORS = """\
Running 5s test @ http://127.0.0.1:18080/missing
  1 threads and 50 connections
  Latency Distribution
     50%    2.00ms
     75%    3.00ms
     90%    4.00ms
     99%    1.20s
  1000 requests in 1.00m, 1.00MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 990
Requests/sec:     16.66
Transfer/sec:     17.00KB
"""


def stat_line(pid, comm, ppid, utime, stime):
    # fields 3.. of /proc/PID/stat: state ppid pgrp session tty tpgid flags minflt
    # cminflt majflt cmajflt utime stime cutime cstime ...
    rest = ["S", ppid, pid, pid, 0, -1, 4194560, 10, 0, 0, 0, utime, stime, 999, 999, 20, 0, 1]
    return f"{pid} ({comm}) " + " ".join(map(str, rest)) + "\n"


class WrkParser(unittest.TestCase):
    def test_clean_run(self):
        w = vb.parse_wrk(WRK)
        self.assertEqual(w["requests"], 412893)
        self.assertAlmostEqual(w["rps"], 82578.31)
        self.assertAlmostEqual(w["duration_s"], 5.0)
        self.assertAlmostEqual(w["p99_ms"], 1.52)
        self.assertAlmostEqual(w["latency_ms"]["50"], 0.59)
        self.assertEqual(w["errors"], 0)
        self.assertEqual(w["socket_errors"], {})

    def test_errors_and_units(self):
        w = vb.parse_wrk(WRK_ERRORS)
        self.assertEqual(w["socket_errors"], {"connect": 1, "read": 2, "write": 3, "timeout": 4})
        self.assertEqual(w["non2xx"], 990)
        self.assertEqual(w["errors"], 1000)
        self.assertAlmostEqual(w["p99_ms"], 1200.0)
        self.assertAlmostEqual(w["duration_s"], 60.0)

    def test_garbage(self):
        with self.assertRaises(ValueError):
            vb.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


class CpuAccounting(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.proc = self.tmp.name
        procs = [  # pid, comm, ppid, utime, stime, VmRSS kB
            (100, "nginx", 1, 3, 2, 2048),
            (101, "nginx: worker (x) y", 100, 250, 450, 4096),  # spaces and ')' in comm
            (102, "helper", 101, 5, 5, 1024),                   # grandchild
            (200, "unrelated", 1, 7777, 7777, 99999),
        ]
        for pid, comm, ppid, ut, st, rss in procs:
            d = Path(self.proc, str(pid))
            d.mkdir()
            (d / "stat").write_text(stat_line(pid, comm, ppid, ut, st))
            (d / "status").write_text(f"Name:\t{comm}\nVmRSS:\t    {rss} kB\n")
        Path(self.proc, "self").mkdir()  # non-numeric entries are ignored

    def tearDown(self):
        self.tmp.cleanup()

    def test_parse_stat(self):
        # cutime+cstime (999 each in stat_line) are the children the process reaped
        self.assertEqual(vb.parse_stat(stat_line(5, "a) (b", 4, 10, 20)), (4, 30, 1998))

    def test_tree_and_cpu(self):
        pids = vb.process_tree(100, proc=self.proc)
        self.assertEqual(sorted(pids), [100, 101, 102])
        # own 5 + 700 + 10 ticks, reaped 3 x 1998 ticks, at 100 Hz
        self.assertAlmostEqual(vb.cpu_seconds(pids, proc=self.proc, hz=100), 7.15 + 59.94)
        self.assertAlmostEqual(vb.rss_mb(pids, proc=self.proc), 7.0)

    def test_tree_ignores_helpers(self):
        self.assertEqual(sorted(vb.process_tree(100, proc=self.proc, ignore=("helper",))),
                         [100, 101])

    def test_vanished_process(self):
        self.assertAlmostEqual(vb.cpu_seconds([100, 4242], proc=self.proc, hz=100), 0.05 + 19.98)

    def test_exact_runtime_beats_ticks(self):
        # 0.6 ms of CPU reads 0 ticks in stat; the threads' sched files have it exactly
        d = Path(self.proc, "300")
        d.mkdir()
        (d / "stat").write_text(stat_line(300, "php-fpm", 1, 0, 0).replace(" 999 999 ", " 0 0 "))
        for tid, ms in ((300, 0.4), (301, 0.2)):
            t = d / "task" / str(tid)
            t.mkdir(parents=True)
            (t / "sched").write_text(f"php-fpm ({tid}, #threads: 2)\n---\n"
                                     f"se.exec_start : 1.0\nse.sum_exec_runtime : {ms:.6f}\n")
        self.assertAlmostEqual(vb.cpu_seconds([300], proc=self.proc, hz=100), 0.0006)

    def test_us_per_request(self):
        self.assertAlmostEqual(vb.cpu_us_per_req(10.0, 15.0, 500000), 10.0)
        self.assertIsNone(vb.cpu_us_per_req(1.0, 2.0, 0))

    def test_real_process(self):
        pids = vb.process_tree(os.getpid())
        self.assertIn(os.getpid(), pids)
        self.assertGreater(vb.rss_mb(pids), 0)


class Summary(unittest.TestCase):
    def test_median_and_ratio(self):
        runs = [dict(server=s, path="2b.txt", rps=r, cpu_us_per_req=c, p99_ms=1.0,
                     rss_mb=3.0, errors=e)
                for s, r, c, e in [("vireo", 100, 4.0, 0), ("vireo", 120, 5.0, 1),
                                   ("vireo", 110, 6.0, 0), ("nginx", 90, 10.0, 0)]]
        rows = vb.summarize(runs, ["vireo", "nginx"])
        v, n = rows
        self.assertEqual((v["rps"], v["cpu_us"], v["cpu_min"], v["cpu_max"], v["errors"]),
                         (110, 5.0, 4.0, 6.0, 1))
        self.assertAlmostEqual(v["cpu_ratio"], 0.5)
        self.assertAlmostEqual(n["cpu_ratio"], 1.0)
        table = vb.markdown(rows, ["vireo", "nginx"])
        self.assertIn("| 2b.txt | vireo | 110 | 5.00 (4.00–6.00) |", table)


class Windows(unittest.TestCase):
    def test_e1_counts_three_turns_of_every_client(self):
        import experiments as ex
        self.assertEqual(ex.e1_duration(1.5, 50, None), 1.5)  # first point: no rate yet
        self.assertEqual(ex.e1_duration(1.5, 15000, 60000), 1.5)  # 0.75 s of turns
        self.assertEqual(ex.e1_duration(1.5, 4000, 2000), 6.0)
        self.assertEqual(ex.e1_duration(1.5, 15000, 1000), 30)  # the paper's 30 s at most


if __name__ == "__main__":
    unittest.main()
