"""Requests on one connection around a reload: N requests for PATH, then
SIGHUP to PID, a pause of WAIT seconds, and N more on the same connection.
Usage: reload.py PORT PID N PATH WAIT"""
import os
import signal
import time
from h2raw import *

c = Conn(port())
pid = arg(2, 0)
n = arg(3, 1)
path = sys.argv[4]
wait = float(sys.argv[5])
enc = Encoder()
sent = 0


def ask():
    global sent
    c.send(frame(HEADERS, END_STREAM | END_HEADERS, 2 * sent + 1, request_block(enc, path)))
    sent += 1
    before = c.responses
    end = time.monotonic() + 5
    while c.responses == before and not c.closed and time.monotonic() < end:
        c.poll(0.05)


for _ in range(n):
    ask()
os.kill(pid, signal.SIGHUP)
end = time.monotonic() + wait
while time.monotonic() < end:
    c.poll(0.05)
for _ in range(n):
    ask()
c.report(sent)
