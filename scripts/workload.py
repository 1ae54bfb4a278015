"""The serving workload that shapes how the release binary is built: scripts/pgo
trains the compiler's profile on it and scripts/hot-symbols orders the linker's
functions by it. A `Site` is a temporary document root (2 B, 21 KB and 92 KB files,
phpinfo()), a certificate, php-fpm when installed, and the phases that drive a
vireo running `CONF` (or bench/conf/vireo.conf: `Site.static_conf`)."""

import glob
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# static, gzip, proxy, FastCGI; +1 the proxied backend, +2 h2c and gRPC, +3 TLS,
# +4 php-fpm, +5 the gRPC backend, +6 a TCP proxy (stream) to +1
PORT = 18971

CONF = """worker_processes 1;
pid {d}/vireo.pid;
error_log {d}/error.log crit;
daemon off;
events {{ worker_connections 1024; multi_accept on; }}
http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 30; keepalive_requests 100000;
  open_file_cache max=1000 inactive=20s; open_file_cache_valid 30s;
  open_file_cache_min_uses 2; open_file_cache_errors on;
  upstream be {{ server 127.0.0.1:{p1}; keepalive 8; }}
  upstream h2be {{ server 127.0.0.1:{p2}; keepalive 8; }}
  upstream beg {{ server 127.0.0.1:{p5}; keepalive 8; }}
  # FastCGI as the benchmarks configure it (bench/conf/vireo-php.conf and
  # php-pool.conf): connections held to a bound with requests queued beyond
  # it, and kept-alive ones.
  upstream php {{ server 127.0.0.1:{p4} max_conns={fpm_conns}; queue 100 timeout=60s; }}
  upstream phpk {{ server 127.0.0.1:{p4}; keepalive 8; }}
  server {{
    listen 127.0.0.1:{p0} reuseport deferred;
    listen 127.0.0.1:{p2} http2;
    listen 127.0.0.1:{p3} ssl http2;
    ssl_certificate {d}/cert.pem;
    ssl_certificate_key {d}/key.pem;
    root {d}/www;
    location /gz/ {{ alias {d}/www/; gzip on; gzip_types text/plain; gzip_min_length 100; }}
    location /proxy/ {{ proxy_pass http://be/; proxy_http_version 1.1; proxy_set_header Connection ""; }}
    location /h2up/ {{ proxy_pass http://h2be/; proxy_http_version 2; }}
    location /test.Echo/ {{ grpc_pass grpc://beg; }}
    location ~ ^/pool(/.+\\.php)$ {{
      fastcgi_pass phpk;
      fastcgi_keep_conn on;
      include {repo}/conf/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$1;
    }}
    location ~ \\.php$ {{
      fastcgi_pass php;
      include {repo}/conf/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
    }}
  }}
  server {{ listen 127.0.0.1:{p1}; root {d}/www; }}
}}
stream {{
  server {{ listen 127.0.0.1:{p6}; proxy_pass 127.0.0.1:{p1}; }}
}}
"""

# php-fpm's workers, and the connections the upstream allows them: twice as many,
# as bench/run sets its `max_conns`.
FPM_CHILDREN = 2
FPM_CONNS = 2 * FPM_CHILDREN

FPM = """[global]
pid = {d}/php-fpm.pid
error_log = {d}/php-fpm.log
daemonize = no
[www]
listen = 127.0.0.1:{p4}
pm = static
pm.max_children = {children}
user = www-data
group = www-data
"""

STATIC = ["/2b.txt", "/21k.txt", "/92k.txt"]


