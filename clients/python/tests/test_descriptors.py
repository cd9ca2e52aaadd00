"""The packaged descriptor set is what scripts/gen_descriptors.py makes from proto/ now."""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path

from google.protobuf import descriptor_pb2

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen_descriptors.py"


def test_descriptor_set_is_current(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_descriptors", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = tmp_path / "fresh.binpb"
    module.generate(fresh)
    packaged = resources.files("tensorport_client").joinpath("_descriptors.binpb").read_bytes()
    parse = descriptor_pb2.FileDescriptorSet.FromString
    assert parse(packaged) == parse(fresh.read_bytes()), \
        "proto/ changed: run python clients/python/scripts/gen_descriptors.py"
