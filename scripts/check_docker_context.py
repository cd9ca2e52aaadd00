"""Checks, without a Docker daemon, that a Dockerfile copies enough of the repository for
cargo to build there: every file its COPY lines take from the build context (minus what
.dockerignore leaves out) is copied into an empty folder, where `cargo metadata --locked
--offline` must resolve the whole workspace and every target's source file must exist.

Usage: python scripts/check_docker_context.py [deploy/Dockerfile]   (exit 1 with the reason)
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[str] = []
    current = ""
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        out.append(current + stripped)
        current = ""
    if current:
        out.append(current)
    return out


def context_sources(dockerfile: str) -> list[str]:
    """The build-context paths that COPY / ADD instructions take (not those from other stages)."""
    sources: list[str] = []
    for instruction in instructions(dockerfile):
        words = shlex.split(instruction)
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]) or len(args) < 2:
            continue
        sources.extend(args[:-1])
    return sources


def ignored(relative: str, patterns: list[str]) -> bool:
    parts = relative.split("/")
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatch(relative, pattern) or any(fnmatch.fnmatch(p, bare) for p in parts):
            return True
    return False


def copy_context(sources: list[str], dest: Path, patterns: list[str]) -> None:
    for source in sources:
        path = REPO / source
        if not path.exists():
            raise SystemExit(f"COPY {source}: not in the build context")
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            relative = file.relative_to(REPO).as_posix()
            if ignored(relative, patterns):
                continue
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)


def check(dockerfile_path: Path) -> list[str]:
    """What is wrong with the build context the Dockerfile copies; empty when nothing is."""
    dockerignore = REPO / ".dockerignore"
    patterns = [line.strip() for line in dockerignore.read_text().splitlines()
                if line.strip() and not line.startswith("#")] if dockerignore.exists() else []
    # The copied workspace is resolved offline, from cargo's local registry cache; on a fresh
    # machine that cache is empty until the lockfile's crates are fetched once.
    fetch = subprocess.run(["cargo", "fetch", "--locked"], cwd=REPO, capture_output=True, text=True,
                           check=False)
    if fetch.returncode != 0:
        return [f"cargo cannot fetch the crates Cargo.lock names:\n{fetch.stderr.strip()}"]
    with tempfile.TemporaryDirectory(prefix="tensorport-docker-context-") as tmp:
        root = Path(tmp)
        copy_context(context_sources(dockerfile_path.read_text()), root, patterns)
        run = subprocess.run(["cargo", "metadata", "--locked", "--offline", "--format-version", "1"],
                             cwd=root, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            return [f"cargo cannot resolve the workspace the Dockerfile copies:\n{run.stderr.strip()}"]
        metadata = json.loads(run.stdout)
        members = set(metadata["workspace_members"])
        problems = []
        for package in metadata["packages"]:
            if package["id"] not in members:
                continue
            for target in package["targets"]:
                source = Path(target["src_path"])
                if not source.exists():
                    problems.append(f"{package['name']}: {target['name']} needs "
                                    f"{source.relative_to(root)}, which the Dockerfile does not copy")
        return problems


def main() -> int:
    dockerfile = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "deploy" / "Dockerfile"
    problems = check(dockerfile.resolve())
    for problem in problems:
        print(f"{dockerfile}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{dockerfile}: the build context holds every workspace member and target")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
