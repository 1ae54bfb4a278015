"""A request cancelled by the client: HEADERS for PATH, RST_STREAM(CANCEL)
after WAIT seconds, then a second of listening. Usage: cancel.py PORT PATH WAIT"""
import time
from h2raw import *

c = Conn(port())
enc = Encoder()
c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, sys.argv[2])))
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    c.poll(0.02)
c.send(frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big")))
end = time.monotonic() + 1
while time.monotonic() < end:
    c.poll(0.02)
c.report(1)
