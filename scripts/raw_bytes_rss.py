#!/usr/bin/env python3
"""Peak memory a raw KServe BYTES input costs the server: the growth of its VmHWM (peak
resident set) over one request of 32 MiB of BYTES data to `echo_string`, declared

- `[1, 1]`: zero bytes, so one element followed by 8 Mi - 1 more length prefixes (refused
  as INVALID_ARGUMENT),
- `[1, 8Mi]`: zero bytes, 8 Mi empty elements (valid, echoed back),
- `[1, 1Mi] x 28 B`: 1 Mi elements of 28 bytes each (too long to live inside a
  `std::string`, so the runtime copies each to the heap),

sent as gRPC `raw_input_contents`, as HTTP binary-extension data, and as a registered
shared-memory window, each against a fresh server with the default
`--max-inflight-request-bytes` and with none. Prints a Markdown table.

    .venv/bin/python scripts/raw_bytes_rss.py [--bin target/release/tensorport]

The binary defaults to $TENSORPORT_BIN, else cargo's target/debug/tensorport.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import tensorport_server  # noqa: E402

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
DATA_BYTES = 32 << 20
LONG = 28
CASES = {"[1, 1]": 1, "[1, 8Mi]": DATA_BYTES // 4, f"[1, 1Mi] x {LONG} B": 1 << 20}


def data(count: int) -> bytes:
    if count == 1 << 20:
        return (LONG.to_bytes(4, "little") + b"a" * LONG) * count
    return bytes(DATA_BYTES)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def raw_request(count: int, raw: bytes) -> bytes:
    """ModelInferRequest{model_name: echo_string, inputs: [{x, BYTES, [1, count]}],
    raw_input_contents: [raw]}, encoded by hand."""
    shape = varint(1) + varint(count)
    tensor = field(1, b"x") + field(2, b"BYTES") + field(3, shape)
    return field(1, b"echo_string") + field(5, tensor) + field(7, raw)


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def send_grpc(target: str, message: bytes) -> str:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(MODEL_INFER, request_serializer=lambda m: m,
                                   response_deserializer=lambda m: m)
        try:
            call(message, timeout=600)
            return "OK"
        except grpc.RpcError as err:
            return err.code().name


def send_http(rest_url: str, count: int, raw: bytes) -> str:
    header = json.dumps({
        "inputs": [{"name": "x", "shape": [1, count], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }).encode()
    response = requests.post(f"{rest_url}/v2/models/echo_string/infer", data=header + raw,
                             headers={"inference-header-content-length": str(len(header)),
                                      "content-type": "application/octet-stream"},
                             timeout=600)
    return str(response.status_code)


def send_shm(rest_url: str, count: int, raw: bytes, tag: str) -> str:
    name = f"tp_rss_{tag}_{os.getpid()}"
    path = Path("/dev/shm") / name
    path.write_bytes(raw)
    try:
        requests.post(f"{rest_url}/v2/systemsharedmemory/region/{name}/register",
                      json={"key": f"/{name}", "offset": 0, "byte_size": len(raw)},
                      timeout=60).raise_for_status()
        body = {"inputs": [{"name": "x", "shape": [1, count], "datatype": "BYTES",
                            "parameters": {"shared_memory_region": name,
                                           "shared_memory_byte_size": len(raw)}}],
                "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}
        response = requests.post(f"{rest_url}/v2/models/echo_string/infer", json=body,
                                 timeout=600)
        requests.post(f"{rest_url}/v2/systemsharedmemory/region/{name}/unregister", timeout=60)
        return str(response.status_code)
    finally:
        path.unlink(missing_ok=True)


def send(transport: str, server, count: int, raw: bytes, tag: str) -> str:
    if transport == "grpc":
        return send_grpc(server.grpc_target, raw_request(count, raw))
    if transport == "http":
        return send_http(server.rest_url, count, raw)
    return send_shm(server.rest_url, count, raw, tag)


def run(transport: str, count: int, budget: int | None, workdir: Path) -> dict:
    tag = f"{transport}-{count}-{budget}"
    models = workdir / f"models-{tag}"
    models.mkdir()
    (models / "echo_string").symlink_to(tensorport_server.TEST_MODELS / "echo_string")
    args = [] if budget is None else ["--max-inflight-request-bytes", str(budget)]
    server = tensorport_server.start_server(models, workdir / f"{tag}.log", args)
    try:
        # One small request the same way first, so that start-up and first-use allocations
        # are in the baseline.
        send(transport, server, 2, b"\x01\x00\x00\x00a\x00\x00\x00\x00", f"{tag}-warm")
        time.sleep(0.5)
        before = vm_hwm(server.process.pid)
        outcome = send(transport, server, count, data(count), tag)
        after = vm_hwm(server.process.pid)
    finally:
        server.stop()
    return {"before": before, "after": after, "outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="server binary (default: $TENSORPORT_BIN or target/debug)")
    parser.add_argument("--transports", default="grpc,http,shm")
    args = parser.parse_args()
    if args.bin:
        os.environ["TENSORPORT_BIN"] = args.bin

    print("| transport | declared shape | --max-inflight-request-bytes | answer | VmHWM before "
          "| growth | growth / length prefix |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for transport in args.transports.split(","):
            for label, count in CASES.items():
                for budget in (None, 0):
                    result = run(transport, count, budget, Path(tmp))
                    growth = max(0, result["after"] - result["before"])
                    limit = "default (2 GiB)" if budget is None else "0 (off)"
                    # Per length prefix in the data: what a decoder that read them all made.
                    prefixes = count if count == 1 << 20 else DATA_BYTES // 4
                    per = f"{growth / prefixes:.0f} B"
                    print(f"| {transport} | {label} | {limit} | {result['outcome']} | "
                          f"{result['before'] / 1e6:.0f} MB | {growth / 1e6:.0f} MB | {per} |",
                          flush=True)


if __name__ == "__main__":
    main()
