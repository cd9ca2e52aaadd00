"""Checks deploy/kserve/ offline against KServe's own API types.

No PyPI package ships KServe's CRD schemas, but the KServe SDK wheel (`kserve`) ships the
Python models generated from them: each class lists its fields (`attribute_map`: JSON name)
and their types (`openapi_types`). This script reads those tables from the wheel without
importing it (the SDK's dependencies are not needed), walks each manifest from its kind's
type down, and fails on an unknown field or a value of the wrong type. The Kubernetes types
KServe embeds (containers, resources, metadata) are checked with kubernetes-validate's
schemas for the cluster version given, strictly, by placing them in a Pod.

    python scripts/check_kserve_manifests.py KSERVE_WHEEL K8S_VERSION MANIFEST...
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from pathlib import Path

import kubernetes_validate
import yaml

KINDS = {
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}
SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def load_types(wheel: Path) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Class name -> (JSON name -> type, JSON name -> attribute) for every KServe model."""
    types = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith("kserve/models/v1") or not name.endswith(".py"):
                continue
            tree = ast.parse(z.read(name))
            for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                tables = {}
                for stmt in cls.body:
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                        if stmt.targets[0].id in ("openapi_types", "attribute_map"):
                            tables[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                if len(tables) == 2:
                    by_json = {tables["attribute_map"][a]: t for a, t in tables["openapi_types"].items()}
                    types[cls.name] = by_json
    return types


class Checker:
    def __init__(self, types, k8s_version: str):
        self.types = types
        self.k8s_version = k8s_version
        self.errors: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def check(self, value, type_name: str, where: str) -> None:
        if type_name in SCALARS:
            if not isinstance(value, SCALARS[type_name]) or (type_name == "int" and isinstance(value, bool)):
                self.fail(where, f"expected {type_name}, got {type(value).__name__}")
            return
        inner = re.fullmatch(r"list\[(.+)\]", type_name)
        if inner:
            if not isinstance(value, list):
                return self.fail(where, "expected a list")
            for i, item in enumerate(value):
                self.check(item, inner.group(1), f"{where}[{i}]")
            return
        inner = re.fullmatch(r"dict\(str, (.+)\)", type_name)
        if inner:
            if not isinstance(value, dict):
                return self.fail(where, "expected a mapping")
            for key, item in value.items():
                self.check(item, inner.group(1), f"{where}.{key}")
            return
        if type_name in self.types:
            if not isinstance(value, dict):
                return self.fail(where, f"expected a {type_name} mapping")
            fields = self.types[type_name]
            for key, item in value.items():
                if key not in fields:
                    self.fail(where, f"unknown field '{key}' for {type_name}")
                else:
                    self.check(item, fields[key], f"{where}.{key}")
            return
        self.check_kubernetes(value, type_name, where)

    def check_kubernetes(self, value, type_name: str, where: str) -> None:
        """A Kubernetes type inside a KServe one, checked in a Pod by kubernetes-validate."""
        container = {"name": "c", "image": "i"}
        if type_name == "V1Container":
            container = value
        elif type_name == "V1ResourceRequirements":
            container = {**container, "resources": value}
        elif type_name == "V1ObjectMeta":
            if not isinstance(value, dict) or not value.get("name"):
                self.fail(where, "metadata needs a name")
            return
        else:
            self.fail(where, f"{type_name} is not checked by this script: extend it")
            return
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"},
               "spec": {"containers": [container]}}
        try:
            kubernetes_validate.validate(pod, self.k8s_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            self.fail(where, f"{type_name}: {err.message} at {list(err.path)}")


def main(argv: list[str]) -> int:
    wheel, k8s_version, *manifests = argv
    types = load_types(Path(wheel))
    checker = Checker(types, k8s_version)
    for manifest in manifests:
        for doc in yaml.safe_load_all(Path(manifest).read_text()):
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key not in KINDS:
                checker.fail(manifest, f"not a KServe resource this script knows: {key}")
                continue
            checker.check(doc, KINDS[key], f"{manifest}:{doc['kind']}")
    for error in checker.errors:
        print(error, file=sys.stderr)
    if not checker.errors:
        print(f"{len(manifests)} KServe manifests match the KServe API types of {Path(wheel).name}")
    return 1 if checker.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
