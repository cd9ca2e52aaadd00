#!/bin/bash
# Installs TF Serving's official gRPC Python stubs into an existing venv without TensorFlow:
# tensorflow-serving-api (no deps), the tensorflow/core protos from the tensorflow-protobuf
# wheel, and small generated modules for error_codes (TF >= 2.17 moved it to
# xla/tsl/protobuf/error_codes.proto, which the 2.21 stubs import).
# Usage: scripts/install-tfs-client.sh VENV_DIR
set -euo pipefail
P="$1/bin/python"
"$P" -m pip install -q --no-deps tensorflow-serving-api==2.21.0
SP=$("$P" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$P" -m pip download -q --no-deps tensorflow-protobuf==2.11.0 -d "$T"
"$P" -m zipfile -e "$T"/tensorflow_protobuf-2.11.0-py3-none-any.whl "$T/x"
cp -r "$T/x/tensorflow" "$SP/"
"$P" - "$SP" <<'PY'
import os
import sys

from google.protobuf import descriptor_pb2 as d

site = sys.argv[1]
codes = [("OK", 0), ("CANCELLED", 1), ("UNKNOWN", 2), ("INVALID_ARGUMENT", 3), ("DEADLINE_EXCEEDED", 4),
         ("NOT_FOUND", 5), ("ALREADY_EXISTS", 6), ("PERMISSION_DENIED", 7), ("UNAUTHENTICATED", 16),
         ("RESOURCE_EXHAUSTED", 8), ("FAILED_PRECONDITION", 9), ("ABORTED", 10), ("OUT_OF_RANGE", 11),
         ("UNIMPLEMENTED", 12), ("INTERNAL", 13), ("UNAVAILABLE", 14), ("DATA_LOSS", 15),
         ("DO_NOT_USE_RESERVED_FOR_FUTURE_EXPANSION_USE_DEFAULT_IN_SWITCH_INSTEAD_", 20)]


def enum_file(name, package):
    f = d.FileDescriptorProto(name=name, package=package, syntax="proto3")
    e = f.enum_type.add(name="Code")
    for n, v in codes:
        e.value.add(name=n, number=v)
    return f


xla = enum_file("xla/tsl/protobuf/error_codes.proto", "tensorflow.error")
fwd = d.FileDescriptorProto(name="tensorflow/core/protobuf/error_codes.proto", package="tensorflow.error.shim",
                            syntax="proto3", dependency=["xla/tsl/protobuf/error_codes.proto"], public_dependency=[0])
tsl = enum_file("tensorflow/tsl/protobuf/error_codes.proto", "tensorflow.error.tsl_shim")
module = ("from google.protobuf import descriptor_pool as _p, symbol_database as _s\n"
          "from google.protobuf.internal import builder as _b\n{imports}"
          "DESCRIPTOR = _p.Default().AddSerializedFile({serialized!r})\n"
          "_b.BuildMessageAndEnumDescriptors(DESCRIPTOR, globals())\n"
          "_b.BuildTopDescriptorsAndMessages(DESCRIPTOR, {name!r}, globals())\n")
xla_import = ("from xla.tsl.protobuf.error_codes_pb2 import *\n"
              "from xla.tsl.protobuf import error_codes_pb2 as xla_dot_tsl_dot_protobuf_dot_error__codes__pb2\n")
for f, name, imports in ((xla, "xla.tsl.protobuf.error_codes_pb2", ""),
                         (fwd, "tensorflow.core.protobuf.error_codes_pb2", xla_import),
                         (tsl, "tensorflow.tsl.protobuf.error_codes_pb2", "")):
    parts = name.split(".")
    path = os.path.join(site, *parts) + ".py"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for i in range(1, len(parts)):
        init = os.path.join(site, *parts[:i], "__init__.py")
        if not os.path.exists(init):
            open(init, "w").close()
    with open(path, "w") as out:
        out.write(module.format(imports=imports, serialized=f.SerializeToString(), name=name))
PY
"$P" -c "from tensorflow_serving.apis import prediction_service_pb2_grpc, model_service_pb2_grpc, predict_pb2"
