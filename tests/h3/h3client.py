"""An HTTP/3 client on aioquic for tests/http3.rs.

    h3client.py PORT MODE SPEC

SPEC is JSON. It prints what the server answered and how the connection
went, a line each: `R i status=N reset=CODE|- len=N` for the i-th response,
`I i STATUS name: value` for each field of an interim (1xx) response before
it, `H i name: value` for each of its fields, `B i BASE64` for its body,
and `K name=value` for everything else.

Modes:
- requests: {"requests": [{"method", "path", "headers": [[n, v]], "body"}],
  "sni", "sequential"}: the requests on one connection (at once, or one
  after another with "sequential"); "responses": status, headers, body
  (base64), reset; "datagrams_sent": the UDP datagrams the client sent on
  the connection. A "body" is sent "repeat" times. A request with "pause"
  waits that many seconds first
  (with "sequential"); with "authority", that instead of the connection's;
  with "open", its stream is left open after the head (and body); with
  "stop", the client asks the server to stop sending (STOP_SENDING) once the
  first body bytes came.
- flood: {"path", "streams"}: a client that ignores the server's stream
  credit (as an attacker does) and opens "streams" request streams at once,
  never ending them;
  "closed_code": the QUIC error the server closed the connection with.
- cids: {"ids"}: after the handshake, a client that ignores the server's
  active_connection_id_limit and issues "ids" connection IDs of its own at
  once (NEW_CONNECTION_ID frames); "server_cid_limit" is the limit the
  server advertised, "terminated_code" how the server closed.
- zerortt: {"path", "method", "body"}: connect once to get a session
  ticket, then resume with it and send the request as early data where the
  ticket allows it (the client is made to try even when it does not);
  "ticket_early_data", "early_data_accepted", and the response.
- initial: {}: send one client Initial from a bare UDP socket and count the
  bytes the server sends back without the address ever being validated.
- resume: {"path"}: the request on a first connection, then on a second one
  resuming the first's session; "resumed".
- handshake: {"sni"}: a handshake only; "connected", or "terminated_code".
- token: {"path"}: the request on a first connection, then on a second one
  presenting the address validation token the first got (NEW_TOKEN);
  "token", and "retried1"/"retried2": whether each was sent a Retry.
- reset: {"path", "sizes"}: the request, then the connection closed; once
  the server forgot it, a datagram of each size (a short-header packet
  naming the server's connection ID, random bytes after) from a bare
  socket; "replies": the length of what came back for each, 0 for nothing.
"""

import asyncio
import base64
import json
import os
import random
import socket
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, QuicConnectionId
from aioquic.quic.logger import QuicLogger
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiters = {}
        self.responses = {}
        self.terminated = None
        self.goaway = False
        self.stop = set()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = event
            for sid, w in self.waiters.items():
                if not w.done():
                    w.set_result(None)
            return
        if isinstance(event, StreamReset):
            r = self.responses.setdefault(event.stream_id, new_response())
            r["reset"] = event.error_code
            w = self.waiters.get(event.stream_id)
            if w and not w.done():
                w.set_result(None)
        for ev in self.h3.handle_event(event):
            sid = getattr(ev, "stream_id", None)
            if sid is None:
                continue
            r = self.responses.setdefault(sid, new_response())
            if isinstance(ev, HeadersReceived):
                status = next((int(v) for k, v in ev.headers if k == b":status"), None)
                fields = [[k.decode(), v.decode()] for k, v in ev.headers if k != b":status"]
                if status is not None and status < 200:
                    r["interim"].append([status, fields])
                    continue
                if status is not None:
                    r["status"] = status
                r["headers"].extend(fields)
            elif isinstance(ev, DataReceived):
                r["body"] += ev.data
                if sid in self.stop and ev.data:
                    self.stop.discard(sid)
                    self._quic.stop_stream(sid, 0x10C)
                    self.transmit()
                    w = self.waiters.get(sid)
                    if w and not w.done():
                        w.set_result(None)
            if getattr(ev, "stream_ended", False):
                w = self.waiters.get(sid)
                if w and not w.done():
                    w.set_result(None)

    def start(self, req, authority):
        sid = self._quic.get_next_available_stream_id()
        method = req.get("method", "GET")
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", req.get("authority", authority).encode()),
            (b":path", req.get("path", "/").encode()),
        ] + [(k.encode(), v.encode()) for k, v in req.get("headers", [])]
        body = req.get("body")
        if body is not None:
            body = body.encode() * req.get("repeat", 1)
        self.h3.send_headers(sid, headers, end_stream=body is None and not req.get("open"))
        if body is not None:
            self.h3.send_data(sid, body, end_stream=not req.get("open"))
        self.waiters[sid] = asyncio.get_running_loop().create_future()
        if req.get("stop"):
            self.stop.add(sid)
        self.transmit()
        return sid

    async def done(self, sid, timeout=10):
        try:
            await asyncio.wait_for(asyncio.shield(self.waiters[sid]), timeout)
        except asyncio.TimeoutError:
            pass
        r = self.responses.get(sid, new_response())
        return {
            "status": r["status"],
            "interim": r["interim"],
            "headers": r["headers"],
            "body": base64.b64encode(bytes(r["body"])).decode(),
            "reset": r["reset"],
        }


