"""Tests of the Caddy and HAProxy peers and of E3's variants (E3-seed, E3-pool): their
templates, which servers run which workload, the summaries with vireo ÷ best peer,
their place in the report and its open gaps."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiments as ex  # noqa: E402
import report  # noqa: E402
import vireobench as vb  # noqa: E402

KEYS = {"@DIR@": "/d", "@ROOT@": "/r", "@PORT@": 1, "@FPM@": "127.0.0.1:2",
        "@FPM_HOST@": "127.0.0.1", "@FPM_PORT@": 2, "@UPSTREAM@": "127.0.0.1:3",
        "@UPSTREAM_TLS@": "127.0.0.1:5",
        "@GRPC@": "127.0.0.1:6", "@PORT_H2C@": 7,
        "@CERT@": "/c.pem", "@KEY@": "/k.pem", "@PORT_H2@": 4, "@PORT_H3@": 5,
        "@FPM_CONNS@": 40, "@UPSTREAM_CONNS@": 500}


def filled(name, **keys):
    return vb.fill((vb.CONF / name).read_text(), dict(KEYS, **keys))


def variant_runs():
    """Three runs of E3-seed's 2 B and gzipped 21 KB rows: vireo, nginx and a failed h2o."""
    runs = []
    for k, (v, n) in enumerate([(5.0, 10.0), (6.0, 11.0), (5.5, 12.0)], 1):
        for path, scale in (("2b.txt", 1), ("21k.txt gzip", 3)):
            for server, cpu, rps in (("vireo", v * scale, 100 + k), ("nginx", n * scale, 120 + k)):
                runs.append(dict(server=server, path=path, run=k, rps=rps, cpu_us_per_req=cpu,
                                 p99_ms=1.0, rss_mb=3.0, errors=0))
    runs.append(dict(server="h2o", path="2b.txt", run=1,
                     unsupported="no nginx-syntax configuration for h2o"))
    return runs


class Servers(unittest.TestCase):
    def test_peers_and_packages(self):
        self.assertIn("caddy", vb.PEERS)
        self.assertNotIn("haproxy", vb.PEERS)  # a proxy only
        self.assertEqual((vb.PACKAGES["caddy"], vb.PACKAGES["haproxy"]), ("caddy", "haproxy"))
        self.assertEqual((vb.label("caddy"), vb.label("haproxy")), ("Caddy", "HAProxy"))
        for e in ("E1", "E3", "E4", "M", "tls"):
            self.assertIn("caddy", ex.EXPERIMENTS[e].servers, e)
        self.assertIn("haproxy", ex.EXPERIMENTS["proxy"].servers)
        o = ex.EXPERIMENTS["proxy"].defaults(SimpleNamespace(servers=None, duration=None,
                                                             runs=None, points=None))
        self.assertIn("haproxy", ex.EXPERIMENTS["proxy"].tools(o))
        self.assertTrue({"caddy", "haproxy"} <= set(report.COLORS))

    def test_command_lines(self):
        s = SimpleNamespace(conf=Path("/d/Caddyfile"), dir=Path("/d"))
        cmd = vb.SERVERS["caddy"]["cmd"](s)
        self.assertEqual(cmd[:2], ["env", "GOMAXPROCS=1"])
        self.assertEqual(cmd[-6:], ["caddy", "run", "--config", "/d/Caddyfile", "--adapter",
                                    "caddyfile"])
        s = SimpleNamespace(conf=Path("/d/haproxy.cfg"), dir=Path("/d"))
        self.assertEqual(vb.SERVERS["haproxy"]["cmd"](s), ["haproxy", "-db", "-f", "/d/haproxy.cfg"])

    def test_what_each_serves(self):
        with tempfile.TemporaryDirectory() as d:
            ctx = ex.Ctx(SimpleNamespace(port_base=28080), d)
            self.assertIsNone(ctx.unsupported("caddy", "static"))
            self.assertIsNone(ctx.unsupported("caddy", "php"))  # php_fastcgi in Caddyfile
            self.assertIn("serves no files", ctx.unsupported("haproxy", "static"))
            self.assertIsNone(ctx.unsupported("haproxy", "proxy"))
            self.assertIn("static only", ctx.unsupported("h2o", "php"))
            self.assertIn("no proxy configuration", ctx.unsupported("caddy", "proxy"))
            # ports: one per server, none on the tls HTTP/2 offset, php-fpm or the backend
            ports = [ctx.port(s) for s in vb.SERVERS]
            self.assertEqual(len(set(ports)), len(ports))
            self.assertLess(max(ports) - 28080, ex.H2_PORT_OFFSET)

    def test_haproxy_only_proxies(self):
        with tempfile.TemporaryDirectory() as d:
            opts = SimpleNamespace(port_base=28080, servers=["haproxy"], runs=2, idle_conns=10)
            with contextlib.redirect_stderr(io.StringIO()):
                rows = ex.exp_idle(opts, d)
        self.assertEqual(rows, [{"server": "haproxy", "run": 1,
                                 "unsupported": vb.SERVERS["haproxy"]["no_static"]}])

    def test_wrk_headers(self):
        cmd = vb.wrk_cmd("http://h/x", 0.4, 50, headers=(ex.GZIP_HEADER,))
        self.assertEqual(cmd[3:], ["wrk", "-t1", "-c50", "-d1s", "--latency", "-H",
                                   "Accept-Encoding: gzip", "http://h/x"])
        self.assertNotIn("-H", vb.wrk_cmd("http://h/x", 4, 50))


