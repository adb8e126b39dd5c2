"""What verify runs and what it finds: a snippet to run, the interpreter's environment, what a
snippet needs of it (`unmet_requirement`), and a snippet's result."""

import ast
import sys
from dataclasses import dataclass, field

from app.entries import content_hash

OUTPUT_TAIL_CHARS = 600


@dataclass(frozen=True)
class SnippetToRun:
    entry_id: str
    position: int
    role: str
    code: str
    options: dict[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def code_hash(self) -> str:
        return content_hash(self.code)

    @property
    def label(self) -> str:
        return f"{self.entry_id} {self.role}#{self.position}"


@dataclass(frozen=True)
class Environment:
    """What the interpreter that runs the snippets has: checked once per verify run."""

    python: str
    python_version: str
    platform: str
    torch_version: str | None
    cuda: bool
    gpus: int
    packages: dict[str, bool]
    mps: bool = False  # an Apple GPU (Metal)

    @property
    def description(self) -> str:
        device = f"CUDA x{self.gpus}" if self.cuda else "CPU"
        torch = f"torch {self.torch_version}" if self.torch_version else "no torch"
        return f"{torch} {device}, Python {self.python_version}, {self.platform}"


@dataclass(frozen=True)
class SnippetResult:
    snippet: SnippetToRun
    status: str  # passed | failed | skipped
    reason: str = ""
    duration_ms: int = 0

    def to_dict(self) -> dict:
        return {
            "entry": self.snippet.entry_id,
            "snippet": self.snippet.position,
            "role": self.snippet.role,
            "line": self.snippet.line,
            "status": self.status,
            "reason": self.reason,
            "duration_ms": self.duration_ms,
        }


def imported_modules(code: str) -> set[str]:
    """Top-level packages a snippet imports: not the standard library's, not its own files."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    # A module whose file the snippet writes itself (`shortrepr.py`, `nets/`) is not a package.
    local = {name for name in names if f"{name}.py" in code or f"{name}/" in code}
    return {name for name in names if name not in sys.stdlib_module_names} - local


def _required(snippet: SnippetToRun) -> list[str]:
    requires = snippet.options.get("requires", "")
    return [item.strip() for item in requires.split(",") if item.strip()]


def unmet_requirement(snippet: SnippetToRun, env: Environment) -> str | None:
    """Why `snippet` cannot run here, or None when it can."""
    for requirement in _required(snippet):
        name, _, value = requirement.partition("=")
        if name == "cuda":
            if env.torch_version is None:
                return "requires cuda: torch is not installed"
            if not env.cuda:
                return "requires cuda: no CUDA device here"
        elif name == "no-cuda":
            if env.cuda:
                return "requires no-cuda: it shows the error of a machine without CUDA"
        elif name == "mps":
            if env.torch_version is None:
                return "requires mps: torch is not installed"
            if not env.mps:
                return "requires mps: no Apple MPS device here"
        elif name == "gpus":
            wanted = int(value) if value.isdigit() else 1
            if env.gpus < wanted:
                return f"requires {wanted} GPUs: {env.gpus} here"
        elif not env.packages.get(name, False):
            return f"requires {name}: the package is not installed"
    for module in sorted(imported_modules(snippet.code)):
        if not env.packages.get(module, False):
            return f"imports {module}: the package is not installed"
    # Why the text and not the imports: a snippet can reach torch through a subprocess
    # (`python -c "import torch"`), a helper module it writes, `importlib.import_module("torch")`
    # or `__import__`, none of which an import statement shows. Run without torch, such a
    # snippet would fail and publish a false "failing" result. In a PyTorch knowledge base any
    # snippet whose code names torch anywhere (torchvision, libtorch, a string) needs it, so
    # without torch it is skipped; only code that never names torch runs there.
    if env.torch_version is None and "torch" in snippet.code.casefold():
        return "torch is not installed (the snippet's code names torch)"
    return None


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL_CHARS else "…" + text[-OUTPUT_TAIL_CHARS:]
