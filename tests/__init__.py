"""pdserve's tests: unit/ and stack/ mirror the source tree's packages."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
