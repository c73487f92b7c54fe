"""Progress with an estimate of the time left, on stderr, for searches that take more than a few seconds."""

from __future__ import annotations

import sys
from typing import Callable

SHOW_AFTER_S = 2.0  # a search done sooner prints no bar


class Progress:
    """Bars made on demand (one per phase of a search), closed together."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._bars: list = []

    def phase(self, total: int, what: str) -> Callable[[], None]:
        if not self.enabled or total <= 0:
            return lambda: None
        from tqdm import tqdm

        self.close()  # one bar at a time: the previous phase is over
        bar = tqdm(total=total, desc=f"plan: {what}", unit=what.split()[-1].rstrip("s") or "step", file=sys.stderr,
                   delay=SHOW_AFTER_S, mininterval=1.0, leave=False)
        self._bars.append(bar)
        return lambda: bar.update(1)

    def close(self) -> None:
        for bar in self._bars:
            bar.close()
        self._bars.clear()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