def request(port, path, headers=(), version="1.1"):
    """One request on its own connection; the response read to its end."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        lines = [f"GET {path} HTTP/{version}", "Host: localhost", *headers]
        if version == "1.1":
            lines.append("Connection: close")
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while s.recv(65536):
            pass


def keep_alive(port, paths, headers=()):
    """Requests on one kept-alive connection (each reply has a Content-Length, or is
    chunked: a compressed one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for p in paths:
            extra = "".join(f"{h}\r\n" for h in headers)
            s.sendall(f"GET {p} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                data += s.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            if length is None:  # chunked: up to the last chunk (no trailers here)
                while not body.endswith(b"0\r\n\r\n"):
                    body += s.recv(65536)
                continue
            while len(body) < int(length.group(1)):
                body += s.recv(65536)


def wait_port(port, proc, what):
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{what} did not start")
            time.sleep(0.2)


def need(*tools):
    for tool in tools:
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")


class Site:
    """A document root, a certificate and php-fpm (when installed) in a temporary
    directory, for the life of a `with` block."""

    def __enter__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="vireo-workload-")
        d = self.d = Path(self.tmp.name)
        self.ports = {f"p{i}": PORT + i for i in range(7)}
        www = self.www = d / "www"
        www.mkdir()
        line = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\n"
        for name, size in (("2b.txt", 2), ("21k.txt", 21504), ("92k.txt", 94208)):
            (www / name).write_bytes((line * (size // len(line) + 1))[:size])
        (www / "info.php").write_text("<?php phpinfo();")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                       check=True, capture_output=True)
        d.chmod(0o755)
        self.fpm = None
        fpm_bin = sorted(glob.glob("/usr/sbin/php-fpm*"))
        if fpm_bin:
            (d / "php-fpm.conf").write_text(FPM.format(d=d, children=FPM_CHILDREN, **self.ports))
            self.fpm = subprocess.Popen([fpm_bin[-1], "-F", "-y", str(d / "php-fpm.conf")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(self.ports["p4"], self.fpm, "php-fpm")
        # tests/grpc/peer.py's echo service, when Python has grpcio.
        self.grpc = None
        probe = subprocess.run([sys.executable, "-c", "import grpc"], capture_output=True)
        if probe.returncode == 0:
            self.grpc = subprocess.Popen([sys.executable, str(REPO / "tests" / "grpc" / "peer.py"),
                                          "server", str(self.ports["p5"])],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(self.ports["p5"], self.grpc, "the gRPC peer")
        return self

    def __exit__(self, *exc):
        for p in (self.fpm, self.grpc):
            if p:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        self.tmp.cleanup()

    def conf(self):
        """CONF for this site."""
        return CONF.format(d=self.d, repo=REPO, fpm_conns=FPM_CONNS, **self.ports)

    def bench_conf(self, name):
        """A configuration of the benchmarks (bench/conf/NAME) for this site: php-fpm
        on its port with FPM_CONNS connections, nginx's fastcgi_params where Debian's
        nginx is not installed."""
        text = (REPO / "bench" / "conf" / name).read_text()
        for k, v in (("@DIR@", self.d), ("@ROOT@", self.www), ("@PORT@", PORT),
                     ("@FPM@", f"127.0.0.1:{self.ports['p4']}"),
                     ("@FPM_CONNS@", FPM_CONNS)):
            text = text.replace(k, str(v))
        if not Path("/etc/nginx/fastcgi_params").exists():
            text = text.replace("/etc/nginx/fastcgi_params", str(REPO / "conf" / "fastcgi_params"))
        return text

    def static_conf(self):
        """The benchmarks' static-file configuration (bench/conf/vireo.conf)."""
        return self.bench_conf("vireo.conf")

    def php_conf(self):
        """The benchmarks' phpinfo() configuration (bench/conf/vireo-php.conf)."""
        return self.bench_conf("vireo-php.conf")

    def url(self, port, path="", scheme="http"):
        return f"{scheme}://127.0.0.1:{self.ports[port]}{path}"

    # Phases: each drives one kind of serving.

    def plain(self):
        """Static files over HTTP/1.x: kept alive and not, a range, a 304, a 404."""
        for _ in range(3):
            keep_alive(PORT, STATIC * 5)
            for path in STATIC + ["/missing"]:
                request(PORT, path)
                request(PORT, path, version="1.0")
            request(PORT, "/21k.txt", ["Range: bytes=0-99"])
            request(PORT, "/21k.txt", ["If-Modified-Since: Thu, 01 Jan 2037 00:00:00 GMT"])

    def idle(self):
        """Keep-alive connections idle long enough to park, woken by a second request
        each, then a quiet spell in which the worker gives its free memory back."""
        conns = [socket.create_connection(("127.0.0.1", PORT), timeout=30) for _ in range(20)]
        for _ in range(2):
            for c in conns:
                c.sendall(b"GET /2b.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            for c in conns:
                c.recv(65536)
            time.sleep(1.5)
        for c in conns:
            c.close()
        time.sleep(1.5)

    def gzip(self):
        keep_alive(PORT, ["/gz/21k.txt", "/gz/92k.txt"] * 5, ["Accept-Encoding: gzip"])

    def proxy(self):
        keep_alive(PORT, ["/proxy/2b.txt", "/proxy/21k.txt", "/h2up/2b.txt"] * 5)

    def php(self):
        if self.fpm:
            request(PORT, "/info.php")
            request(PORT, "/info.php?a=1", version="1.0")
            keep_alive(PORT, ["/pool/info.php"] * 3)

    def php_load(self):
        """phpinfo() for more clients at once than the upstream's max_conns (the rest
        wait in its queue), some of which leave before their reply."""

        def leave(_):
            with socket.create_connection(("127.0.0.1", PORT), timeout=30) as s:
                s.sendall(b"GET /info.php HTTP/1.1\r\nHost: localhost\r\n\r\n")

        if self.fpm:
            with ThreadPoolExecutor(12) as burst:
                list(burst.map(lambda i: leave(i) if i % 6 == 5 else request(PORT, "/info.php"),
                               range(36)))

    def curl(self, url, *flags):
        """Each static file three times, one URL per call: curl 7.88 fails a second
        request on a reused cleartext HTTP/2 connection (nginx and h2o alike)."""
        for _ in range(3):
            for path in STATIC:
                subprocess.run(["curl", "-s", "-o", "/dev/null", *flags, f"{url}{path}"],
                               check=True)

    def h2c(self):
        self.curl(self.url("p2"), "--http2-prior-knowledge")

    def tls_h1(self):
        self.curl(self.url("p3", scheme="https"), "-k", "--http1.1")

    def tls_h2(self):
        self.curl(self.url("p3", scheme="https"), "-k", "--http2")
