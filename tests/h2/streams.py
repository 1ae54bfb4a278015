"""N concurrent GET streams on one connection; all must be answered."""
import time
from h2raw import *

c = Conn(port())
n = arg(2, 50)
enc = Encoder()
for i in range(n):
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, request_block(enc, f"/a.txt?{i}")))
end = time.monotonic() + 10
while c.responses < n and not c.closed and time.monotonic() < end:
    c.poll(0.1)
print(f"max_streams={c.settings.get(3, 'none')}", end=" ")
c.report(n)
