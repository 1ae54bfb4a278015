"""A backend that sends 103 (Early Hints) before its answer, for
tests/early_hints.rs: HTTP/1.1 on a plain socket, or HTTP/2 with prior
knowledge (the h2 package) when a connection opens with its preface.

    backend.py PORT     serve on 127.0.0.1:PORT until killed; prints READY

Every request gets a 103 with `Link: </style.css>; rel=preload; as=style`,
`X-Hint: PATH` and `Server: backend`, then, a moment later, a 200 whose body
is `SEE-THIS PATH`; a request for /only gets the 103 and the connection
closes. A request with `content-type: application/grpc` gets a gRPC answer:
the message `SEE-THIS`, then the trailers `grpc-status: 0`.
"""
import socket
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
LINK = "</style.css>; rel=preload; as=style"
PAUSE = 0.2


def hint_fields(path):
    return [("link", LINK), ("x-hint", path), ("server", "backend")]


def http1(conn):
    buf = b""
    while b"\r\n\r\n" not in buf:
        more = conn.recv(65536)
        if not more:
            return
        buf += more
    path = buf.split(b" ", 2)[1].decode()
    hints = "".join(f"{n.title()}: {v}\r\n" for n, v in hint_fields(path))
    conn.sendall(f"HTTP/1.1 103 \r\n{hints}\r\n".encode())
    if path == "/only":
        return
    time.sleep(PAUSE)
    body = f"SEE-THIS {path}".encode()
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )


def http2(conn):
    h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    h.initiate_connection()
    conn.sendall(h.data_to_send())
    while True:
        data = conn.recv(65536)
        if not data:
            return
        for ev in h.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                head = dict((k.decode() if isinstance(k, bytes) else k,
                             v.decode() if isinstance(v, bytes) else v) for k, v in ev.headers)
                answer(h, conn, ev.stream_id, head)
        conn.sendall(h.data_to_send())


def answer(h, conn, sid, head):
    path = head.get(":path", "/")
    h.send_headers(sid, [(":status", "103")] + hint_fields(path))
    conn.sendall(h.data_to_send())
    if path == "/only":
        h.reset_stream(sid)
        return
    time.sleep(PAUSE)
    if head.get("content-type", "").startswith("application/grpc"):
        msg = b"SEE-THIS"
        h.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        h.send_data(sid, struct.pack(">BI", 0, len(msg)) + msg)
        h.send_headers(sid, [("grpc-status", "0"), ("grpc-message", "")], end_stream=True)
        return
    body = f"SEE-THIS {path}".encode()
    h.send_headers(sid, [(":status", "200"), ("content-length", str(len(body)))])
    h.send_data(sid, body, end_stream=True)


def serve(conn):
    with conn:
        try:
            first = conn.recv(len(PREFACE), socket.MSG_PEEK)
            if first.startswith(PREFACE[: len(first)]) and first:
                http2(conn)
            else:
                http1(conn)
        except OSError:
            pass


def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen(16)
    print("READY", flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
