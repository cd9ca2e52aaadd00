#!/usr/bin/env python3
"""Check tensorport's proto/ tree against the official published descriptors.

Our .proto files under proto/ are written independently but must be wire
compatible with the official TensorFlow Serving and KServe v2 / Triton
clients. This script:

  1. compiles proto/ with grpcio-tools' protoc into a descriptor set (temp dir);
  2. loads the official descriptors from the installed Python stubs:
       - tensorflow-serving-api==2.21.0 (tensorflow_serving.apis / .config),
       - tensorflow/core/* from the tensorflow-protobuf==2.11.0 wheel,
       - tritonclient.grpc.service_pb2 / model_config_pb2,
     plus, as a secondary reference for TensorFlow core items that are newer
     than the 2.11 wheel (float8_val, DT_FLOAT8_*, DT_INT4, SignatureDef.defaults,
     ...), the synced copies in tensorboard.compat.proto (tensorboard==2.21.0,
     package `tensorboard` mapped back to `tensorflow`);
  3. compares message by message: every field we define must match the official
     one exactly (name, number, type, type name, label, proto3-optional,
     oneof membership, json_name, packed encoding); every enum value must match;
     every service must have exactly the official methods with the same
     request/response types and streaming flags. Official items that we do not
     define are reported as "omitted"; they are only allowed where listed in
     ALLOWED_OMISSIONS below, anything else is an error.

Exit status: 0 when everything matches, 1 on any mismatch, 2 on setup problems.

Usage:
  scripts/check_protos.py            # uses .cache/protocheck-venv if needed
  scripts/check_protos.py --setup    # (re)create that venv first
  scripts/check_protos.py -v         # also list omitted / newer-upstream items
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.environ.get("PROTOCHECK_PROTO_DIR") or os.path.join(ROOT, "proto")
VENV = os.environ.get("PROTOCHECK_VENV") or os.path.join(ROOT, ".cache", "protocheck-venv")
VENV_PY = os.path.join(VENV, "bin", "python")

OFFICIAL_MODULES = [
    "tensorflow_serving.apis.model_pb2",
    "tensorflow_serving.apis.predict_pb2",
    "tensorflow_serving.apis.get_model_metadata_pb2",
    "tensorflow_serving.apis.get_model_status_pb2",
    "tensorflow_serving.apis.model_service_pb2",
    "tensorflow_serving.apis.model_management_pb2",
    "tensorflow_serving.apis.prediction_service_pb2",
    "tensorflow_serving.apis.classification_pb2",
    "tensorflow_serving.apis.regression_pb2",
    "tensorflow_serving.apis.inference_pb2",
    "tensorflow_serving.apis.input_pb2",
    "tensorflow_serving.apis.status_pb2",
    "tensorflow_serving.apis.logging_pb2",
    "tensorflow_serving.apis.prediction_log_pb2",
    "tensorflow_serving.config.model_server_config_pb2",
    "tensorflow_serving.config.file_system_storage_path_source_pb2",
    "tensorflow_serving.config.logging_config_pb2",
    "tensorflow_serving.config.log_collector_config_pb2",
    "tensorflow.core.framework.types_pb2",
    "tensorflow.core.framework.tensor_pb2",
    "tensorflow.core.framework.tensor_shape_pb2",
    "tensorflow.core.framework.resource_handle_pb2",
    "tensorflow.core.protobuf.meta_graph_pb2",
    "tensorflow.core.example.example_pb2",
    "tensorflow.core.example.feature_pb2",
    "tritonclient.grpc.service_pb2",
    "tritonclient.grpc.model_config_pb2",
]

# Newer copies of TensorFlow core protos (package "tensorboard").
SECONDARY_MODULES = [
    "tensorboard.compat.proto.types_pb2",
    "tensorboard.compat.proto.tensor_pb2",
    "tensorboard.compat.proto.tensor_shape_pb2",
    "tensorboard.compat.proto.resource_handle_pb2",
    "tensorboard.compat.proto.meta_graph_pb2",
]

# Official file -> which of its top-level messages/enums we must define.
# "*" = all of them. Files not listed here are not required at all (they are
# only compared where we happen to define something with the same name).
REQUIRED_FILES = {
    "tensorflow_serving/apis/model.proto": "*",
    "tensorflow_serving/apis/predict.proto": "*",
    "tensorflow_serving/apis/get_model_metadata.proto": "*",
    "tensorflow_serving/apis/get_model_status.proto": "*",
    "tensorflow_serving/apis/model_service.proto": "*",
    "tensorflow_serving/apis/model_management.proto": "*",
    "tensorflow_serving/apis/prediction_service.proto": "*",
    "tensorflow_serving/apis/classification.proto": "*",
    "tensorflow_serving/apis/regression.proto": "*",
    "tensorflow_serving/apis/inference.proto": "*",
    "tensorflow_serving/apis/input.proto": "*",
    "tensorflow_serving/apis/status.proto": "*",
    "tensorflow_serving/apis/logging.proto": "*",
    # SessionRunLog would pull in TensorFlow's session protos; warmup replays predict logs.
    "tensorflow_serving/apis/prediction_log.proto": {
        "tensorflow.serving.ClassifyLog", "tensorflow.serving.RegressLog",
        "tensorflow.serving.PredictLog", "tensorflow.serving.PredictStreamedLog",
        "tensorflow.serving.MultiInferenceLog", "tensorflow.serving.PredictionLog",
    },
    "tensorflow_serving/config/model_server_config.proto": "*",
    "tensorflow_serving/config/file_system_storage_path_source.proto": "*",
    "tensorflow_serving/config/logging_config.proto": "*",
    "tensorflow_serving/config/log_collector_config.proto": "*",
    "tensorflow/core/framework/types.proto": "*",
    "tensorflow/core/framework/tensor.proto": "*",
    "tensorflow/core/framework/tensor_shape.proto": "*",
    "tensorflow/core/framework/resource_handle.proto": "*",
    "tensorflow/core/protobuf/meta_graph.proto": {"tensorflow.TensorInfo", "tensorflow.SignatureDef"},
    "tensorflow/core/example/example.proto": "*",
    "tensorflow/core/example/feature.proto": "*",
    "grpc_service.proto": "*",
    "model_config.proto": "*",
}

# Fields / nested types of required messages that we deliberately leave out.
# Each is safe on the wire: an omitted field arrives as an unknown field.
ALLOWED_OMISSIONS = {
    # Would pull in TypeSpecProto / StructuredValue (struct.proto) and more.
    "tensorflow.TensorInfo.composite_tensor",
    "tensorflow.TensorInfo.CompositeTensor",
    # The log of a SessionRun call (see prediction_log.proto).
    "tensorflow.serving.PredictionLog.session_run_log",
}

# Types that must exist in our tree with this exact full name, whatever file
# the official build put them in (error codes moved around upstream).
REQUIRED_TYPES = {"tensorflow.error.Code"}

# Where an official type lives in a file whose path we do not reproduce.
# official file -> our file
FILE_RENAMES = {
    "grpc_service.proto": "kserve/grpc_service.proto",
    "model_config.proto": "kserve/model_config.proto",
    # upstream moved the enum to XLA/TSL and re-exports it from the TF path
    "xla/tsl/protobuf/error_codes.proto": "tensorflow/core/protobuf/error_codes.proto",
}

# Services (full name) that must exist with exactly the official method set.
REQUIRED_SERVICES = {
    "tensorflow.serving.PredictionService",
    "tensorflow.serving.ModelService",
    "inference.GRPCInferenceService",
}


def have_deps():
    try:
        import grpc_tools  # noqa: F401
        import tensorflow_serving.apis.predict_pb2  # noqa: F401
        import tritonclient.grpc.service_pb2  # noqa: F401
        import tensorboard.compat.proto.types_pb2  # noqa: F401
        return True
    except Exception:
        return False


def setup_venv():
    """Create .cache/protocheck-venv with the official stubs."""
    candidates = [
        os.environ.get("TFS_CLIENT_SETUP", ""),
        os.path.join(ROOT, "shared", "tools", "setup-tfs-client.sh"),
        os.path.join(os.path.dirname(ROOT), "shared", "tools", "setup-tfs-client.sh"),
        "/work/shared/tools/setup-tfs-client.sh",
    ]
    script = next((c for c in candidates if c and os.path.isfile(c)), None)
    if script is None:
        print("setup: setup-tfs-client.sh not found (set TFS_CLIENT_SETUP)", file=sys.stderr)
        sys.exit(2)
    os.makedirs(os.path.dirname(VENV), exist_ok=True)
    subprocess.check_call(["bash", script, VENV])
    subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "tritonclient[grpc]", "grpcio-tools"])
    subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "--no-deps", "tensorboard==2.21.0"])


# ----------------------------------------------------------------------------
# Descriptor loading


def compile_ours(tmp):
    from grpc_tools import protoc
    from google.protobuf import descriptor_pb2
    import importlib.resources as ir

    files = []
    for d, _, names in os.walk(PROTO_DIR):
        for n in names:
            if n.endswith(".proto"):
                files.append(os.path.relpath(os.path.join(d, n), PROTO_DIR))
    files.sort()
    out = os.path.join(tmp, "ours.pb")
    wkt = str(ir.files("grpc_tools") / "_proto")
    args = ["protoc", "-I" + PROTO_DIR, "-I" + wkt, "--include_imports",
            "--descriptor_set_out=" + out, "--python_out=" + tmp,
            "--grpc_python_out=" + tmp] + files
    rc = protoc.main(args)
    if rc != 0:
        print("FAIL: protoc could not compile proto/ (exit %d)" % rc)
        sys.exit(1)
    fds = descriptor_pb2.FileDescriptorSet()
    with open(out, "rb") as f:
        fds.ParseFromString(f.read())
    ours = [fd for fd in fds.file if not fd.name.startswith("google/protobuf/")]
    return files, ours


def file_protos(modules, rename=None):
    import importlib
    from google.protobuf import descriptor_pb2

    seen, out = set(), []

    def add(fdesc):
        if fdesc.name in seen:
            return
        seen.add(fdesc.name)
        for dep in fdesc.dependencies:
            add(dep)
        p = descriptor_pb2.FileDescriptorProto()
        fdesc.CopyToProto(p)
        if rename:
            rename(p)
        out.append(p)

    for m in modules:
        add(importlib.import_module(m).DESCRIPTOR)
    return out


def tb_to_tf(fp):
    """Map tensorboard's copy of TF core protos back to TF names."""
    base = fp.name.replace("tensorboard/compat/proto/", "")
    folder = "protobuf" if base in ("meta_graph.proto", "struct.proto", "saver.proto",
                                    "saved_object_graph.proto", "trackable_object_graph.proto") else "framework"
    fp.name = "tensorflow/core/%s/%s" % (folder, base)
    if fp.package == "tensorboard":
        fp.package = "tensorflow"

    def fix_msg(m):
        for f in m.field:
            if f.type_name.startswith(".tensorboard."):
                f.type_name = ".tensorflow." + f.type_name[len(".tensorboard."):]
        for n in m.nested_type:
            fix_msg(n)

    for m in fp.message_type:
        fix_msg(m)
    for s in fp.service:
        for me in s.method:
            for attr in ("input_type", "output_type"):
                v = getattr(me, attr)
                if v.startswith(".tensorboard."):
                    setattr(me, attr, ".tensorflow." + v[len(".tensorboard."):])


