"""Logging and progress: one `logging.getLogger("mdsl")` hierarchy, bars on terminals only.

Every module logs under `mdsl.<area>` (`get_logger(__name__)`); mdsl installs no handler of
its own, so applications decide what is shown. Compile stages log at INFO with their times:

>>> import logging, mdsl
>>> logging.basicConfig(level=logging.INFO)    # doctest: +SKIP
>>> exe = mdsl.compile(g)                      # doctest: +SKIP
INFO:mdsl.runtime.compile:optimize 'model' (level 2): 12.1 ms
...

`MDSL_LOG=INFO` (or DEBUG, WARNING) does the same without code: it adds one stderr
handler to the "mdsl" logger. Long work (ONNX import, C compiles, conformance and
benchmark runs) shows a progress bar when stderr is a terminal, and nothing in pipes or CI
(`MDSL_PROGRESS=0` turns bars off, `=1` forces them on).

>>> with timed(get_logger("mdsl.doc"), "render %s", "demo") as t:
...     pass
>>> t.seconds >= 0.0
True
>>> list(progress(range(3), "steps"))  # not a terminal here: the iterable unchanged
[0, 1, 2]
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator

ROOT = "mdsl"


def get_logger(name: str = ROOT) -> logging.Logger:
    """The logger `name` inside the mdsl hierarchy (`"mdsl.runtime.compile"`, ...)."""
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


class timed:
    """Context manager: logs `message % args` with the elapsed time at `level` on exit.

    `.seconds` holds the time afterwards, so callers can report it too.
    """

    def __init__(self, logger: logging.Logger, message: str, *args, level: int = logging.INFO):
        self.logger, self.message, self.args, self.level = logger, message, args, level
        self.seconds = 0.0

    def __enter__(self) -> timed:
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.seconds = time.perf_counter() - self._start
        if exc_type is None and self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level, self.message + ": %s", *self.args, format_seconds(self.seconds)
            )


def format_seconds(seconds: float) -> str:
    """`0.0123` -> `"12.3 ms"`, `4.2` -> `"4.20 s"`."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def progress_enabled() -> bool:
    """Bars only where a person watches: stderr is a terminal and not CI (or forced)."""
    setting = os.environ.get("MDSL_PROGRESS", "")
    if setting in ("0", "1"):
        return setting == "1"
    if os.environ.get("CI"):
        return False
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def progress(
    iterable: Iterable, description: str, total: int | None = None, *, delay: float = 0.0
) -> Iterator:
    """`iterable`, with a tqdm bar on stderr when `progress_enabled()`.

    `delay`: seconds before the bar appears, so quick work (a small model's import) shows
    none.
    """
    bar = _tqdm()
    if bar is None:
        return iter(iterable)
    return iter(
        bar(iterable, desc=description, total=total, leave=False, file=sys.stderr, delay=delay)
    )


@contextlib.contextmanager
def waiting(description: str, *, delay: float = 1.0) -> Iterator[None]:
    """While the block runs (one long step: a C compile), a bar counting the seconds on a
    terminal, appearing after `delay` seconds; nothing elsewhere.

    >>> with waiting("compile graph.c"):  # not a terminal here: no bar
    ...     pass
    """
    bar_class = _tqdm()
    if bar_class is None:
        yield
        return
    done = threading.Event()
    bar = bar_class(desc=description, total=None, leave=False, file=sys.stderr, delay=delay)

    def tick() -> None:
        while not done.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()


def _tqdm():
    """The tqdm class when bars are wanted and tqdm is importable, else None."""
    if not progress_enabled():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a stripped install just shows no bar
        return None
    return tqdm


def _configure_from_environment() -> None:
    level = os.environ.get("MDSL_LOG", "").upper()
    if not level:
        return
    logger = logging.getLogger(ROOT)
    if not any(getattr(h, "_mdsl_env", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        handler._mdsl_env = True  # type: ignore[attr-defined]  # marks the one handler mdsl added
        logger.addHandler(handler)
    known = isinstance(logging.getLevelName(level), int)
    logger.setLevel(level if known else logging.INFO)


logging.getLogger(ROOT).addHandler(logging.NullHandler())
_configure_from_environment()
