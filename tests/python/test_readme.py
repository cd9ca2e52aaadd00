"""README.md stays true: its configuration reference is what `tensorport serve --help` says,
and its curl and shared-memory examples run against a real server."""

from __future__ import annotations

import importlib.util
import re
import subprocess

import pytest

from tensorport_server import REPO

README = REPO / "README.md"


def _config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", REPO / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_matches_help():
    reference = _config_reference()
    block = reference.readme_block(README.read_text())
    assert block is not None, "README.md lost its configuration reference block"
    assert block == reference.table(reference.help_text()), \
        "README.md disagrees with `tensorport serve --help`: run python scripts/config_reference.py --write"


def _examples() -> list[str]:
    """Shell blocks of the README that talk to the server on localhost:8501."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    return [b for b in blocks if "localhost:8501" in b]


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_examples_run(rest_url, index):
    script = _examples()[index]
    host = rest_url.split("://", 1)[1]
    # -f: an HTTP error fails the example instead of printing an error body.
    script = script.replace("localhost:8501", host).replace("curl -s ", "curl -sf ")
    run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, f"{script}\n--- output ---\n{run.stdout}\n{run.stderr}"
