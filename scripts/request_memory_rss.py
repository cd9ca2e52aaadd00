#!/usr/bin/env python3
"""Peak memory a large request costs the server: the growth of its VmHWM (peak resident set)
over one request, for

- `json`: a KServe v2 HTTP request of about 60 MB of JSON (FP32 values written out in full),
- `strings`: the string bomb, a KServe v2 gRPC ModelInfer message of 20 M empty strings
  (about 40 MB on the wire),

each against a fresh server with the default `--max-inflight-request-bytes`, with a budget
too small for the request (which must then be refused with 429 / RESOURCE_EXHAUSTED before
it is decoded), and with no budget (what the request costs when it is served). Prints a Markdown table for docs/BENCHMARKS.md.

    .venv/bin/python scripts/request_memory_rss.py [--bin target/release/tensorport]

The binary defaults to $TENSORPORT_BIN, else cargo's target/debug/tensorport.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import tensorport_server  # noqa: E402

SMALL_BUDGET = 256 << 20
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


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


def string_bomb(count: int) -> bytes:
    """ModelInferRequest{model_name: echo_string, inputs: [{x, BYTES, [1, count],
    contents.bytes_contents: count empty strings}]}, encoded by hand so that building it
    takes seconds, not the minutes a protobuf library needs for 20 M elements."""
    contents = b"\x42\x00" * count  # field 8, length 0
    shape = varint(1) + varint(count)
    tensor = field(1, b"x") + field(2, b"BYTES") + field(3, shape) + field(5, contents)
    return field(1, b"echo_string") + field(5, tensor)


def json_body(target_bytes: int) -> tuple[bytes, int]:
    value = "0.123456789"
    count = target_bytes // (len(value) + 1)
    data = ",".join([value] * count)
    body = (
        '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, %d], "data": [%s]}]}'
        % (count, data)
    ).encode()
    return body, count


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def run(case: str, body: bytes, budget: int | None, workdir: Path) -> dict:
    models = workdir / f"models-{case}-{budget}"
    models.mkdir()
    tensorport_server.link_models(models)
    args = [] if budget is None else ["--max-inflight-request-bytes", str(budget)]
    server = tensorport_server.start_server(models, workdir / f"{case}-{budget}.log", args)
    try:
        # One small request of the same kind first, so that start-up and the first-use
        # allocations are in the baseline.
        if case == "json":
            small = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}'
            requests.post(f"{server.rest_url}/v2/models/echo_float32/infer", data=small, timeout=60)
        else:
            send_grpc(server.grpc_target, string_bomb(1))
        time.sleep(0.5)
        before = vm_hwm(server.process.pid)
        if case == "json":
            response = requests.post(f"{server.rest_url}/v2/models/echo_float32/infer",
                                     data=body, headers={"content-type": "application/json"},
                                     timeout=600)
            outcome = str(response.status_code)
        else:
            outcome = send_grpc(server.grpc_target, body)
        after = vm_hwm(server.process.pid)
    finally:
        server.stop()
    return {"before": before, "after": after, "outcome": outcome}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="server binary (default: $TENSORPORT_BIN or target/debug)")
    parser.add_argument("--json-mb", type=int, default=60)
    parser.add_argument("--strings", type=int, default=20_000_000)
    args = parser.parse_args()
    if args.bin:
        os.environ["TENSORPORT_BIN"] = args.bin

    bodies = {
        "json": json_body(args.json_mb * 1_000_000)[0],
        "strings": string_bomb(args.strings),
    }
    print("| request | body | --max-inflight-request-bytes | answer | VmHWM before | VmHWM after | growth | growth / body |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for case, body in bodies.items():
            for budget in (None, SMALL_BUDGET, 0):
                result = run(case, body, budget, Path(tmp))
                growth = max(0, result["after"] - result["before"])
                label = ("default (2 GiB)" if budget is None
                         else "0 (off)" if budget == 0 else f"{budget >> 20} MiB")
                print(f"| {case} | {len(body) / 1e6:.1f} MB | {label} | {result['outcome']} | "
                      f"{result['before'] / 1e6:.0f} MB | {result['after'] / 1e6:.0f} MB | "
                      f"{growth / 1e6:.0f} MB | {growth / len(body):.1f}x |", flush=True)


if __name__ == "__main__":
    main()
