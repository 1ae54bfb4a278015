"""Raw HTTP/2 frames against a running server, for tests/http2_attacks.rs.

Frames are written by hand (hyperframe and hpack, from the Python h2
package) so a script can send what a well-behaved client library refuses
to. Each script prints one line of `key=value` words the Rust test reads:
goaway=<error code or none> closed=<0|1> rst=<streams reset by the server>
responses=<HEADERS received> sent=<units sent> secs=<elapsed>
statuses=<the :status of each response, comma-separated>.
"""

import select
import socket
import struct
import sys
import time

from hpack import Decoder, Encoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def request_block(enc, path="/", method="GET", extra=()):
    return enc.encode(
        [(":method", method), (":scheme", "http"), (":path", path), (":authority", "localhost")]
        + list(extra)
    )


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self.buf = b""
        self.goaway = None
        self.closed = False
        self.rst = 0
        self.responses = 0
        # The :status of each response HEADERS, in order.
        self.statuses = []
        self.dec = Decoder()
        self.settings = {}
        # Called with (length, end of stream) for each DATA frame.
        self.on_data = lambda length, end: None
        self.start = time.monotonic()

    def send(self, data):
        """False once the server closed or reset the connection."""
        if self.closed:
            return False
        try:
            self.s.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def poll(self, wait=0.0):
        """Read and handle what the server sent; wait up to `wait` seconds for it."""
        while not self.closed:
            r, _, _ = select.select([self.s], [], [], wait)
            if not r:
                return
            try:
                chunk = self.s.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return
            self.buf += chunk
            self._frames()
            wait = 0.0

    def _frames(self):
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                return
            kind, flags = self.buf[3], self.buf[4]
            payload = self.buf[9 : 9 + length]
            self.buf = self.buf[9 + length :]
            if kind == SETTINGS and not flags & 1:
                for i in range(0, len(payload), 6):
                    ident, value = struct.unpack(">HI", payload[i : i + 6])
                    self.settings[ident] = value
                self.send(frame(SETTINGS, 1, 0))
            elif kind == GOAWAY:
                self.goaway = struct.unpack(">I", payload[4:8])[0]
            elif kind == RST_STREAM:
                self.rst += 1
            elif kind == HEADERS:
                self.responses += 1
                fields = dict(self.dec.decode(payload))
                self.statuses.append(str(fields.get(":status", "?")))
            elif kind == DATA:
                self.on_data(length, bool(flags & END_STREAM))
            elif kind == PING and not flags & 1:
                self.send(frame(PING, 1, 0, payload))

    def finish(self, secs=5.0):
        """Wait up to `secs` for the server to close, then print the report."""
        end = time.monotonic() + secs
        while not self.closed and time.monotonic() < end:
            self.poll(0.1)

    def report(self, sent):
        goaway = "none" if self.goaway is None else str(self.goaway)
        print(
            f"goaway={goaway} closed={int(self.closed)} rst={self.rst} "
            f"responses={self.responses} sent={sent} secs={time.monotonic() - self.start:.2f} "
            f"statuses={','.join(self.statuses) or 'none'}"
        )


def port():
    return int(sys.argv[1])


def arg(i, default):
    return int(sys.argv[i]) if len(sys.argv) > i else default
