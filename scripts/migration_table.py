#!/usr/bin/env python3
"""Writes docs/MIGRATION.md, the migration corpus' table, from what the corpus test observed.

Runs tests/python/test_migration_corpus.py with MIGRATION_OBSERVATIONS set (so each entry
writes what its server did) and a JUnit report (each check's result), then lists every entry
(its command line, where it comes from, what each model did, each check's result) and every
file of tests/migration/ (its source, and what the server did with it: loaded, the fields
applied, the fields and flags warned, refused, the client used).

Usage: .venv/bin/python scripts/migration_table.py [--out docs/MIGRATION.md]
       (TENSORPORT_BIN picks the server binary, as for the tests; build it with every backend,
       or the TensorFlow and TorchScript entries are skipped)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
from migration_corpus import APPLIED_FIELDS, CORPUS, manifest, read_config, unapplied_fields  # noqa: E402

ASPECTS = {"test_each_model_serves_or_is_refused_as_its_peer_would": "models",
           "test_clients_get_the_answers_the_peer_gives": "clients",
           "test_nothing_set_is_dropped_without_a_log_line": "log"}
# The TF Serving text protos' fields tensorport applies (README, "models.config" and
# "Batching parameters").
TFS_APPLIED = {"model_config_list", "config", "name", "base_path", "model_platform", "model_version_policy",
               "specific", "versions", "latest", "num_versions", "all", "version_labels", "key", "value",
               "max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
               "allowed_batch_sizes"}


def run_tests(observations: Path, junit: Path) -> None:
    env = dict(os.environ, MIGRATION_OBSERVATIONS=str(observations))
    subprocess.run([sys.executable, "-m", "pytest", "tests/python/test_migration_corpus.py", "-q",
                    f"--junitxml={junit}"], cwd=REPO, env=env, check=False)


def results(junit: Path) -> dict[tuple[str, str], str]:
    """(entry id, aspect) -> "passes", "fails today: ...", "known bug: ..." or "skipped: ..."."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        found = re.match(r"(\w+)\[(.+)\]", case.get("name", ""))
        if not found or found.group(1) not in ASPECTS:
            continue
        verdict = "passes"
        for child in case:
            message = (child.get("message") or "").replace("\n", " ")
            if child.tag == "skipped" and "known bug" in message:
                verdict = "known bug: " + message.split("known bug: ", 1)[1]
            elif child.tag == "skipped":
                verdict = "skipped: " + message.removeprefix("Skipped: ")
            elif child.tag in ("failure", "error"):
                verdict = "fails today: " + first_reason(child.get("message") or child.text or "")
        out[(found.group(2), ASPECTS[found.group(1)])] = verdict
    return out


