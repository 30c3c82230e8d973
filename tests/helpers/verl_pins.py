"""What verl pins for its extras, read from the installed verl's metadata: the GPU image's
and the GPU lock's tests hold them to it, so a verl upgrade fails them until they follow."""

from __future__ import annotations

import re
from importlib import metadata

# name, [nested extras], == version, the extra it belongs to
REQUIREMENT = re.compile(
    r"([A-Za-z0-9_.\-]+)(\[[^\]]+\])?\s*(==\s*([^;\s]+))?\s*;\s*extra == \"([^\"]+)\""
)


def verl_extra_pins(extra: str) -> dict[str, str]:
    """``name -> version`` that verl pins with ``==`` for ``extra`` (nested extras followed),
    names in their canonical form."""
    pins: dict[str, str] = {}
    for line in metadata.requires("verl") or []:
        match = REQUIREMENT.match(line)
        if not match or match.group(5) != extra:
            continue
        name, nested, version = match.group(1), match.group(2), match.group(4)
        if name == "verl" and nested:
            for sub in nested.strip("[]").split(","):
                pins.update(verl_extra_pins(sub.strip()))
        elif version:
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins
