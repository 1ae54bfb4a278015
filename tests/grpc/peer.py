"""A gRPC server and client (grpcio, generic handlers over raw bytes: no
protoc step) for tests/grpc.rs.

  peer.py server PORT [CERT KEY]   serve test.Echo on 127.0.0.1:PORT (or PORT
                                   `unix:/path` or `HOST:PORT`) until killed;
                                   prints READY
  peer.py client TARGET CASES [CA NAME]
                                   run the calls CASES names (comma-separated,
                                   or `all`) through TARGET; prints a line
                                   `case=JSON` of what each call got. NAME:
                                   the name TLS checks, or without CA (an
                                   empty one) the calls' :authority
"""
import json
import queue
import sys
import threading
import time
from concurrent import futures

import grpc

ident = lambda b: b


def unary(req, ctx):
    md = dict(ctx.invocation_metadata())
    ctx.send_initial_metadata((("x-got-test", md.get("x-test", "")), ("x-got-peer", ctx.peer())))
    return b"echo:" + req


def server_stream(req, ctx):
    for i in range(int(req or b"3")):
        yield b"piece %d" % i


def client_stream(reqs, ctx):
    return b"+".join(reqs)


def bidi(reqs, ctx):
    for r in reqs:
        yield r.upper()


def fail(req, ctx):
    ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing: " + req.decode())


def fail_late(req, ctx):
    yield b"first"
    ctx.set_code(grpc.StatusCode.INVALID_ARGUMENT)
    ctx.set_details("bad after first")


def big(req, ctx):
    return b"x" * int(req)


def big_head(req, ctx):
    ctx.send_initial_metadata((("x-big", "y" * int(req)),))
    return b"ok"


def slow(req, ctx):
    time.sleep(float(req))
    return b"late"


def peer(req, ctx):
    """After `req` seconds, the caller's end of the connection."""
    time.sleep(float(req))
    return ctx.peer().encode()


HANDLERS = {
    "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
    "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
    "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
    "Bidi": grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
    "Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
    "FailLate": grpc.unary_stream_rpc_method_handler(fail_late, ident, ident),
    "Big": grpc.unary_unary_rpc_method_handler(big, ident, ident),
    "Slow": grpc.unary_unary_rpc_method_handler(slow, ident, ident),
    "BigHead": grpc.unary_unary_rpc_method_handler(big_head, ident, ident),
    "Peer": grpc.unary_unary_rpc_method_handler(peer, ident, ident),
}


def serve(port, cert=None, key=None):
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", HANDLERS),))
    addr = port if port.startswith("unix:") or ":" in port else "127.0.0.1:%s" % port
    if cert:
        creds = grpc.ssl_server_credentials(((open(key, "rb").read(), open(cert, "rb").read()),))
        s.add_secure_port(addr, creds)
    else:
        s.add_insecure_port(addr)
    s.start()
    print("READY", flush=True)
    while True:
        time.sleep(3600)


def outcome(call):
    """Run `call`; what it got, or its error's code and details."""
    try:
        r = call()
        return {"ok": r}
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}


def client(target, cases, ca=None, name=None):
    if ca:
        creds = grpc.ssl_channel_credentials(open(ca, "rb").read())
        ch = grpc.secure_channel(target, creds, options=(("grpc.ssl_target_name_override", name),))
    else:
        ch = grpc.insecure_channel(target, options=(("grpc.default_authority", name),) if name else ())
    m = lambda kind, n: getattr(ch, kind)("/test.Echo/" + n, request_serializer=ident,
                                          response_deserializer=ident)

    def unary():
        resp, call = m("unary_unary", "Unary").with_call(b"hello", metadata=(("x-test", "yes"),),
                                                         timeout=10)
        md = dict(call.initial_metadata())
        return {"body": resp.decode(), "test": md.get("x-got-test"), "code": call.code().name}

    def peers():
        """The peer (vireo's end of the connection) each of two calls came from."""
        out = []
        for _ in range(2):
            _, call = m("unary_unary", "Unary").with_call(b"x", timeout=10)
            out.append(dict(call.initial_metadata()).get("x-got-peer"))
        return "same" if out[0] == out[1] else "different"

    def side_by_side(first=True):
        """20 calls in flight at once (after a first one): how many
        connections (of the caller to the server) they came on."""
        if first:
            m("unary_unary", "Peer")(b"0", timeout=10)
        calls = [m("unary_unary", "Peer").future(b"0.3", timeout=10) for _ in range(20)]
        peers = [c.result().decode() for c in calls]
        return {"calls": len(peers), "connections": len(set(peers))}

    def ping_pong():
        """A full-duplex call: each message goes only after the reply to the
        one before it came back."""
        replies = queue.Queue()
        out = []

        def requests():
            for word in (b"ping", b"pong", b"done"):
                yield word
                out.append(replies.get(timeout=5).decode())

        for r in m("stream_stream", "Bidi")(requests(), timeout=10):
            replies.put(r)
        return out

    def cancel_duplex():
        """A full-duplex call the client cancels once the first reply came,
        its body not ended."""
        stop = threading.Event()

        def requests():
            yield b"one"
            stop.wait(5)

        call = m("stream_stream", "Bidi")(requests(), timeout=10)
        first = next(call).decode()
        call.cancel()
        stop.set()
        return first

    def duplex_too_big():
        """A full-duplex call whose second message, sent after the first
        reply came, takes the body past client_max_body_size (1k)."""
        stop = threading.Event()
        replies = []

        def requests():
            yield b"one"
            stop.wait(5)
            yield b"x" * 4000
            stop.wait(5)

        call = m("stream_stream", "Bidi")(requests(), timeout=10)
        try:
            for r in call:
                replies.append(r.decode())
                stop.set()
        finally:
            stop.set()
        return replies

    got = []

    def fail_late():
        for r in m("unary_stream", "FailLate")(b"", timeout=10):
            got.append(r.decode())

    calls = {
        "unary": unary,
        "server_stream":
            lambda: [r.decode() for r in m("unary_stream", "ServerStream")(b"4", timeout=10)],
        "client_stream":
            lambda: m("stream_unary", "ClientStream")(iter([b"a", b"b", b"c"]), timeout=10).decode(),
        "bidi": lambda: [r.decode() for r in m("stream_stream", "Bidi")(iter([b"x", b"yz"]), timeout=10)],
        "ping_pong": ping_pong,
        "cancel_duplex": cancel_duplex,
        "duplex_too_big": duplex_too_big,
        "fail": lambda: m("unary_unary", "Fail")(b"thing", timeout=10),
        "fail_late": fail_late,
        "big": lambda: len(m("unary_unary", "Big")(b"1000000", timeout=10)),
        "slow": lambda: m("unary_unary", "Slow")(b"3", timeout=10).decode(),
        "cancel": lambda: m("unary_unary", "Slow")(b"3", timeout=0.5).decode(),
        "peers": peers,
        "side_by_side": side_by_side,
        "burst": lambda: side_by_side(first=False),
        "big_head": lambda: m("unary_unary", "BigHead")(b"6000", timeout=10).decode(),
    }
    for case in (calls if cases == "all" else cases.split(",")):
        r = outcome(calls[case])
        if case == "fail_late":
            r["got"] = got
        print("%s=%s" % (case, json.dumps(r, sort_keys=True)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(*sys.argv[2:])
    else:
        client(*sys.argv[2:])
