"""A small HTTP/2 client over a plain socket (prior knowledge, no TLS), on the `h2` package.

The tests that need to know exactly when a request's bytes left the client use it instead of
grpcio or requests: `send` returns once the request is in the kernel's send buffer, and
`answer` reads until that stream ends. Pings are acknowledged and received data is given back
to the flow-control windows as it arrives, like any well-behaved client.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events


@dataclass
class Answer:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    trailers: dict[str, str] = field(default_factory=dict)
    # The stream was reset, or the connection went away before the stream ended.
    reset: bool = False


class GoneAway(Exception):
    """The server sent GOAWAY: this connection takes no new streams."""


class GracefulConnection(h2.connection.H2Connection):
    """python-h2 ends the connection on the first GOAWAY it receives, and refuses every frame
    after it. A server that shuts down gracefully (RFC 9113, section 6.8) sends GOAWAY first
    and then finishes the streams already open, as hyper does: so the GOAWAY is reported
    here and the connection stays open for those streams. `H2Client` opens no new stream
    after it."""

    def _receive_goaway_frame(self, frame):
        event = h2.events.ConnectionTerminated()
        event.error_code = h2.connection._error_code_from_int(frame.error_code)
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


class H2Client:
    def __init__(self, host_port: str, timeout: float = 60.0):
        host, port = host_port.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = GracefulConnection(config=config)
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.answers: dict[int, Answer] = {}
        self.ended: set[int] = set()
        self.gone_away = False
        self.authority = host_port

    def send(self, path: str, body: bytes, headers: list[tuple[str, str]]) -> int:
        """Sends one request; returns its stream id once its bytes are in the send buffer."""
        if self.gone_away:
            raise GoneAway()
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"),
                                        (":authority", self.authority), (":path", path), *headers])
        self.conn.send_data(stream, body, end_stream=True)
        self.answers[stream] = Answer()
        self.sock.sendall(self.conn.data_to_send())
        return stream

    def answer(self, stream: int) -> Answer:
        """Reads until `stream` ends (or is reset, or the connection closes)."""
        while stream not in self.ended:
            data = self.sock.recv(1 << 16)
            if not data:
                for open_stream in self.answers:
                    if open_stream not in self.ended:
                        self.answers[open_stream].reset = True
                        self.ended.add(open_stream)
                break
            for event in self.conn.receive_data(data):
                self._handle(event)
            outgoing = self.conn.data_to_send()
            if outgoing:
                self.sock.sendall(outgoing)
        return self.answers[stream]

    def _handle(self, event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            headers = dict(event.headers)
            self.answers[event.stream_id].status = int(headers.pop(":status"))
            self.answers[event.stream_id].headers = headers
        elif isinstance(event, h2.events.DataReceived):
            self.answers[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            self.answers[event.stream_id].trailers = dict(event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            self.ended.add(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.answers[event.stream_id].reset = True
            self.ended.add(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.gone_away = True
            # Streams above the last one the server took were never processed (the first
            # GOAWAY of a graceful shutdown names the highest possible id).
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for open_stream in self.answers:
                if open_stream > last and open_stream not in self.ended:
                    self.answers[open_stream].reset = True
                    self.ended.add(open_stream)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def grpc_message(message: bytes) -> bytes:
    """One length-prefixed gRPC message, uncompressed."""
    return struct.pack(">BI", 0, len(message)) + message


def grpc_messages(body: bytes) -> list[bytes]:
    """The length-prefixed messages of a gRPC body."""
    messages = []
    while len(body) >= 5:
        _, length = struct.unpack(">BI", body[:5])
        messages.append(body[5:5 + length])
        body = body[5 + length:]
    return messages


GRPC_HEADERS = [("content-type", "application/grpc"), ("te", "trailers")]
