"""A POST to `path` (argument 2) that declares a 100,000-byte body and sends
1,000 bytes of it: the report once a response comes (or 5 s pass), with
`answered_after` in seconds; then a GET of /a.txt on the same connection."""
import time
from h2raw import *

c = Conn(port())
enc = Encoder()
head = request_block(enc, sys.argv[2], "POST", [("content-length", "100000")])
c.send(frame(HEADERS, END_HEADERS, 1, head) + frame(DATA, 0, 1, b"x" * 1000))
t = time.monotonic()
end = t + 5
while not c.responses and not c.closed and time.monotonic() < end:
    c.poll(0.05)
answered = time.monotonic() - t
c.send(frame(HEADERS, END_STREAM | END_HEADERS, 3, request_block(enc, "/a.txt")))
end = time.monotonic() + 5
while c.responses < 2 and not c.closed and time.monotonic() < end:
    c.poll(0.05)
print(f"answered_after={answered:.2f} ", end="")
c.report(2)
