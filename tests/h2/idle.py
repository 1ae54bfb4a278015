"""Idle and slow clients: `mode` preface — the preface and SETTINGS, then
nothing; `partial` — half of the preface, then nothing. Reports when the
server hangs up."""
import socket
import sys
import time
from h2raw import *

mode = sys.argv[2]
if mode == "preface":
    c = Conn(port())
    c.finish(30)
    c.report(0)
else:
    s = socket.create_connection(("127.0.0.1", port()), timeout=30)
    s.sendall(PREFACE[:10])
    start = time.monotonic()
    try:
        data = s.recv(100)
    except OSError:
        data = b""
    print(f"goaway=none closed={int(not data)} rst=0 responses=0 sent=0 secs={time.monotonic() - start:.2f}")
