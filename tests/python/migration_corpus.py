"""The migration corpus (tests/migration/): real configuration files and command lines from
public repositories, laid out in a temporary folder and started the way their projects start
them. This module reads tests/migration/manifest.json, lays an entry out, turns its command
line into one that runs here, and says what the server must have logged.

An entry's command line is kept as its project writes it; here only its paths change (each
container path in `paths` becomes the temporary folder's) and its ports: Triton's three get 0
(tensorport picks free ones), TF Serving's get free ports, since its port 0 turns an API off.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "migration"
MAKE_MODELS = REPO / "scripts" / "make_migration_models.py"
PEER_FLAGS = {
    "tritonserver": REPO / "src" / "config" / "peers" / "tritonserver_flags.txt",
    "tensorflow_model_server": REPO / "src" / "config" / "peers" / "tensorflow_model_server_flags.txt",
}
TRITON_PORTS = ("--http-port", "--grpc-port", "--metrics-port")

# What config.pbtxt says that Triton applies and tensorport maps (README, "config.pbtxt"):
# anything else a file sets must be named in the log.
APPLIED_FIELDS = {"name", "platform", "backend", "max_batch_size", "input", "output",
                  "dynamic_batching", "instance_group", "version_policy", "default_model_filename",
                  "model_warmup"}
# The ONNX Runtime backend's parameters tensorport applies ([runtime]: threads and session
# options).
APPLIED_PARAMETERS = {"intra_op_thread_count", "inter_op_thread_count", "execution_mode",
                      "enable_mem_arena", "enable_mem_pattern",
                      "session.use_device_allocator_for_initializers",
                      "session.intra_op.allow_spinning", "session.inter_op.allow_spinning"}
# `optimization` fields tensorport applies ([runtime] graph_optimization).
APPLIED_OPTIMIZATION_FIELDS = {"graph"}
APPLIED_TENSOR_FIELDS = {"name", "data_type", "dims", "reshape", "label_filename"}
APPLIED_BATCHING_FIELDS = {"preferred_batch_size", "max_queue_delay_microseconds",
                           "default_queue_policy", "priority_levels"}


def manifest() -> list[dict]:
    return json.loads((CORPUS / "manifest.json").read_text())["entries"]


def peer_of(entry: dict) -> str:
    return Path(entry["command"][0]).name


def _pattern(key: str) -> re.Pattern:
    # A container path is replaced where a value starts: after `=`, a quote or a comma.
    return re.compile(r"(?:^|(?<=[=\"',]))" + re.escape(key) + r"(?=$|[/\"',])")


def substitute(text: str, mapping: dict[str, str]) -> str:
    for key in sorted(mapping, key=len, reverse=True):
        text = _pattern(key).sub(lambda _m, value=mapping[key]: value, text)
    return text


def lay_out(entry: dict, root: Path) -> dict[str, str]:
    """Copies the entry's files into `root`, points its paths there, writes the models its
    configs need; returns the container path -> folder path mapping."""
    for source, dest in entry["layout"]:
        src, dst = CORPUS / source, root / dest
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy(src, dst)
    mapping = {key: str(root / value) for key, value in entry["paths"].items()}
    for name in entry.get("rewrite", []):
        path = root / name
        path.write_text(substitute(path.read_text(), mapping))
    subprocess.run([sys.executable, str(MAKE_MODELS), str(root)], check=True,
                   capture_output=True, text=True, timeout=120)
    return mapping


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _set_flag(args: list[str], flag: str, value: str, add: bool) -> list[str]:
    out, found, skip = [], False, False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith(flag + "="):
            out.append(f"{flag}={value}")
            found = True
        elif arg == flag and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append(f"{flag}={value}")
            found, skip = True, True
        else:
            out.append(arg)
    if add and not found:
        out.append(f"{flag}={value}")
    return out


def runnable_args(entry: dict, mapping: dict[str, str]) -> list[str]:
    """The entry's arguments (after the program name) with this folder's paths and ports."""
    args = [substitute(arg, mapping) for arg in entry["command"][1:]]
    if peer_of(entry) == "tritonserver":
        for flag in TRITON_PORTS:
            args = _set_flag(args, flag, "0", add=True)
    else:
        args = _set_flag(args, "--port", str(free_port()), add=True)
        args = _set_flag(args, "--rest_api_port", str(free_port()), add=False)
    return args


@functools.cache
def flag_actions(peer: str) -> dict[str, str]:
    actions = {}
    for line in PEER_FLAGS[peer].read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _kind, action = line.split()[:3]
            actions[name] = action
    return actions


def unapplied_flags(peer: str, args: list[str]) -> list[str]:
    """The flags of `args` that the peer's flag list says are accepted but not applied."""
    flags = []
    for arg in args:
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("--") and flag_actions(peer).get(name) == "warn":
            flags.append("--" + name)
    return flags


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def unapplied_fields(config: model_config_pb2.ModelConfig) -> list[str]:
    """What a config.pbtxt sets beyond what tensorport applies: each must be in the log."""
    fields = [f.name for f, _ in config.ListFields() if f.name not in APPLIED_FIELDS]
    if set(config.parameters) <= APPLIED_PARAMETERS and "parameters" in fields:
        fields.remove("parameters")
    if "optimization" in fields and all(f.name in APPLIED_OPTIMIZATION_FIELDS
                                        for f, _ in config.optimization.ListFields()):
        fields.remove("optimization")
    for tensor in [*config.input, *config.output]:
        fields += [f.name for f, _ in tensor.ListFields() if f.name not in APPLIED_TENSOR_FIELDS]
    if config.HasField("dynamic_batching"):
        fields += [f.name for f, _ in config.dynamic_batching.ListFields()
                   if f.name not in APPLIED_BATCHING_FIELDS]
    if any(g.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU or g.gpus for g in config.instance_group):
        fields.append("KIND_GPU")
    return sorted(set(fields))


def model_folder(root: Path, name: str) -> Path | None:
    found = [p.parent for p in root.rglob("config.pbtxt") if p.parent.name == name]
    return found[0] if found else None


def log_lines_about(log: str, model: str) -> list[str]:
    return [line for line in log.splitlines() if f'model="{model}"' in line or f"model={model} " in line
            or line.endswith(f"model={model}")]
