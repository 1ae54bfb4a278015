"""A reader that stops reading: GET `path` and take only the first stream
window (64 KiB, no WINDOW_UPDATE) for `stall` seconds, noting vireo's RSS
(pid `pid`) then; afterwards open the windows as data comes and count the
whole body. Prints `stalled=<bytes while stalled> rss_stalled_kb=<kB>
body=<bytes in all>` before the usual report."""
import struct
import sys
import time
from h2raw import *


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


path, pid, stall = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
c = Conn(port())
enc = Encoder()
got = 0
done = False


def on_data(length, end):
    global got, done
    got += length
    done = done or end


c.on_data = on_data
c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, path)))
end = time.monotonic() + stall
while time.monotonic() < end and not c.closed:
    c.poll(0.1)
stalled = got
rss = rss_kb(pid)
# Open up: credit each byte as it arrives.
credited = got
c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", got)) if got else b"")
c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", got)) if got else b"")
end = time.monotonic() + 60
while not done and not c.closed and time.monotonic() < end:
    c.poll(0.1)
    if got > credited:
        n = got - credited
        credited = got
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", n)) + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", n)))
print(f"stalled={stalled} rss_stalled_kb={rss} body={got}", end=" ")
c.report(1)