def new_response():
    return {"status": None, "interim": [], "headers": [], "body": bytearray(), "reset": None}


def config(sni, ticket=None, tickets=None):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    c.verify_mode = ssl.CERT_NONE
    c.server_name = sni
    c.session_ticket = ticket
    return c


def dial(port, configuration=None, **kwargs):
    """A connection to the server (SNI localhost unless `configuration` says)."""
    return connect(
        "127.0.0.1",
        port,
        configuration=configuration or config("localhost"),
        create_protocol=Client,
        **kwargs,
    )


def terminated(client):
    t = client.terminated
    if t is None:
        return None
    return {"code": t.error_code, "reason": t.reason_phrase}


async def requests(port, spec):
    sni = spec.get("sni", "localhost")
    authority = spec.get("authority", f"{sni}:{port}")
    out = {"responses": []}
    c = config(sni)
    c.quic_logger = QuicLogger()
    async with dial(port, c) as client:
        if spec.get("sequential"):
            for req in spec["requests"]:
                await asyncio.sleep(req.get("pause", 0))
                sid = client.start(req, authority)
                out["responses"].append(await client.done(sid))
        else:
            sids = [client.start(req, authority) for req in spec["requests"]]
            for sid in sids:
                out["responses"].append(await client.done(sid))
        if spec.get("wait_close"):
            await closed(client, spec["wait_close"])
        out["terminated"] = terminated(client)
    out["datagrams_sent"] = datagrams_sent(c.quic_logger.to_dict())
    return out


def datagrams_sent(qlog):
    """The UDP datagrams the client sent on the connection."""
    return sum(
        e["data"].get("count", 1)
        for t in qlog["traces"]
        for e in t["events"]
        if e["name"] == "transport:datagrams_sent"
    )


async def closed(client, seconds):
    """Wait until the server closed the connection, at most `seconds`."""
    t0 = time.monotonic()
    while client.terminated is None and time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.05)


async def flood(port, spec):
    n = spec["streams"]
    out = {}
    async with dial(port) as client:
        q = client._quic
        out["server_max_streams"] = q._remote_max_streams_bidi
        # Ignore the server's credit, as an attacker would.
        q._remote_max_streams_bidi = 1 << 40
        # Streams left open (no end of request), so none ends and gives
        # its credit back.
        sids = [
            client.start({"path": spec["path"], "open": True}, f"localhost:{port}")
            for _ in range(n)
        ]
        await closed(client, 5)
        out["answered"] = sum(
            1 for s in sids if client.responses.get(s, {}).get("status") == 200
        )
        out["terminated"] = terminated(client)
    return out


async def cids(port, spec):
    out = {}
    async with dial(port) as client:
        q = client._quic
        out["server_cid_limit"] = q._remote_active_connection_id_limit
        # Past the limit, as an attacker would: aioquic itself issues no more
        # than the server takes.
        for _ in range(spec["ids"]):
            q._host_cids.append(
                QuicConnectionId(
                    cid=os.urandom(8),
                    sequence_number=q._host_cid_seq,
                    stateless_reset_token=os.urandom(16),
                )
            )
            q._host_cid_seq += 1
        client.transmit()
        await closed(client, 5)
        out["terminated"] = terminated(client)
    return out


async def zerortt(port, spec):
    tickets = []
    out = {}
    async with dial(port, session_ticket_handler=tickets.append) as client:
        sid = client.start({"path": "/"}, f"localhost:{port}")
        await client.done(sid)
        t0 = time.monotonic()
        while not tickets and time.monotonic() - t0 < 3:
            await asyncio.sleep(0.05)
    if not tickets:
        out["ticket"] = False
        return out
    ticket = tickets[-1]
    out["ticket"] = True
    out["ticket_early_data"] = ticket.max_early_data_size
    # Try early data even though the ticket does not allow it.
    if not ticket.max_early_data_size:
        ticket.max_early_data_size = 0xFFFFFFFF
    async with dial(port, config("localhost", ticket), wait_connected=False) as client:
        req = {"method": spec.get("method", "POST"), "path": spec["path"]}
        if "body" in spec:
            req["body"] = spec["body"]
        sid = client.start(req, f"localhost:{port}")
        out["sent_early"] = client._quic.tls.session_ticket is not None
        out["response"] = await client.done(sid, timeout=5)
        out["early_data_accepted"] = bool(client._quic.tls.early_data_accepted)
        out["resumed"] = bool(client._quic.tls.session_resumed)
        out["terminated"] = terminated(client)
    return out


