"""Does a folder fit what comes back from the lent machine's $OUT? (docs/gpu-run.md)

At most 8 files, 16 MiB each and 64 MiB together, no deeper than OUT/a/b/file, every
file and folder named in [A-Za-z0-9._-], no links. Prints one line, "OUT check: ok (...)"
or "OUT check: FAILED: ..."; exit status 1 when it fails.

    python scripts/check-out.py OUT
"""

import re
import sys
from pathlib import Path

MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES, MAX_FOLDERS = 8, 16 << 20, 64 << 20, 2


def problems(out: Path) -> list[str]:
    found = []
    entries = sorted(out.rglob("*"))
    files = [p for p in entries if not p.is_dir() or p.is_symlink()]
    if len(files) > MAX_FILES:
        found.append(f"{len(files)} files, at most {MAX_FILES} come back")
    for p in entries:
        rel = p.relative_to(out)
        if not re.fullmatch(r"[A-Za-z0-9._-]+", rel.name):
            found.append(f"{rel}: a name outside [A-Za-z0-9._-]")
        if p.is_symlink():
            found.append(f"{rel}: a link (links do not come back)")
        elif p.is_file() and len(rel.parts) > MAX_FOLDERS + 1:
            found.append(f"{rel}: more than {MAX_FOLDERS} folders deep")
        elif p.is_file() and p.stat().st_size > MAX_FILE_BYTES:
            found.append(f"{rel}: {p.stat().st_size} bytes, over 16 MiB")
    total = sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())
    if total > MAX_TOTAL_BYTES:
        found.append(f"{total} bytes in all, at most 64 MiB come back")
    return found


def main(out: Path) -> int:
    found = problems(out)
    sizes = ", ".join(f"{p.relative_to(out)} {p.stat().st_size} B"
                      for p in sorted(out.rglob("*")) if p.is_file() and not p.is_symlink())
    print(f"OUT check: {'FAILED: ' + '; '.join(found) if found else 'ok'} ({sizes})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
