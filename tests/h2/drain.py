"""A connection when the server drains. Usage: drain.py PORT PID SIGNAL MODE
SIGNAL: QUIT (graceful stop), HUP (a reload), or several joined by `+`, sent
1.5 s apart (USR2+QUIT: a binary upgrade, then the old binary drains); times
are from the last. MODE: `idle` — one request
answered, then the signal: GOAWAY is expected at once and the close; `busy` —
a 256 KB response held back by a 1 KB stream window, then the signal: GOAWAY
is expected while the stream is open, which then gets its window and must
finish before the close. Reports `goaway_after` and `closed_after` (seconds
from the signal), `body` (bytes of the response received) and `ended` (its
END_STREAM seen)."""
import os
import signal
import struct
import time
from h2raw import *

pid = arg(2, 0)
sigs = [getattr(signal, "SIG" + name) for name in sys.argv[3].split("+")]
mode = sys.argv[4]
c = Conn(port())
enc = Encoder()
got = {"body": 0, "ended": False}


def on_data(length, end):
    got["body"] += length
    got["ended"] |= end


c.on_data = on_data


def until(cond, secs):
    end = time.monotonic() + secs
    while not cond() and not c.closed and time.monotonic() < end:
        c.poll(0.02)


if mode == "busy":
    # SETTINGS_INITIAL_WINDOW_SIZE 1024: the response stalls after 1 KB.
    c.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1024)))
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, "/big.bin")))
    until(lambda: got["body"] >= 1024, 5)
else:
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, "/a.txt")))
    until(lambda: got["ended"], 5)
before = got["body"]
for sig in sigs[:-1]:
    os.kill(pid, sig)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        c.poll(0.02)
early = c.goaway is not None or c.closed
t0 = time.monotonic()
os.kill(pid, sigs[-1])
goaway_after = None
closed_after = None
end = t0 + 10
while not c.closed and time.monotonic() < end:
    c.poll(0.02)
    now = time.monotonic()
    if c.goaway is not None and goaway_after is None:
        goaway_after = now - t0
        if mode == "busy":
            # The stream is still open: let the rest of the response come.
            stalled = not got["ended"]
            c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1 << 20)))
            c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 20)))
if c.closed:
    closed_after = time.monotonic() - t0
fmt = lambda v: "none" if v is None else f"{v:.2f}"
c.report(1)
print(
    f"goaway={'none' if c.goaway is None else c.goaway} closed={int(c.closed)} "
    f"goaway_after={fmt(goaway_after)} closed_after={fmt(closed_after)} "
    f"body={got['body']} ended={int(got['ended'])} before={before} "
    f"stalled={int(mode == 'busy' and goaway_after is not None and stalled)} "
    f"early={int(early)}"
)
