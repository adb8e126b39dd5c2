"""The import graph of `app/`: no cycle between modules, and no inner part importing a face.

Every import counts, also one inside a function (a lazy import is still a dependency, and a
cycle through one only waits for the call that closes it), except those under
`if TYPE_CHECKING:`, which never run. The faces are the ways in from
outside: the web app (`app/web/`), the command line (`app/cli*`), the MCP server
(`app/mcp_server*`), the notebook and script hook (`app/hook*`) and the pytest plugin
(`app/pytest_plugin*`). Everything else is an inner part, which the faces call and which never
calls them.
"""

import ast
from pathlib import Path

from tests.conftest import REPO

APP = REPO / "app"
WEB = "app.web"
FACES = ("app.cli", "app.mcp_server", "app.hook", "app.pytest_plugin")  # and what starts so


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def app_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(APP.rglob("*.py"))}


def _absolute(name: str, level: int, importer: str, is_package: bool) -> str:
    """The module a relative `from .x import y` names, from the module that says it."""
    if not level:
        return name
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `app` that module `name` imports anywhere in its file."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if _type_checking_only(node):
            node.body = []  # its imports are for the type checker: never executed
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node.module or "", node.level, name, is_package)
            # `from app import storage` imports the module app.storage; `from app.storage
            # import get_entry` imports app.storage.
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # `import app.search.index` names app.search.index; a name that is not a module
            # of app (a third-party package, an attribute) is left out.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = app_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def is_face(module: str) -> bool:
    return module == WEB or module.startswith((WEB + ".", *FACES))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as its modules in import order (the first repeated), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: dict[str, int] = {}
        stack = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path[start] = 0
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                del on_path[node]
                done.add(node)
            elif child in on_path:
                return [*path[on_path[child] :], child]
            elif child not in done:
                on_path[child] = len(path)
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "app.search.index" in graph["app.search"]
    assert "app.storage" in graph["app.answers"]  # `from app import storage`
    assert is_face("app.web.match") and is_face("app.cli") and is_face("app.mcp_server")
    assert not is_face("app.answers") and not is_face("app.answer_sources")


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_inner_part_imports_a_face():
    edges = [
        f"{module} imports {target}"
        for module, targets in sorted(import_graph().items())
        if not is_face(module)
        for target in sorted(targets)
        if is_face(target)
    ]
    assert edges == [], "inner parts importing a face:\n" + "\n".join(edges)


def test_the_cycle_finder_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
