"""One-time migration (issue 50) of evidence/{key}/ from the hash-chained register with a
retained copy of every artifact version (objects/<sha256>) to the plain register: one line
per version of a measured stage, {stage, version, sha256, provenance}, and that version's
artifact as evidence/{key}/{stage}/v{N}.{ext}. Derived versions (series, traffic, claims,
manuscript) are dropped: git holds their history. Every kept file is checked against its
sha256 before objects/ is removed. Run once from the repository root:

    .venv/bin/python tools/migrate_register.py
"""

import json
import shutil
import sys
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import canonical_json, sha256_bytes
from inferlab.core.pipeline import STAGES

root = Path.cwd()
for folder in sorted((root / "evidence").iterdir()):
    objects = folder / "objects"
    if not objects.is_dir():
        continue
    key = folder.name
    lines, kept = [], {}
    for raw in (folder / "register.jsonl").read_bytes().split(b"\n"):
        if not raw:
            continue
        old = json.loads(raw)
        if not STAGES[old["stage"]].measured:
            continue
        data = (objects / old["sha256"]).read_bytes()
        assert sha256_bytes(data) == old["sha256"], (key, old["stage"], old["version"])
        target = layout.version_path(root, key, old["stage"], old["version"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        kept[old["stage"]] = kept.get(old["stage"], 0) + 1
        assert kept[old["stage"]] == old["version"], (key, old["stage"], old["version"])
        lines.append(canonical_json({k: old[k] for k in ("stage", "version", "sha256",
                                                         "provenance")}))
    (folder / "register.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    shutil.rmtree(objects)
    print(f"{key}: kept {kept}", file=sys.stderr)
