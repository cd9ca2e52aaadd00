"""Starts a real tensorport binary on free loopback ports, for any test suite that needs one
(this folder's, the OpenAPI checks, and the client packages' tests under clients/).

The binary comes from $TENSORPORT_BIN, else from cargo's target directory (as `cargo metadata`
reports it, so CARGO_TARGET_DIR and build.target-dir are honoured): <target>/debug/tensorport.
It runs as

    tensorport serve --model-dir DIR --host 127.0.0.1 --grpc-port 0 --rest-port 0 [EXTRA...]

and the ports are read back from the line `listening grpc=HOST:PORT rest=HOST:PORT` that it
writes to stderr as soon as it has bound them. The models load after that; by default
`start_server` also waits for the line `initial load settled`, so that tests see them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_MODELS = REPO / "examples" / "models"
TEST_MODELS = REPO / "tests" / "models"

STARTUP_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 10
LISTENING_RE = re.compile(r"listening grpc=(\S+) rest=(\S+)")
SETTLED_RE = re.compile(r"initial load settled")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes a logger may add


class ServerStartError(RuntimeError):
    """The server exited or never said where it listens; the message carries its log."""


@dataclass
class Server:
    process: subprocess.Popen
    rest_url: str
    grpc_target: str
    log_path: Path
    model_dir: Path

    def log(self) -> str:
        return read_log(self.log_path)

    def stop(self) -> None:
        stop_process(self.process)


def read_log(path: Path) -> str:
    try:
        return ANSI_RE.sub("", path.read_text(errors="replace"))
    except FileNotFoundError:
        return "<no log>"


@functools.cache
def cargo_target_dir() -> Path:
    """Where cargo puts build outputs for this workspace (CARGO_TARGET_DIR, build.target-dir,
    or <repo>/target), as cargo itself says."""
    try:
        out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO,
                             capture_output=True, text=True, check=True, timeout=60).stdout
        return Path(json.loads(out)["target_directory"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def server_binary() -> Path:
    # A relative TENSORPORT_BIN (as `make test` passes) is relative to the current directory.
    explicit = os.environ.get("TENSORPORT_BIN")
    if explicit:
        return Path(explicit).absolute()
    return cargo_target_dir() / "debug" / "tensorport"


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=SHUTDOWN_TIMEOUT_S)


def link_models(model_dir: Path, bases=(EXAMPLE_MODELS, TEST_MODELS)) -> Path:
    """Fills `model_dir` with symlinks to every model folder under `bases`."""
    for base in bases:
        for entry in sorted(base.iterdir()):
            if entry.is_dir():
                (model_dir / entry.name).symlink_to(entry.resolve(), target_is_directory=True)
    return model_dir


def start_server(model_dir: Path | None, log_path: Path, extra_args: list[str] | None = None,
                 host: str = "127.0.0.1", prefix: list[str] | None = None,
                 preexec_fn=None, wait_for_models: bool = True,
                 program: list[str] | None = None, cwd: Path | None = None) -> Server:
    """Starts the binary serving `model_dir` and waits until it listens and (unless
    `wait_for_models` is false) until the load at start-up has settled. `prefix` is a command
    that execs the rest (e.g. `prlimit ... --`), so the process is still the server's:
    prefer it to `preexec_fn`, which runs Python in the forked child before the binary starts
    and, once this process has used gRPC, can abort that child (grpcio's fork handlers
    restart its poller threads there, and the child closes the poller's descriptor before
    exec: "Epoll1Poller ... epoll_wait error: Bad file descriptor"). With `model_dir` None,
    neither `--model-dir` nor the port flags are passed: the caller names the models and
    ports in `extra_args` (as a TF Serving command line does).
    `program` replaces `tensorport serve ...` with other first words (`tensorport tritonserver`,
    or a symlink named `tensorflow_model_server`): then only `extra_args` follow. The server
    runs in `cwd` (default: the repository root), where its relative paths start."""
    binary = server_binary()
    if not binary.exists():
        raise ServerStartError(f"server binary {binary} not found: build it (cargo build) or set TENSORPORT_BIN")
    standard = ([] if model_dir is None
                else ["--model-dir", str(model_dir), "--grpc-port", "0", "--rest-port", "0"])
    ours = [str(binary), "serve", *standard, "--host", host]
    cmd = [*(prefix or []), *(program or ours), *(extra_args or [])]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env=dict(os.environ), cwd=cwd or REPO, preexec_fn=preexec_fn)

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    match = None
    settled = not wait_for_models

    def look() -> None:
        nonlocal match, settled
        log = read_log(log_path)
        match = match or LISTENING_RE.search(log)
        settled = settled or bool(SETTLED_RE.search(log))

    while time.monotonic() < deadline:
        look()
        if (match and settled) or proc.poll() is not None:
            break
        time.sleep(0.05)
    # One last look: the process may have written the line just before exiting.
    look()
    if not (match and settled):
        stop_process(proc)
        why = (f"exited with code {proc.returncode}" if proc.returncode is not None
               else f"did not listen and settle its models within {STARTUP_TIMEOUT_S}s")
        raise ServerStartError(f"tensorport {why}\ncommand: {' '.join(cmd)}\n--- server log ---\n{read_log(log_path)}")

    grpc_addr, rest_addr = match.group(1), match.group(2)
    return Server(process=proc, rest_url=f"http://{rest_addr}", grpc_target=grpc_addr,
                  log_path=log_path, model_dir=model_dir)
