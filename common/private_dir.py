"""A directory only this user can enter, for what other local users must neither read nor squat: a stack's state
files, the kvstore's shared-memory socket.

The first of ``$XDG_RUNTIME_DIR/pdserve``, ``/tmp/pdserve-<uid>`` and ``~/.cache/pdserve/run`` that is (or can be
made) this user's with mode 0700. A candidate someone else made first, or left open to others, is skipped with a
warning instead of stopping the caller: another user who creates ``/tmp/pdserve-<uid>`` beforehand gets nothing,
and the next candidate (in this user's home) cannot be squatted. Every process of one user computes the same answer,
so a second command finds what the first one put there.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("pdserve")


def candidates() -> list[Path]:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    found = [Path(runtime) / "pdserve"] if runtime else []
    return found + [Path(tempfile.gettempdir()) / f"pdserve-{os.getuid()}", Path.home() / ".cache" / "pdserve" / "run"]


def is_private(path: Path) -> bool:
    info = path.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & 0o077


def private_dir(options: list[Path] | None = None) -> Path:
    """The first candidate that is this user's alone (created 0700 if missing); PermissionError if none is."""
    tried = []
    for path in options or candidates():
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            if is_private(path):
                return path
            tried.append(f"{path} (not this user's alone)")
        except OSError as exc:
            tried.append(f"{path} ({exc.strerror})")
        log.warning("private directory: skipping %s", tried[-1])
    raise PermissionError(f"no private directory: tried {', '.join(tried)}")
