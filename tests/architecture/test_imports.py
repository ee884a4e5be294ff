"""The import graph: imports run one way, from products to the shared core, and never in a loop.

Read from the source with ``ast`` (nothing is imported), as the package is laid out by
pyproject.toml's ``package-dir``: ``obsbox/`` is the shared core, ``obsbox.local`` the local mode,
and ``exporters/``, ``collector/``, ``dashboards/`` are the products mapped into ``obsbox``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "obsbox": ROOT / "obsbox",
    "obsbox.exporters": ROOT / "exporters",
    "obsbox.collector": ROOT / "collector",
    "obsbox.dashboards": ROOT / "dashboards",
}
PRODUCTS = ("obsbox.exporters", "obsbox.collector", "obsbox.dashboards", "obsbox.local")
CLI = "obsbox.cli"  # loads each command's module when that command runs


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "obsbox" and name.startswith(PRODUCTS[:3]):
                continue
            modules[name] = path
    return modules


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports anywhere: at module level, in ``if TYPE_CHECKING:``
    blocks and inside functions. An import deferred into a function is still a dependency; hiding a
    loop there only moves the failure to the first call."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{node.module}"
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            module = target
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
    return found


def graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports(path, name, known) for name, path in files.items()}


def is_core(module: str) -> bool:
    return module.startswith("obsbox") and not module.startswith(PRODUCTS) and module != CLI


def test_the_shared_core_imports_no_product():
    wrong = {
        (module, target)
        for module, targets in graph().items()
        if is_core(module)
        for target in targets
        if target.startswith(PRODUCTS)
    }
    assert not wrong, f"the shared core imports products: {sorted(wrong)}"


def test_no_two_modules_import_each_other_in_a_loop():
    edges = graph()
    # package __init__ modules are entered on the way to any of their submodules: not edges of a loop
    edges = {m: {t for t in ts if not (edges.get(t) is not None and m.startswith(t + "."))} for m, ts in edges.items()}
    state: dict[str, int] = {}
    loops: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                loops.append([*stack[stack.index(target) :], target] if target in stack else [module, target])
            elif target not in state:
                visit(target, [*stack, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not loops, "import loops: " + "; ".join(" -> ".join(loop) for loop in loops)


def test_the_map_finds_every_module():
    """The graph is only as good as its module list: every package folder contributes modules."""
    names = set(module_files())
    for prefix in (*PRODUCTS, "obsbox.slo", "obsbox.exporters.bridge.sources", "obsbox.exporters.instrumentation"):
        assert any(n == prefix or n.startswith(prefix + ".") for n in names), prefix
    assert "obsbox.exporters.bridge.sources.tracker" in names
    assert "obsbox.exporters.instrumentation.asgi" in names
