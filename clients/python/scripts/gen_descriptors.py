"""Regenerates src/tensorport_client/_descriptors.binpb from the repository's proto/ folder.

The client builds its gRPC messages from this descriptor set in a private descriptor pool,
so it needs no generated _pb2 modules and cannot clash with other packages (tritonclient,
tensorflow-serving-api) that register the same .proto files in the default pool.

Usage: python clients/python/scripts/gen_descriptors.py [OUT]   (needs grpcio-tools)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PROTO = REPO / "proto"
DEFAULT_OUT = HERE.parent / "src" / "tensorport_client" / "_descriptors.binpb"
SERVICES = [
    "tensorflow_serving/apis/prediction_service.proto",
    "tensorflow_serving/apis/model_service.proto",
    "kserve/grpc_service.proto",
]


def generate(out: Path) -> None:
    from importlib import resources

    from grpc_tools import protoc

    # google/protobuf/*.proto (any, wrappers) ship inside grpc_tools.
    well_known = resources.files("grpc_tools") / "_proto"
    args = ["protoc", f"-I{PROTO}", f"-I{well_known}", "--include_imports", f"--descriptor_set_out={out}", *SERVICES]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