async def one(port, path, configuration, **kwargs):
    """One request on a new connection: the response and the client."""
    async with dial(port, configuration, **kwargs) as client:
        sid = client.start({"path": path}, f"localhost:{port}")
        return await client.done(sid), client


async def resume(port, spec):
    tickets = []
    first, _ = await one(port, spec["path"], config("localhost"), session_ticket_handler=tickets.append)
    out = {"responses": [first]}
    t0 = time.monotonic()
    while not tickets and time.monotonic() - t0 < 3:
        await asyncio.sleep(0.05)
    second, client = await one(port, spec["path"], config("localhost", tickets[-1]))
    out["responses"].append(second)
    out["resumed"] = bool(client._quic.tls.session_resumed)
    return out


async def handshake(port, spec):
    c = config(spec.get("sni", "localhost"))
    out = {"connected": False}
    loop = asyncio.get_running_loop()
    _, client = await loop.create_datagram_endpoint(
        lambda: Client(QuicConnection(configuration=c)), remote_addr=("127.0.0.1", port)
    )
    client.connect(("127.0.0.1", port))
    t0 = time.monotonic()
    while client.terminated is None and time.monotonic() - t0 < 5:
        if client._quic._handshake_complete:
            out["connected"] = True
            break
        await asyncio.sleep(0.05)
    out["terminated"] = terminated(client)
    client.close()
    return out


async def token(port, spec):
    tokens = []
    first, c1 = await one(port, spec["path"], config("localhost"), token_handler=tokens.append)
    out = {"responses": [first], "token": bool(tokens), "retried1": c1._quic._retry_count}
    if tokens:
        c = config("localhost")
        c.token = tokens[-1]
        second, c2 = await one(port, spec["path"], c)
        out["responses"].append(second)
        out["retried2"] = c2._quic._retry_count
    return out


async def reset(port, spec):
    first, client = await one(port, spec["path"], config("localhost"))
    cid = client._quic._peer_cid.cid
    out = {"responses": [first]}
    # Closed (the context's end): the server drains, then forgets it.
    await asyncio.sleep(1.5)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    replies = []
    for size in spec["sizes"]:
        pad = bytes(random.getrandbits(8) for _ in range(size - 1 - len(cid)))
        s.sendto(bytes([0x40 | random.getrandbits(6)]) + cid + pad, ("127.0.0.1", port))
        try:
            data, _ = s.recvfrom(65536)
            replies.append(len(data))
        except socket.timeout:
            replies.append(0)
        await asyncio.sleep(0.1)
    out["replies"] = ",".join(map(str, replies))
    return out


def initial(port, spec):
    """One Initial from an address that never answers: what comes back."""
    conn = QuicConnection(configuration=config("localhost"))
    conn.connect(("127.0.0.1", port), now=time.time())
    dgrams = conn.datagrams_to_send(now=time.time())
    sent = sum(len(d) for d, _ in dgrams)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for d, _ in dgrams:
        s.sendto(d, ("127.0.0.1", port))
    s.settimeout(0.5)
    got, n = 0, 0
    end = time.monotonic() + spec.get("seconds", 3)
    while time.monotonic() < end:
        try:
            data, _ = s.recvfrom(65536)
        except socket.timeout:
            continue
        got += len(data)
        n += 1
    return {"sent": sent, "received": got, "datagrams": n}


def emit(out):
    responses = out.pop("responses", [])
    if "response" in out:
        responses.append(out.pop("response"))
    for i, r in enumerate(responses):
        body = base64.b64decode(r["body"])
        reset = "-" if r["reset"] is None else r["reset"]
        print(f"R {i} status={r['status']} reset={reset} len={len(body)}")
        for status, fields in r.get("interim", []):
            for k, v in fields:
                print(f"I {i} {status} {k}: {v}")
        for k, v in r["headers"]:
            print(f"H {i} {k}: {v}")
        print(f"B {i} {r['body']}")
    t = out.pop("terminated", None)
    if t is not None:
        out["terminated_code"] = t["code"]
    for k, v in out.items():
        print(f"K {k}={v}")


def main():
    port, mode, spec = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    if mode == "initial":
        out = initial(port, spec)
    else:
        fn = {
            "requests": requests,
            "flood": flood,
            "cids": cids,
            "zerortt": zerortt,
            "resume": resume,
            "handshake": handshake,
            "token": token,
            "reset": reset,
        }[mode]
        out = asyncio.run(fn(port, spec))
    emit(out)


if __name__ == "__main__":
    main()
