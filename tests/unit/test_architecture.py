"""The shape of the package, as ``docs/architecture.md`` describes it, checked on every run.

Why a test: layering and module size erode one convenient import at a time; a failing test
names the import or the module at the moment it happens, not at the next clean-up.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pubsub_connect"
REPOSITORY = PACKAGE.parents[1]

#: A module's layer may import its own and lower layers only (``docs/architecture.md``, "Layers").
LAYERS = {"model": 0, "config": 1, "io": 2, "pipelines": 3, "lakeflow": 4, "connect": 4, "explore": 4}
ENTRY_POINTS = {"cli", "jobs", "quickstart"}
MAX_LINES = 500
#: How a module over :data:`MAX_LINES` states why it is one module (in its top docstring).
LENGTH_REASON = "why one module"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str) -> set[str]:
    """Every package module ``name`` imports, at the top or inside a function."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module in MODULES and module != name}


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_module_walk_sees_the_package() -> None:
    assert "pubsub_connect.model.schemas" in MODULES
    assert "pubsub_connect.io.kafka.read_options" in imported_modules("pubsub_connect.io.kafka.reader")


def test_no_import_cycle() -> None:
    graph = {name: imported_modules(name) for name in MODULES}
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in MODULES:
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_layers_import_only_their_own_and_lower_layers() -> None:
    wrong = []
    for name in MODULES:
        own = layer(name)
        if own not in LAYERS:
            continue
        for target in imported_modules(name):
            other = layer(target)
            if other in ENTRY_POINTS or (other in LAYERS and LAYERS[other] > LAYERS[own]):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_model_is_pure() -> None:
    """The data model is what the tests hold everything against: no I/O, no configuration."""
    wrong = [f"{name} -> {target}" for name in MODULES if layer(name) == "model"
             for target in imported_modules(name) if layer(target) != "model"]
    assert wrong == []


def test_long_modules_say_why_they_are_one_module() -> None:
    unexplained = []
    for name, path in MODULES.items():
        source = path.read_text()
        lines = source.count("\n")
        docstring = ast.get_docstring(ast.parse(source)) or ""
        if lines > MAX_LINES and LENGTH_REASON not in docstring.lower():
            unexplained.append(f"{name} ({lines} lines)")
    assert unexplained == []


def test_package_inits_hold_no_code() -> None:
    """Importers name the module that defines a thing; a package's ``__init__`` only describes it."""
    with_code = []
    for name, path in MODULES.items():
        if path.name != "__init__.py" or name == "pubsub_connect":
            continue
        body = ast.parse(path.read_text()).body
        statements = [node for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
                      and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]
        if statements:
            with_code.append(name)
    assert with_code == []


def test_the_repository_speaks_of_itself_only() -> None:
    """Code, tests and docs point at nothing a maintainer of this repository cannot open."""
    outside = re.compile("|".join([r"\bDESIGN\.md\b", r"\bENVIRONMENT\.md\b", r"\.\./shared\b",
                                   r"\bissue #?\d+\b", r"\bthe issue\b", r"\(issue\)", r"\bthe seed\b"]), re.IGNORECASE)
    found = []
    for folder in ("src", "tests", "docs", "notebooks", "benchmarks", "resources"):
        for path in sorted((REPOSITORY / folder).rglob("*")):
            if path.suffix not in {".py", ".md", ".yml", ".yaml", ".properties", ".sh"} or path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if outside.search(line):
                    found.append(f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}")
    assert found == []
