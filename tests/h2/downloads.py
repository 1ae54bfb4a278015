"""N streams of one connection download PATH side by side, with the
h2 library's client (flow control as a client does it). With RESET, the
first RESET streams are reset after their first DATA frame and as many new
streams are opened then. Prints `complete=<streams whose body is FILE's
bytes> streams=<streams left to complete>`."""
import hashlib
import socket
import sys

import h2.config
import h2.connection
import h2.events

port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(sys.argv[4], "rb") as f:
    want = hashlib.sha256(f.read()).hexdigest()
reset = int(sys.argv[5]) if len(sys.argv) > 5 else 0
s = socket.create_connection(("127.0.0.1", port), timeout=20)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
bodies = {}


def get():
    """Open a stream for PATH (its query: the stream's id); its id."""
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":path", f"{path}?{sid}"),
                         (":authority", "localhost")], end_stream=True)
    bodies[sid] = hashlib.sha256()
    return sid


to_reset = set()
for i in range(n):
    sid = get()
    if i < reset:
        to_reset.add(sid)
s.sendall(c.data_to_send())
ended = set()
while len(ended) < len(bodies):
    data = s.recv(1 << 20)
    if not data:
        break
    for e in c.receive_data(data):
        if isinstance(e, h2.events.DataReceived):
            c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            if e.stream_id in to_reset:
                to_reset.discard(e.stream_id)
                c.reset_stream(e.stream_id)
                del bodies[e.stream_id]
                get()
            elif e.stream_id in bodies:
                bodies[e.stream_id].update(e.data)
        elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            if e.stream_id in bodies:
                ended.add(e.stream_id)
    s.sendall(c.data_to_send())
ok = sum(1 for b in bodies.values() if b.hexdigest() == want)
print(f"complete={ok} streams={len(bodies)}")