class PeerTemplates(unittest.TestCase):
    def test_fill(self):
        for name in ("Caddyfile", "Caddyfile-tls", "haproxy.cfg", "php-pool.conf"):
            self.assertNotIn("@", filled(name).replace("@php", ""), name)

    def test_caddy_as_users_tune_it(self):
        text = filled("Caddyfile")
        for line in ("admin off", "auto_https off", "output discard", "protocols h1\n",
                     "bind 127.0.0.1", "file_server", "php_fastcgi @php 127.0.0.1:2",
                     "@php path *.php"):
            self.assertIn(line, text)
        tls = filled("Caddyfile-tls")
        for line in ("https://:1, https://:4", "tls /c.pem /k.pem", "protocols tls1.3",
                     "protocols h1 h2\n", "admin off", "output discard"):
            self.assertIn(line, tls)

    def test_haproxy_as_users_tune_it(self):
        text = filled("haproxy.cfg")
        for line in ("nbthread 1", "http-reuse always", "bind 127.0.0.1:1",
                     "server backend 127.0.0.1:3", "replace-path ^/proxy/(.*) /\\1"):
            self.assertIn(line, text)
        self.assertFalse([l for l in text.splitlines() if l.strip().startswith("log")])

    def test_variant_templates(self):
        pool = filled("php-pool.conf")
        self.assertIn("upstream php { server 127.0.0.1:2; keepalive 8; }", pool)
        self.assertIn("fastcgi_pass php;\n      fastcgi_keep_conn on;", pool)
        seed = filled("tuned.conf")
        for d in ("open_file_cache max=200000 inactive=20s;", "open_file_cache_valid 30s;",
                  "open_file_cache_min_uses 2;", "open_file_cache_errors on;", "sendfile on;",
                  "tcp_nopush on;", "tcp_nodelay on;", "keepalive_requests 100000;", "gzip on;",
                  "gzip_min_length 10240;", "access_log off;"):
            self.assertIn(d, seed)
        self.assertEqual(ex.E3_VARIANTS["E3-seed"].conf, "tuned.conf")
        self.assertEqual(ex.E3_VARIANTS["E3-pool"].conf, "php-pool.conf")

    def scratch_conf(self, d, name, **keys):
        path = Path(d, name)
        path.write_text(filled(name, **dict({"@DIR@": d}, **keys)))
        return path

    @unittest.skipUnless(shutil.which("caddy"), "needs caddy")
    def test_caddy_adapts(self):
        with tempfile.TemporaryDirectory() as d:
            for name, keys in (("Caddyfile", {}), ("Caddyfile-tls", {})):
                r = subprocess.run(["caddy", "adapt", "--config", str(self.scratch_conf(d, name, **keys)),
                                    "--adapter", "caddyfile"], capture_output=True, text=True,
                                   timeout=30, env=dict(os.environ, XDG_CONFIG_HOME=d, XDG_DATA_HOME=d))
                self.assertEqual(r.returncode, 0, r.stderr)
                j = json.loads(r.stdout)
                self.assertTrue(j["admin"]["disabled"])
                self.assertEqual(j["logging"]["logs"]["default"]["writer"]["output"], "discard")
                servers = j["apps"]["http"]["servers"].values()
                self.assertTrue(all(s["automatic_https"]["disable"] for s in servers))
                if name == "Caddyfile":
                    (srv,) = servers
                    self.assertEqual((srv["listen"], srv["protocols"]), (["127.0.0.1:1"], ["h1"]))
                else:
                    protocols = {l: s["protocols"] for s in servers for l in s["listen"]}
                    self.assertEqual(protocols, {"127.0.0.1:1": ["h1", "h2"],
                                                 "127.0.0.1:4": ["h1", "h2"],
                                                 "127.0.0.1:5": ["h1", "h2", "h3"]})

    @unittest.skipUnless(shutil.which("haproxy"), "needs haproxy")
    def test_haproxy_accepts(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run(["haproxy", "-c", "-f", str(self.scratch_conf(d, "haproxy.cfg"))],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("WARNING", r.stdout + r.stderr)

    @unittest.skipUnless(shutil.which("nginx"), "needs nginx")
    def test_nginx_and_vireo_accept_the_variants(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("tuned.conf", "php-pool.conf"):
                path = self.scratch_conf(d, name)
                r = subprocess.run(["nginx", "-t", "-p", f"{d}/", "-e", f"{d}/e.log", "-c",
                                    str(path)], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)
                if vb.VIREO.exists():
                    r = subprocess.run([str(vb.VIREO), "-t", "-c", str(path)],
                                       capture_output=True, text=True, timeout=30)
                    self.assertEqual(r.returncode, 0, r.stderr)


class Variants(unittest.TestCase):
    def test_experiments_and_order(self):
        for name in ("E3-seed", "E3-pool"):
            self.assertIn(name, vb.ALL_ORDER)
            self.assertIn(name, report.ORDER)
            self.assertEqual(ex.EXPERIMENTS[name].servers, ("vireo", "nginx"))
            self.assertEqual(vb.parse_args([name, "--runs", "1"]).experiment, name)
        args = SimpleNamespace(servers=None, duration=None, runs=None, points=None)
        o = ex.EXPERIMENTS["E3-pool"].defaults(args)
        self.assertIn("php-fpm", ex.EXPERIMENTS["E3-pool"].tools(o))
        self.assertEqual([w.key for w in ex.E3_VARIANTS["E3-seed"].workloads],
                         ["2b.txt", "21k.txt", "92k.txt", "21k.txt gzip", "92k.txt gzip"])
        self.assertEqual(ex.E3_VARIANTS["E3-seed"].workloads[3].headers, ("Accept-Encoding: gzip",))

    def test_other_grammars_not_run(self):
        # Caddy and h2o have no nginx-syntax config: noted once, nothing started
        with tempfile.TemporaryDirectory() as d:
            opts = SimpleNamespace(port_base=28080, servers=["caddy", "h2o"], runs=2,
                                   duration=1, connections=50)
            with contextlib.redirect_stderr(io.StringIO()):  # the progress lines
                rows = ex.exp_e3_seed(opts, d)
        self.assertEqual(len(rows), 2 * 5)
        self.assertTrue(all("no nginx-syntax configuration" in r["unsupported"] for r in rows))
        self.assertEqual({r["run"] for r in rows}, {1})

    def test_vs_best_peer(self):
        rows = ex.summarize_variant(variant_runs(), ["vireo", "nginx", "h2o"])
        v = ex.find(rows, "vireo", file="2b.txt")
        self.assertAlmostEqual(v["vs_best_cpu_us"], 5.5 / 11.0)
        self.assertAlmostEqual(v["vs_best_rps"], 102 / 122)
        self.assertEqual((v["best_cpu_us"], v["best_rps"]), ("nginx", "nginx"))
        self.assertNotIn("vs_best_cpu_us", ex.find(rows, "nginx", file="2b.txt"))
        md = ex.markdown_variant(rows, ["vireo", "nginx", "h2o"])
        self.assertIn("| 2 B | vireo | 5.50 (5.00–6.00) | 102 (101–103) | 1.00 | 3.0 | 0 | "
                      "0.50× (nginx) | 0.84× (nginx) |", md)
        self.assertIn("| 21 KB (gzip) | vireo | 16.50 (15.00–18.00) |", md)
        self.assertIn("| 2 B | h2o | no nginx-syntax configuration for h2o |", md)

    def test_report_and_gaps(self):
        from test_report import dataset
        servers = ["vireo", "nginx", "h2o"]
        data = {"E3-seed": dataset("E3-seed", ex.summarize_variant(variant_runs(), servers),
                                   servers)}
        gaps, missing = report.open_gaps(data)
        # vireo's req/s is below nginx's in every run: a gap apart from the spread
        got = {(g["experiment"], g["where"], g["metric"], g["clear"]) for g in gaps}
        self.assertEqual(got, {("E3-seed", "2 B", "req/s", True),
                               ("E3-seed", "21 KB (gzip)", "req/s", True)})
        md = report.render_report(data)
        self.assertIn("## E3-seed — E3's files on the seed's tuned nginx.conf", md)
        self.assertIn("| E3-seed | 21 KB (gzip) | req/s | 102 | nginx 122 | 0.84× | apart |", md)
        self.assertIn("vireo ÷ best peer, CPU", md)
        self.assertIn("gzip_min_length 10240", md)

    def test_pool_target(self):
        from test_report import dataset
        runs = [dict(server=s, path="info.php", run=k, rps=600, cpu_us_per_req=cpu, p99_ms=9.0,
                     rss_mb=14.0, errors=0, backend_cpu_us_per_req=500)
                for k in (1, 2) for s, cpu in (("vireo", 60.0), ("nginx", 150.0))]
        data = dataset("E3-pool", ex.summarize_variant(runs, ["vireo", "nginx"]), ["vireo", "nginx"])
        self.assertEqual(report.pool_target(data), [
            "| FastCGI pooled (E3-pool, keepalive 8 + fastcgi_keep_conn): front-server CPU ≤ 0.5× "
            "nginx's | phpinfo(): 60.00 µs = 0.40× nginx (150.00) | met |"])
        self.assertIn("FastCGI pooled", report.targets_markdown({"E3-pool": data}))


if __name__ == "__main__":
    unittest.main()


class Modules(unittest.TestCase):
    def test_page_and_order(self):
        page = ex.modules_page()
        self.assertLessEqual(abs(len(page) - ex.MODULES_HTML_SIZE), 200)
        self.assertTrue(page.endswith(b"</body></html>\n"))
        self.assertEqual(page.count(ex.MODULES_FROM), 653)
        self.assertIn("modules", vb.ALL_ORDER)
        self.assertIn("modules", report.ORDER)
        self.assertEqual(ex.EXPERIMENTS["modules"].servers, ("vireo", "nginx"))

    def test_summary_ratio_within_runs(self):
        runs = [{"server": s, "path": "auth/2b.txt", "run": k, "cpu_us_per_req": c, "rps": 1,
                 "p99_ms": 1, "rss_mb": 1, "errors": 0}
                for k, (v, n) in enumerate([(10, 20), (12, 20), (9, 10)], 1)
                for s, c in (("vireo", v), ("nginx", n))]
        rows = ex.summarize_modules(runs, ["vireo", "nginx"])
        v = ex.find(rows, "vireo", path="auth/2b.txt")
        self.assertEqual((v["vs_nginx"], v["vs_nginx_min"], v["vs_nginx_max"]), (0.6, 0.5, 0.9))
        self.assertIn("| auth_request (204), 2 B | vireo | 10.00 (9.00–12.00) | 0.600× (0.500–0.900)",
                      ex.markdown_modules(rows, ["vireo", "nginx"]))

    @unittest.skipUnless(shutil.which("nginx"), "needs nginx")
    def test_nginx_and_vireo_accept_the_config(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("vireo", "nginx"):
                text = (vb.CONF / vb.SERVERS[name]["conf"]).read_text()
                for old, new in ex.modules_edits(name):
                    self.assertIn(old, text)
                    text = text.replace(old, new)
                path = Path(d, name + ".conf")
                path.write_text(vb.fill(text, dict(KEYS, **{"@DIR@": d, "@ROOT@": d})))
                if name == "nginx":
                    cmd = ["nginx", "-t", "-p", f"{d}/", "-e", f"{d}/e.log", "-c", str(path)]
                elif vb.VIREO.exists():
                    cmd = [str(vb.VIREO), "-t", "-c", str(path)]
                else:
                    continue
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)
