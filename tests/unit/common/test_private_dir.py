"""A private directory that another user made first, or left open, is skipped with a warning, never fatal; the
kvstore's shared-memory socket lives in the one chosen."""

import logging
import os
import stat

import pytest

from pdserve.common.private_dir import private_dir
from pdserve.kvstore import shm


def test_a_squatted_or_open_directory_is_skipped(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    squatted, open_one, mine = tmp_path / "squatted", tmp_path / "open", tmp_path / "mine"
    squatted.mkdir()
    open_one.mkdir()
    open_one.chmod(0o777)
    if os.getuid() == 0:  # as root: a directory of another user
        os.chown(squatted, 65534, 65534)
    else:
        squatted.chmod(0o755)  # not 0700: someone else could have made it
    assert private_dir([squatted, open_one, mine]) == mine
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    assert "skipping" in caplog.text and str(squatted) in caplog.text
    with pytest.raises(PermissionError):
        private_dir([squatted, open_one])


def test_the_shared_memory_socket_is_in_a_private_directory():
    path = shm.socket_address(50051)
    assert not path.startswith("\0")
    info = os.stat(os.path.dirname(path))
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
