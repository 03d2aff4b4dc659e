"""Running one piece of work on several threads at once, for the concurrent-call tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_concurrently(work: Callable[[int], T], count: int) -> list[T]:
    """`[work(0), ..., work(count - 1)]`, each on its own thread; the threads are released
    together by a barrier so their calls overlap. The first exception a thread raised is
    raised here (after every thread has finished)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as e:  # re-raised below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