class Index:
    """Full name -> (kind, proto, file) for messages, enums, services."""

    def __init__(self, files):
        self.types = {}
        self.by_file = {}
        for fp in files:
            pkg = fp.package
            tops = self.by_file.setdefault(fp.name, [])
            for m in fp.message_type:
                full = pkg + "." + m.name if pkg else m.name
                tops.append(full)
                self._msg(m, full, fp.name)
            for e in fp.enum_type:
                full = pkg + "." + e.name if pkg else e.name
                tops.append(full)
                self.types[full] = ("enum", e, fp.name)
            for s in fp.service:
                full = pkg + "." + s.name if pkg else s.name
                tops.append(full)
                self.types[full] = ("service", s, fp.name)

    def _msg(self, m, full, fname):
        self.types[full] = ("message", m, fname)
        for n in m.nested_type:
            self._msg(n, full + "." + n.name, fname)
        for e in m.enum_type:
            self.types[full + "." + e.name] = ("enum", e, fname)


# ----------------------------------------------------------------------------
# Comparison


class Report:
    def __init__(self):
        self.errors, self.omitted, self.newer, self.notes = [], [], [], []
        self.counts = dict(messages=0, fields=0, enums=0, values=0, services=0, methods=0)


def is_packed(f, syntax):
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
    if f.label != F.LABEL_REPEATED or f.type in (F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_MESSAGE, F.TYPE_GROUP):
        return False
    if f.options.HasField("packed"):
        return f.options.packed
    return syntax == "proto3"