def first_reason(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = lines[0] if lines else message
    text = re.sub(r"^AssertionError: ", "", text)
    return re.sub(r"/tmp/\S+?/files/", "<folder>/", text)[:300]


def sources() -> dict[str, str]:
    """Corpus file -> owner/name, from SOURCES.md."""
    repo, out = "", {}
    for line in (CORPUS / "SOURCES.md").read_text().splitlines():
        if line.startswith("## "):
            repo = line[3:].strip()
        found = re.match(r"\| `([^`]+)` \|", line)
        if found and repo:
            out[found.group(1)] = repo
    return out


def files_of(entry: dict) -> list[str]:
    names = list(entry.get("files", []))
    for source, _dest in entry["layout"]:
        path = CORPUS / source
        names += ([str(p.relative_to(CORPUS)) for p in sorted(path.rglob("*")) if p.is_file()]
                  if path.is_dir() else [source])
    return list(dict.fromkeys(names))


def laid_out(entry: dict, name: str) -> Path:
    """Where the entry lays corpus file `name` out (its path in the server's folder)."""
    for source, dest in entry["layout"]:
        if name == source:
            return Path(dest)
        if name.startswith(source + "/"):
            return Path(dest) / name[len(source) + 1:]
    return Path(name)


def text_fields(path: Path) -> list[str]:
    return sorted(set(re.findall(r"^\s*([a-z_]+)\s*[:{]", path.read_text(), re.MULTILINE)))


def describe(name: str, entry: dict, seen: dict) -> dict:
    """What the server did with one corpus file in one entry."""
    path, models = CORPUS / name, seen.get("models", {})
    warned_log = " ".join(seen.get("log", []))
    row = {"outcome": "", "applied": "", "warned": "", "refused": "", "client": ""}
    folder = laid_out(entry, name).parent.name
    if path.suffix == ".pbtxt" and folder in models:
        model = models[folder]
        config = read_config(path)
        set_fields = sorted({f.name for f, _ in config.ListFields()})
        row["outcome"] = model.get("outcome", "")
        row["applied"] = ", ".join(f for f in set_fields if f in APPLIED_FIELDS)
        silent = ([f for f in unapplied_fields(config) if f not in model["fields_warned"]]
                  if "fields_warned" in model else [])
        row["warned"] = "; ".join(filter(None, [sorted_parameters(model.get("config_warning", "")),
                                                 "not named: " + ", ".join(silent) if silent else ""]))
        row["refused"] = model.get("said", "").splitlines()[-1].split("error=", 1)[-1][:200] if model.get("outcome") == "refused" else ""
        row["client"] = "; ".join(model.get("client", [])) or model.get("client_error", "")
    elif path.suffix in (".yaml", ".yml"):
        row["outcome"] = "command line: " + " ".join(entry["command"])
        row["warned"] = ", ".join(seen.get("flags_warned", [])) or "none"
    elif path.suffix in (".config", ".txt", ".c") and "labels" not in path.name and path.name != "foo.txt":
        fields = text_fields(path)
        row["outcome"] = ", ".join(f"{m}: {v.get('outcome', '')}" for m, v in models.items())
        row["applied"] = ", ".join(f for f in fields if f in TFS_APPLIED)
        row["warned"] = ", ".join(f for f in fields if f not in TFS_APPLIED and f in warned_log)
        row["client"] = "; ".join(c for v in models.values() for c in v.get("client", []))
    else:
        row["outcome"] = "model data" if "labels" not in path.name else "labels"
    return row


def sorted_parameters(text: str) -> str:
    """The server names a config's parameters in no fixed order; the table sorts them."""
    return re.sub(r"parameters \(([^)]*)\)",
                  lambda m: "parameters (" + ", ".join(sorted(m.group(1).split(", "))) + ")", text)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def render(observed: dict, verdicts: dict) -> str:
    origin = sources()
    out = ["# The migration corpus", "",
           "Real configuration files and command lines from public Triton, TF Serving and KServe "
           "repositories (`tests/migration/`, each file's source in "
           "[tests/migration/SOURCES.md](../tests/migration/SOURCES.md)), each started the way its "
           "project starts it, under `tensorport tritonserver` or `tensorport tensorflow_model_server`, "
           "and checked with the clients their users have (`tritonclient` over HTTP and gRPC, TF Serving's "
           "Predict stubs and REST API). `tests/python/test_migration_corpus.py` runs them; this page is "
           "written from what that test observed by `scripts/migration_table.py`.", "",
           "Each entry has three checks: **models** (each model serves, or is refused naming why, as its "
           "peer would), **clients** (the peer's answers), **log** (every flag and config field set but not "
           "applied is named in the server's log). *fails today* is what a Triton or TF Serving user expects "
           "and tensorport does not do yet; *known bug* is a strict expected failure recorded in the manifest.", "",
           "## Entries", "",
           "| entry | command line (as its project writes it) | models | models check | clients check | log check |",
           "| --- | --- | --- | --- | --- | --- |"]
    for entry in manifest():
        seen = observed.get(entry["id"], {})
        models = "; ".join(f"{m}: {v.get('outcome', '?')}" for m, v in seen.get("models", {}).items())
        checks = [verdicts.get((entry["id"], a), "not run") for a in ("models", "clients", "log")]
        out.append(f"| {entry['id']} | `{' '.join(entry['command'])}` | "
                   f"{cell(models)} | " + " | ".join(cell(c) for c in checks) + " |")
    out += ["", "Where each command line comes from:", ""]
    out += [f"- {entry['id']}: {entry['command_source']}" for entry in manifest()]
    out += ["", "## Files", "",
            "| file | source | entry | outcome | fields applied | warned | refused | client |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in manifest():
        seen = observed.get(entry["id"], {})
        for name in files_of(entry):
            row = describe(name, entry, seen) if seen else {"outcome": "not run (see the entry's checks)"}
            out.append(f"| `{name}` | {origin.get(name, '')} | {entry['id']} | " + " | ".join(
                cell(row.get(k, "")) for k in ("outcome", "applied", "warned", "refused", "client")) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "MIGRATION.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_tests(Path(tmp) / "observed", Path(tmp) / "junit.xml")
        observed = {p.stem: json.loads(p.read_text()) for p in sorted((Path(tmp) / "observed").glob("*.json"))}
        args.out.write_text(render(observed, results(Path(tmp) / "junit.xml")))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
