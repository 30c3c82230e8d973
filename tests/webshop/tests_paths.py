"""Where the webshop tests find their data files."""

from __future__ import annotations

from pathlib import Path

FIXTURE_CATALOG = Path(__file__).parent / "fixtures" / "catalog"
REFERENCE_DIR = Path(__file__).resolve().parents[3] / "shared" / "webshop-reference"