def default_json_name(name):
    """protoc's default JSON name: drop '_' and upper-case the next char."""
    out, up = [], False
    for ch in name:
        if ch == "_":
            up = True
        elif up:
            out.append(ch.upper())
            up = False
        else:
            out.append(ch)
    return "".join(out)


def field_sig(f, m, syntax):
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
    oneof = None
    if f.HasField("oneof_index") and not f.proto3_optional:
        oneof = m.oneof_decl[f.oneof_index].name
    return {
        "name": f.name,
        "number": f.number,
        "type": F.Type.Name(f.type),
        "type_name": f.type_name,
        "label": F.Label.Name(f.label),
        "proto3_optional": f.proto3_optional,
        "oneof": oneof,
        # generated Python stubs only keep explicit json_names; protoc's
        # descriptor set always fills it in. Compare the effective value.
        "json_name": f.json_name or default_json_name(f.name),
        "packed": is_packed(f, syntax),
    }


def compare_message(full, ours, prim, sec, syn_o, syn_p, rep):
    """ours/prim/sec are DescriptorProto (prim or sec may be None)."""
    rep.counts["messages"] += 1
    ref = prim if prim is not None else sec
    src = "official" if prim is not None else "newer-upstream"
    if prim is None:
        rep.newer.append("message %s (only in the newer upstream copy)" % full)

    def by_num(msg):
        return {f.number: f for f in msg.field} if msg is not None else {}

    pnum, snum = by_num(prim), by_num(sec)
    for f in ours.field:
        rep.counts["fields"] += 1
        fname = "%s.%s" % (full, f.name)
        of, omsg, osyn = pnum.get(f.number), prim, syn_p
        if of is None and f.number in snum:
            of, omsg, osyn = snum[f.number], sec, "proto3"
            rep.newer.append("field %s = %d (only in the newer upstream copy)" % (fname, f.number))
        if of is None:
            rep.errors.append("%s = %d: no such field number in the %s definition" % (fname, f.number, src))
            continue
        a = field_sig(f, ours, syn_o)
        b = field_sig(of, omsg, osyn)
        for k in a:
            if a[k] != b[k]:
                rep.errors.append("%s: %s differs: ours=%r official=%r" % (fname, k, a[k], b[k]))
        if f.options.deprecated != of.options.deprecated:
            rep.notes.append("%s: deprecated option differs (ours=%s)" % (fname, f.options.deprecated))
    onum = by_num(ours)
    for of in ref.field:
        if of.number not in onum:
            key = "%s.%s" % (full, of.name)
            if key in ALLOWED_OMISSIONS:
                rep.omitted.append("field %s = %d" % (key, of.number))
            else:
                rep.errors.append("field %s = %d is missing from ours" % (key, of.number))
    # our reserved numbers must not hide an official field
    for r in ours.reserved_range:
        for n in range(r.start, r.end):
            if n in pnum or n in snum:
                rep.errors.append("%s: we reserve %d but the official message uses it" % (full, n))
    for r in ref.reserved_range:
        for n in range(r.start, r.end):
            if n not in onum and not any(x.start <= n < x.end for x in ours.reserved_range):
                rep.notes.append("%s: official reserves %d, ours does not" % (full, n))


def compare_enum(full, ours, prim, sec, rep):
    rep.counts["enums"] += 1
    pval = {v.name: v.number for v in prim.value} if prim is not None else {}
    sval = {v.name: v.number for v in sec.value} if sec is not None else {}
    if prim is None:
        rep.newer.append("enum %s (only in the newer upstream copy)" % full)
    newer = []
    for v in ours.value:
        rep.counts["values"] += 1
        if v.name in pval:
            ref = pval[v.name]
        elif v.name in sval:
            ref = sval[v.name]
            newer.append("%s=%d" % (v.name, v.number))
        else:
            rep.errors.append("enum %s: value %s = %d not in the official definition" % (full, v.name, v.number))
            continue
        if ref != v.number:
            rep.errors.append("enum %s: %s = %d, official = %d" % (full, v.name, v.number, ref))
    if newer:
        rep.newer.append("enum %s values %s (only in the newer upstream copy)" % (full, ", ".join(newer)))
    ours_names = {v.name for v in ours.value}
    ref = pval or sval
    for name, num in sorted(ref.items(), key=lambda kv: kv[1]):
        if name not in ours_names:
            rep.errors.append("enum %s: value %s = %d missing from ours" % (full, name, num))


def compare_service(full, ours, off, rep):
    rep.counts["services"] += 1
    om = {m.name: m for m in ours.method}
    fm = {m.name: m for m in off.method}
    for name in sorted(set(om) | set(fm)):
        if name not in fm:
            rep.errors.append("service %s: extra method %s" % (full, name))
            continue
        if name not in om:
            rep.errors.append("service %s: method %s missing" % (full, name))
            continue
        rep.counts["methods"] += 1
        a, b = om[name], fm[name]
        for k in ("input_type", "output_type", "client_streaming", "server_streaming"):
            if getattr(a, k) != getattr(b, k):
                rep.errors.append("/%s/%s: %s ours=%r official=%r" % (full, name, k, getattr(a, k), getattr(b, k)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setup", action="store_true", help="(re)create %s first" % os.path.relpath(VENV, ROOT))
    ap.add_argument("-v", "--verbose", action="store_true", help="list omitted / newer-upstream items and notes")
    args = ap.parse_args()

    if args.setup and os.environ.get("PROTOCHECK_REEXEC") != "1":
        setup_venv()
    if not have_deps():
        if os.path.exists(VENV_PY) and os.environ.get("PROTOCHECK_REEXEC") != "1":
            env = dict(os.environ, PROTOCHECK_REEXEC="1")
            os.execve(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:], env)
        print("missing dependencies; run: %s --setup" % os.path.relpath(__file__, ROOT), file=sys.stderr)
        sys.exit(2)

    import warnings
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory(prefix="protocheck-") as tmp:
        files, ours_files = compile_ours(tmp)
    prim_files = file_protos(OFFICIAL_MODULES)
    sec_files = file_protos(SECONDARY_MODULES, rename=tb_to_tf)

    ours = Index(ours_files)
    prim = Index(prim_files)
    sec = Index(sec_files)
    syntax_o = {fp.name: fp.syntax or "proto2" for fp in ours_files}
    syntax_p = {fp.name: fp.syntax or "proto2" for fp in prim_files}
    rep = Report()

    for fp in ours_files:
        if fp.syntax != "proto3":
            rep.errors.append("%s: syntax is %r, expected proto3" % (fp.name, fp.syntax))

    # 1. everything we define must exist upstream and match
    for full, (kind, o, fname) in sorted(ours.types.items()):
        p = prim.types.get(full)
        s = sec.types.get(full)
        if p is None and s is None:
            rep.errors.append("%s %s (%s) does not exist in the official definitions" % (kind, full, fname))
            continue
        pk = p[0] if p else s[0]
        if pk != kind:
            rep.errors.append("%s is a %s in ours but a %s officially" % (full, kind, pk))
            continue
        if kind == "message":
            compare_message(full, o, p[1] if p else None, s[1] if s else None,
                            syntax_o[fname], syntax_p.get(p[2]) if p else "proto3", rep)
        elif kind == "enum":
            compare_enum(full, o, p[1] if p else None, s[1] if s else None, rep)
        else:
            compare_service(full, o, (p or s)[1], rep)

    # 1b. top-level types sit in the file with the original path (so imports
    #     look like upstream), and files keep the original package
    top_o = {}
    for fp in ours_files:
        for m in list(fp.message_type) + list(fp.enum_type) + list(fp.service):
            top_o[(fp.package + "." if fp.package else "") + m.name] = fp.name
    for full, ofile in sorted(top_o.items()):
        ref = prim.types.get(full) or sec.types.get(full)
        if ref is None:
            continue
        want = FILE_RENAMES.get(ref[2], ref[2])
        if ofile != want:
            rep.errors.append("%s is defined in %s, expected in %s" % (full, ofile, want))

    # 2. everything required must exist in ours
    required = set(REQUIRED_TYPES)
    for fname, want in REQUIRED_FILES.items():
        tops = prim.by_file.get(fname)
        if tops is None:
            rep.errors.append("official file %s not loaded" % fname)
            continue
        required |= set(tops) if want == "*" else set(want)
    stack = sorted(required)
    seen = set()
    while stack:
        full = stack.pop()
        if full in seen:
            continue
        seen.add(full)
        if full not in ours.types:
            if full in ALLOWED_OMISSIONS:
                rep.omitted.append("%s %s" % (prim.types[full][0], full))
            else:
                rep.errors.append("%s is missing from ours" % full)
            continue
        kind, p, _ = prim.types[full]
        if kind == "message":
            for n in p.nested_type:
                stack.append(full + "." + n.name)
            for e in p.enum_type:
                stack.append(full + "." + e.name)
    for svc in REQUIRED_SERVICES:
        if svc not in ours.types:
            rep.errors.append("service %s missing" % svc)

    # trimmed official files: top-level items we do not define
    for fname, want in REQUIRED_FILES.items():
        if want != "*":
            for full in prim.by_file.get(fname, []):
                if full not in ours.types:
                    rep.omitted.append("%s %s (trimmed from %s)" % (prim.types[full][0], full, fname))

    # ---- summary
    c = rep.counts
    print("check_protos: %d .proto files compiled from proto/" % len(files))
    print("  compared %d messages / %d fields, %d enums / %d values, %d services / %d methods"
          % (c["messages"], c["fields"], c["enums"], c["values"], c["services"], c["methods"]))
    print("  omitted (allowed): %d   newer-than-2.11 TF items checked against tensorboard 2.21 copy: %d   notes: %d"
          % (len(rep.omitted), len(rep.newer), len(rep.notes)))
    if args.verbose:
        for title, items in (("omitted", rep.omitted), ("newer upstream", rep.newer), ("note", rep.notes)):
            for it in items:
                print("  [%s] %s" % (title, it))
    if rep.errors:
        print("FAIL: %d mismatch(es):" % len(rep.errors))
        for e in rep.errors:
            print("  - " + e)
        sys.exit(1)
    print("OK: every message, field, enum value and service method we define matches the official descriptors")


if __name__ == "__main__":
    main()
