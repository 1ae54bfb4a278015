"""N streams of one connection download PATH side by side, with the
h2 library's client (flow control as a client does it). Prints
`complete=<streams whose body is FILE's bytes> streams=<N>`."""
import hashlib
import socket
import sys

import h2.config
import h2.connection
import h2.events

port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(sys.argv[4], "rb") as f:
    want = hashlib.sha256(f.read()).hexdigest()
s = socket.create_connection(("127.0.0.1", port), timeout=20)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
bodies = {}
for i in range(n):
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":path", f"{path}?{i}"),
                         (":authority", "localhost")], end_stream=True)
    bodies[sid] = hashlib.sha256()
s.sendall(c.data_to_send())
ended = set()
while len(ended) < n:
    data = s.recv(1 << 20)
    if not data:
        break
    for e in c.receive_data(data):
        if isinstance(e, h2.events.DataReceived):
            bodies[e.stream_id].update(e.data)
            c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            ended.add(e.stream_id)
    s.sendall(c.data_to_send())
ok = sum(1 for b in bodies.values() if b.hexdigest() == want)
print(f"complete={ok} streams={n}")
