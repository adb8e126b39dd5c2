"""Where the non-Python parts (templates, static, content, migrations) live.

From a clone (editable install or plain checkout) they sit beside the package; an installed
wheel carries them inside the package. Both layouts are looked up here and nowhere else.
"""

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def resource_dir(name: str) -> Path:
    """Return the folder `name` (templates, static, content, migrations) for this install."""
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"the {name}/ folder is missing from this installation; reinstall the package "
        f"(pip install .) or run from a clone of the repository"
    )
