"""Regenerate docs/onnx-conformance.md: ONNX's node test cases through mdsl's importer.

Usage (from the repository root):

    .venv/bin/python scripts/onnx_conformance.py                 # interpreter
    .venv/bin/python scripts/onnx_conformance.py --backend python --backend c

Each backend gets a summary row, its failures and a column in the per-op table. The
test suite (tests/frontends/test_onnx_conformance.py) fails when a case that passed
here stops passing, so regenerate the document when mdsl changes what passes.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mdsl.frontends.onnx_conformance import (  # noqa: E402
    collect_cases,
    render_markdown,
    render_round_trip,
    run_conformance,
    run_export_round_trip,
    summarize,
)

SCRIPT = "scripts/onnx_conformance.py"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="mdsl backend (repeatable)")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "onnx-conformance.md"))
    args = parser.parse_args(argv)
    backends = args.backend or ["python"]
    cases = collect_cases()
    results = {}
    for backend in backends:
        results[backend] = run_conformance(backend=backend, cases=cases)
        s = summarize(results[backend])
        print(
            f"{backend}: {s['passed']}/{s['supported']} supported cases pass "
            f"({100 * s['rate']:.1f}%), {s['cases']} cases in all"
        )
    first = results[backends[0]]
    round_trip = run_export_round_trip(cases, {r.name for r in first if r.status == "pass"})
    checked = [r for r in round_trip if r.status != "unsupported"]
    print(f"export round trip: {sum(r.status == 'pass' for r in checked)}/{len(checked)} pass")
    with open(args.out, "w") as f:
        f.write(render_markdown(results, script=SCRIPT))
        f.write("\n" + render_round_trip(round_trip))
    print(f"wrote {os.path.relpath(args.out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
