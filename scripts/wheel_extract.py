"""Extracts the members of a wheel (a zip file) whose names start with one of the given
prefixes into DEST, keeping their paths. Stands in for unzip(1), which may not be installed.

    python3 scripts/wheel_extract.py WHEEL DEST PREFIX...
"""

import shutil
import sys
import zipfile
from pathlib import Path


def main() -> None:
    wheel, dest, *prefixes = sys.argv[1:]
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.infolist()
                   if not m.is_dir() and m.filename.startswith(tuple(prefixes))]
        if not members:
            sys.exit(f"{wheel}: nothing matches {prefixes}")
        for member in members:
            target = Path(dest) / member.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)


if __name__ == "__main__":
    main()
