"""What one tenant of a shared server controls besides its request bodies, against the real
binary: how fast it opens and cancels HTTP/2 streams, how long its header blocks run, and the
names it asks for. Each must cost the server a bounded amount and disturb no other client.
"""

from __future__ import annotations

import re
import socket
import struct

import h2.config
import h2.connection
import h2.errors
import h2.events
import hpack
import pytest
import requests

INFER_BODY = (b'{"inputs":[{"name":"features","shape":[1,16],"datatype":"FP32","data":['
              + b",".join([b"0.5"] * 16) + b"]}]}")


def rest_address(rest_url: str) -> tuple[str, int]:
    host, port = rest_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def open_h2(rest_url: str) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection(rest_address(rest_url), timeout=30)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def serves(rest_url: str) -> bool:
    body = {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                        "data": [0.5] * 16}]}
    response = requests.post(f"{rest_url}/v2/models/ranker/infer", json=body, timeout=30)
    return response.status_code == 200


def test_rapid_reset_is_answered_with_goaway(rest_url):
    """CVE-2023-44487: a client that opens streams and cancels each at once makes the server
    start work it never finishes. The server must stop the connection (GOAWAY) long before the
    client runs out of streams, and keep serving everyone else."""
    sock, conn = open_h2(rest_url)
    terminated = None
    try:
        for _ in range(20_000):
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, [(":method", "POST"), (":path", "/v2/models/ranker/infer"),
                                       (":scheme", "http"), (":authority", "tensorport"),
                                       ("content-type", "application/json")])
            conn.send_data(stream, INFER_BODY, end_stream=True)
            conn.reset_stream(stream, error_code=h2.errors.ErrorCodes.CANCEL)
            try:
                sock.sendall(conn.data_to_send())
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.setblocking(False)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                data = None
            finally:
                sock.setblocking(True)
            if data == b"":
                break
            if data:
                events = conn.receive_data(data)
                terminated = next((e for e in events
                                   if isinstance(e, h2.events.ConnectionTerminated)), None)
                if terminated:
                    break
        # Whatever the server sent last: its GOAWAY, unless it closed at once.
        if terminated is None:
            sock.settimeout(30)
            while terminated is None:
                try:
                    data = sock.recv(65536)
                except (ConnectionResetError, TimeoutError):
                    break
                if not data:
                    break
                terminated = next((e for e in conn.receive_data(data)
                                   if isinstance(e, h2.events.ConnectionTerminated)), None)
    finally:
        sock.close()
    assert terminated is not None, "the server never sent GOAWAY to a rapid-reset client"
    assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert serves(rest_url)


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def test_an_endless_header_block_is_cut_off(rest_url):
    """CVE-2024-27316 and kin: HEADERS without END_HEADERS, then CONTINUATION frames forever.
    The server must close the connection after a bounded amount, not buffer it all."""
    sock, _ = open_h2(rest_url)
    start = hpack.Encoder().encode([(":method", "POST"), (":path", "/v2/models/ranker/infer"),
                                    (":scheme", "http"), (":authority", "tensorport")])
    junk = hpack.Encoder().encode([("x-junk", "a" * 8000)])
    sent = 0
    cut_off = False
    try:
        sock.sendall(frame(0x1, 0, 1, start))
        # 64 MiB of header block if the server let it through.
        for _ in range(8_000):
            sock.sendall(frame(0x9, 0, 1, junk))
            sent += len(junk)
    except (BrokenPipeError, ConnectionResetError):
        cut_off = True
    finally:
        sock.close()
    assert cut_off, f"the server took {sent} bytes of one header block"
    assert sent < 16 << 20
    assert serves(rest_url)


@pytest.mark.parametrize("path", ["/v2/models/{name}/infer", "/v1/models/{name}:predict",
                                  "/v2/models/{name}/versions/7{i}/ready"])
def test_names_a_client_makes_up_add_no_metric_series(rest_url, http, path):
    """A client that asks for a new model name (or version) with every request must not grow
    the metrics, which would eat memory and break the Prometheus that scrapes them."""
    def series() -> int:
        text = http.get(f"{rest_url}/metrics", timeout=10).text
        return sum(1 for line in text.splitlines() if line and not line.startswith("#"))

    def ask(i: int) -> None:
        url = rest_url + path.format(name=f"made-up-{i}", i=i)
        http.post(url, data=INFER_BODY, timeout=10) if "ready" not in url else http.get(url, timeout=10)

    # The first answers create the label sets every later one reuses, and the first scrape
    # its own (protocol "other").
    for i in range(5):
        ask(i)
    series()
    before = series()
    for i in range(5, 305):
        ask(i)
    text = http.get(f"{rest_url}/metrics", timeout=10).text
    assert not re.search(r"made-up-\d+", text)
    assert series() == before
