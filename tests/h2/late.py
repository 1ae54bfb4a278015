"""One request sent `secs` (argument 2) after the preface, the server's SETTINGS
answered meanwhile; then the report once the server ends the connection."""
import time
from h2raw import *

c = Conn(port())
end = time.monotonic() + float(sys.argv[2])
while not c.closed and time.monotonic() < end:
    c.poll(0.05)
sent = int(c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(Encoder(), "/a.txt"))))
c.finish()
c.report(sent)
