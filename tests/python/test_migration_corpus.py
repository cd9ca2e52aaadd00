"""The migration corpus: real Triton model repositories, TF Serving model lists and batching
files, Kubernetes and Docker command lines from public repositories (tests/migration/, each
file's source in tests/migration/SOURCES.md), started the way their projects start them
(`tensorport tritonserver ...`, `tensorport tensorflow_model_server ...`) and checked with the
clients their users have.

For every entry of tests/migration/manifest.json, on one server started from a temporary copy:
- each model serves, or is refused with a message naming why, as its peer would;
- the entry's clients get the answers the peer gives (tritonclient HTTP and gRPC with the
  declared shapes, TF Serving's Predict stubs and REST with TF Serving's test values);
- nothing the files or the command line set is dropped without a log line: every flag the
  peer's flag list marks as accepted-but-not-applied, every config.pbtxt field tensorport does
  not apply, and the entry's own expected warnings are named in the server's log.

With MIGRATION_OBSERVATIONS=DIR set, what each entry did is written to DIR/<id>.json, from
which scripts/migration_table.py writes docs/MIGRATION.md. An aspect an entry's `known_bugs`
names (start, models, clients, log) is a strict expected failure, with the bug as its reason.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from migration_clients import tfs_predict, triton_infer
from migration_corpus import (lay_out, log_lines_about, manifest, model_folder, peer_of,
                              read_config, runnable_args, unapplied_fields, unapplied_flags)
from tensorport_server import Server, ServerStartError, server_binary, start_server

ENTRIES = manifest()
NOT_APPLIED = "accepted but not applied"


@functools.cache
def backends() -> set[str]:
    out = subprocess.run([str(server_binary()), "--version"], capture_output=True, text=True,
                         timeout=60, check=False)
    found = re.search(r"backends: ([\w,]+)", out.stdout + out.stderr)
    return set(found.group(1).split(",")) if found else set()


@dataclass
class Started:
    entry: dict
    root: Path
    args: list[str]
    server: Server
    observed: dict = field(default_factory=dict)

    def model(self, name: str) -> dict:
        return self.observed.setdefault("models", {}).setdefault(name, {})


def record(started: Started) -> None:
    where = os.environ.get("MIGRATION_OBSERVATIONS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        started.observed.update(id=started.entry["id"], args=started.args)
        (Path(where) / f"{started.entry['id']}.json").write_text(json.dumps(started.observed, indent=1))


@pytest.fixture(scope="module", params=ENTRIES, ids=[e["id"] for e in ENTRIES])
def started(request, tmp_path_factory):
    entry = request.param
    missing = sorted(set(entry.get("requires", [])) - backends())
    if missing:
        pytest.skip(f"the server binary is built without {', '.join(missing)}")
    root = tmp_path_factory.mktemp(entry["id"])
    args = runnable_args(entry, lay_out(entry, root / "files"))
    try:
        server = start_server(None, root / "server.log", args, program=[str(server_binary()), peer_of(entry)])
    except ServerStartError as err:
        if "start" in entry.get("known_bugs", {}):
            pytest.xfail(f"known bug: {entry['known_bugs']['start']}")
        pytest.fail(str(err), pytrace=False)
    state = Started(entry, root / "files", args, server)
    try:
        yield state
    finally:
        server.stop()
        state.observed["log"] = [line for line in server.log().splitlines() if " WARN " in line or " ERROR " in line]
        record(state)


def refusal_text(started: Started, name: str, spec: dict) -> str:
    """What the server said about a model that does not serve: the load error (explicit mode)
    or its log lines."""
    said = ""
    if spec.get("load"):
        client = httpclient.InferenceServerClient(started.server.rest_url.removeprefix("http://"))
        try:
            client.load_model(name)
        except InferenceServerException as err:
            said = str(err)
        finally:
            client.close()
    lines = [l for l in log_lines_about(started.server.log(), name) if " ERROR " in l or " WARN " in l]
    # The folder's own path is left out: the message must name the reason, not the path.
    return "\n".join([said, *lines]).replace(str(started.root), "<folder>")


def is_ready(started: Started, name: str) -> bool:
    if peer_of(started.entry) == "tensorflow_model_server" and started.server.rest_url == "http://off":
        return True  # judged by Predict alone
    if peer_of(started.entry) == "tensorflow_model_server":
        status = requests.get(f"{started.server.rest_url}/v1/models/{name}", timeout=30)
        return status.status_code == 200 and any(
            v["state"] == "AVAILABLE" for v in status.json().get("model_version_status", []))
    client = httpclient.InferenceServerClient(started.server.rest_url.removeprefix("http://"))
    try:
        return client.is_model_ready(name)
    finally:
        client.close()


def expect_known_bug(request, started: Started, aspect: str) -> None:
    """An aspect the manifest records as failing for a known server bug is expected to fail,
    strictly: once the bug is fixed the test says so, and the note comes out of the manifest."""
    bug = started.entry.get("known_bugs", {}).get(aspect)
    if bug:
        request.node.add_marker(pytest.mark.xfail(reason=f"known bug: {bug}", strict=True))


def test_each_model_serves_or_is_refused_as_its_peer_would(request, started):
    expect_known_bug(request, started, "models")
    wrong = []
    for name, spec in started.entry["models"].items():
        seen = started.model(name)
        if spec["expect"] == "refused":
            said = refusal_text(started, name, spec)
            seen["outcome"] = "refused" if not is_ready(started, name) else "loaded"
            seen["said"] = said.strip()
            if seen["outcome"] != "refused":
                wrong.append(f"{name}: serves; its peer refuses it ({spec['message']})")
            elif spec["message"].lower() not in said.lower():
                wrong.append(f"{name}: refused without naming {spec['message']!r}: {said.strip()}")
            continue
        if spec.get("load"):
            client = httpclient.InferenceServerClient(started.server.rest_url.removeprefix("http://"))
            try:
                client.load_model(name)
            except InferenceServerException as err:
                wrong.append(f"{name}: load failed: {err}")
            finally:
                client.close()
        seen["outcome"] = "loaded" if is_ready(started, name) else "not loaded"
        if seen["outcome"] != "loaded":
            wrong.append(f"{name}: not ready: " + " | ".join(log_lines_about(started.server.log(), name)))
    assert not wrong, "\n".join(wrong)


def test_clients_get_the_answers_the_peer_gives(request, started):
    expect_known_bug(request, started, "clients")
    wrong = []
    for name, spec in started.entry["models"].items():
        if spec["expect"] != "serves":
            continue
        seen = started.model(name)
        try:
            if "triton" in spec.get("client", []):
                seen["client"] = triton_infer(started.server.rest_url, started.server.grpc_target,
                                              model_folder(started.root, name), spec)
            elif "tfs" in spec.get("client", []):
                seen["client"] = tfs_predict(started.server.grpc_target, started.server.rest_url, name, spec)
            else:
                seen["client"] = ["ready only (no request: the peer's scheduler supplies inputs)"]
        except Exception as err:  # noqa: BLE001 - each model's failure is reported, then the next runs
            seen["client_error"] = str(err).splitlines()[0][:300]
            wrong.append(f"{name}: {type(err).__name__}: {err}")
    assert not wrong, "\n".join(wrong)


def test_nothing_set_is_dropped_without_a_log_line(request, started):
    expect_known_bug(request, started, "log")
    log = started.server.log()
    warned = [line for line in log.splitlines() if " WARN " in line]
    missing = [w for w in started.entry.get("warnings", []) if not any(w in line for line in warned)]
    flags_line = " ".join(line for line in warned if NOT_APPLIED in line)
    flags = unapplied_flags(peer_of(started.entry), started.args)
    started.observed["flags_warned"] = flags
    missing += [f"flag {flag}" for flag in flags if flag not in flags_line]
    for name, spec in started.entry["models"].items():
        started.model(name)["config_warning"] = " ".join(
            line.split("ignored=", 1)[1] for line in log_lines_about(log, name) if "ignored=" in line)
        folder = model_folder(started.root, name)
        if spec["expect"] != "serves" or folder is None:
            continue
        fields = unapplied_fields(read_config(folder / "config.pbtxt"))
        about = " ".join(line for line in log_lines_about(log, name) if " WARN " in line)
        started.model(name)["fields_warned"] = [f for f in fields if f in about]
        missing += [f"{name}: config.pbtxt field {f}" for f in fields if f not in about]
    assert not missing, "set but not named in the log: " + "; ".join(missing)
