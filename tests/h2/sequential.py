"""N requests one after the other on one connection, each sent once the
previous one was answered, until the server ends the connection. The paths
(after N) are asked in turn; /a.txt by default."""
import time
from h2raw import *

c = Conn(port())
n = arg(2, 20)
paths = sys.argv[3:] or ["/a.txt"]
enc = Encoder()
sent = 0
for i in range(n):
    if not c.send(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, request_block(enc, paths[i % len(paths)]))):
        break
    sent += 1
    before = c.responses
    end = time.monotonic() + 2
    while c.responses == before and not c.closed and time.monotonic() < end:
        c.poll(0.05)
    if c.closed:
        break
c.finish()
c.report(sent)
