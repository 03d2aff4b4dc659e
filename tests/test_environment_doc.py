"""docs/environment.md lists every MDSL_* environment variable the code reads."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READS = re.compile(r"environ(?:\.get)?[\[(]\s*\"(MDSL_[A-Z_]+)\"|getenv\(\s*\"(MDSL_[A-Z_]+)\"")


def _variables_read() -> set[str]:
    found = set()
    for folder in ("mdsl", "tests", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for match in READS.finditer(path.read_text(encoding="utf-8")):
                found.add(match.group(1) or match.group(2))
    return found


def test_every_variable_read_is_documented():
    documented = set(re.findall(r"`(MDSL_[A-Z_]+)`", (ROOT / "docs/environment.md").read_text()))
    read = _variables_read()
    assert {"MDSL_CACHE_DIR", "MDSL_DEBUG", "MDSL_LOG"} <= read  # the scan itself works
    assert read <= documented, sorted(read - documented)
