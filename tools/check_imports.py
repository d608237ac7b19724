"""Check that each lazax package imports only what its pyproject.toml declares.

Usage:
    python tools/check_imports.py              # every package under packages/
    python tools/check_imports.py ir pjrt      # folder names (pjrt_runtime) or import names (pjrt)

For every .py file under packages/<pkg>/src, the `import` statements (anywhere in the file,
including function bodies and `if TYPE_CHECKING:` blocks) are parsed with `ast`.  The check
fails when a file imports

* torch / functorch, jax, jaxlib or numpy without the package declaring that distribution, or
* lazax.<other> without the package declaring that lazax distribution (the one-way arrows:
  e.g. lazax.ir may import no lazax package, lazax.modes may import lazax.executor only).

Declarations are direct: lazax-modes depending on lazax-executor does not let lazax.modes
import torch itself.  Other third-party imports are listed as notes but do not fail.
It also fails if a package ships src/lazax/__init__.py (lazax is a PEP 420 namespace).
A package with no source yet passes.

Inside a package, imports point one way too.  The check fails on an import of the package's
own modules that is not at a module's top level (an import inside a function dodges a
circle instead of removing it), on any circle among the package's modules, and, for a
package whose pyproject.toml lists its stages (``[tool.lazax] stages = ["ops", "state",
...]``: top-level modules or subpackages, lowest first), on an import of a later stage
from an earlier one.  A module not listed (``__init__``, ``testing``) may import any.

The module doubles as the workspace model used by noxfile.py (load_workspace, local_closure,
requires_anywhere); it only uses the standard library.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"

# Top-level third-party modules whose use must be declared -> distribution that provides them.
CHECKED_THIRD_PARTY = {
    "torch": "torch",
    "functorch": "torch",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "numpy": "numpy",
}

_VERSION_PATH = re.compile(
    r"^src/(?P<namespace>lazax/)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)/_version\.py$"
)


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """'jax[cuda12]>=0.10 ; python_version>"3"' -> 'jax'."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"cannot parse requirement {requirement!r}")
    return normalize(match.group(1))


@dataclass(frozen=True)
class Package:
    folder: str  # packages/<folder>
    path: Path
    name: str  # normalized distribution name, e.g. lazax-pjrt
    import_name: str  # lazax.<import_name>, e.g. pjrt
    dependencies: frozenset[str]  # normalized distribution names (no extras, no versions)
    stages: tuple[str, ...] = ()  # [tool.lazax] stages: the package's import order
    # False for a package that installs a top-level import name of its own (the
    # torch_xla compatibility package installs ``torch_xla``, not ``lazax.<name>``).
    in_namespace: bool = True

    @property
    def src(self) -> Path:
        return self.path / "src"

    @property
    def module(self) -> str:
        """The package's import path: ``lazax.ir``, or ``torch_xla``."""
        return f"lazax.{self.import_name}" if self.in_namespace else self.import_name


def load_workspace(root: Path = ROOT) -> dict[str, Package]:
    """All packages under root/packages, keyed by folder name (sorted)."""
    workspace: dict[str, Package] = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        project = data["project"]
        version_path = data["tool"]["hatch"]["version"]["path"]
        match = _VERSION_PATH.match(version_path)
        if not match:
            raise ValueError(
                f"{pyproject}: [tool.hatch.version] path must be src/lazax/<name>/_version.py "
                "(or src/<name>/_version.py for a top-level import name)"
            )
        folder = pyproject.parent.name
        workspace[folder] = Package(
            folder=folder,
            path=pyproject.parent,
            name=normalize(project["name"]),
            import_name=match.group("name"),
            dependencies=frozenset(requirement_name(r) for r in project.get("dependencies", [])),
            stages=tuple(data["tool"].get("lazax", {}).get("stages", ())),
            in_namespace=bool(match.group("namespace")),
        )
    return workspace


def find_package(workspace: dict[str, Package], key: str) -> Package:
    """Look a package up by folder (pjrt_runtime), import name (pjrt) or distribution."""
    for package in workspace.values():
        if key in (package.folder, package.import_name, package.name):
            return package
    known = ", ".join(workspace)
    raise SystemExit(f"unknown package {key!r} (known: {known})")


def local_closure(workspace: dict[str, Package], folder: str) -> list[Package]:
    """The package and every lazax package it depends on, transitively (package first)."""
    by_name = {p.name: p for p in workspace.values()}
    order: list[Package] = []
    todo = [workspace[folder]]
    while todo:
        package = todo.pop(0)
        if package in order:
            continue
        order.append(package)
        todo.extend(by_name[d] for d in sorted(package.dependencies) if d in by_name)
    return order


def requires_anywhere(workspace: dict[str, Package], folder: str, distribution: str) -> bool:
    """Whether the package or any lazax package under it declares `distribution`."""
    wanted = normalize(distribution)
    return any(wanted in p.dependencies for p in local_closure(workspace, folder))


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted module) for each absolute import; `from a import b` yields a.b too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "lazax":  # from lazax import ir
                found.extend((node.lineno, f"lazax.{alias.name}") for alias in node.names)
    return found


def _module_name(package: Package, path: Path) -> str:
    """lazax.executor.barrier.keys for .../src/lazax/executor/barrier/keys.py."""
    parts = list(path.relative_to(package.src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _own_imports(package: Package, module: str, is_init: bool, tree: ast.Module, known: set):
    """(line, imported own module, at top level?) for each import of the package's own
    modules; `from . import x` names module x where x is one."""
    own = package.module
    here = module if is_init else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            target, names = "", [a.name for a in node.names]
        else:
            continue
        for name in [target, *names]:
            if name and (name == own or name.startswith(own + ".")) and name in known:
                found.append((node.lineno, name, id(node) in top_level))
    return found


def _stage(package: Package, module: str) -> int | None:
    rest = module.split(".")[len(package.module.split(".")) :]  # after lazax.<import_name>
    if not rest or rest[0] not in package.stages:
        return None
    return package.stages.index(rest[0])


def check_internal_imports(package: Package) -> list[str]:
    """Errors for imports inside functions, circles and stage order within a package."""
    if not package.src.is_dir():
        return []
    paths = {}
    for path in sorted(package.src.rglob("*.py")):
        paths[_module_name(package, path)] = path
    known = set(paths)
    errors: list[str] = []
    edges: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        rel = path.relative_to(ROOT)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
        except SyntaxError:
            continue  # reported by check_package
        imports = _own_imports(package, module, path.name == "__init__.py", tree, known)
        for lineno, target, top in imports:
            if target == module or module.startswith(target + "."):
                continue  # a module's own package: its __init__ runs first anyway
            edges[module].add(target)
            if not top:
                errors.append(
                    f"{rel}:{lineno}: imports {target} inside a function or block; import it "
                    f"at the top (if that makes a circle, move the code that needs it)"
                )
            low, high = _stage(package, module), _stage(package, target)
            if low is not None and high is not None and high > low:
                errors.append(
                    f"{rel}:{lineno}: {package.stages[low]} imports {target}, a later stage "
                    f"({' -> '.join(package.stages)}); move the code down a stage"
                )
    for circle in _circles(edges):
        errors.append(f"import circle among {', '.join(circle)}")
    return errors


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def check_package(package: Package, workspace: dict[str, Package]) -> tuple[list[str], list[str]]:
    """(errors, notes) for one package."""
    errors: list[str] = []
    notes: list[str] = []
    lazax_dists = {p.import_name: p.name for p in workspace.values() if p.in_namespace}
    stdlib = set(sys.stdlib_module_names)

    namespace_init = package.src / "lazax" / "__init__.py"
    if namespace_init.exists():
        errors.append(
            f"{namespace_init.relative_to(ROOT)}: lazax is a PEP 420 namespace package; "
            "remove this file"
        )

    for path in sorted(package.src.rglob("*.py")) if package.src.is_dir() else []:
        rel = path.relative_to(ROOT)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
        except SyntaxError as exc:
            errors.append(f"{rel}:{exc.lineno}: cannot parse: {exc.msg}")
            continue
        for lineno, module in _imported_modules(tree):
            parts = module.split(".")
            top = parts[0]
            if top == "lazax":
                if len(parts) < 2:
                    continue  # bare `import lazax` / `from lazax import x` handled above
                sub = parts[1]
                if sub == package.import_name:
                    continue
                dist = lazax_dists.get(sub)
                if dist is None:
                    errors.append(f"{rel}:{lineno}: imports lazax.{sub}, which no package provides")
                elif dist not in package.dependencies:
                    errors.append(
                        f"{rel}:{lineno}: imports lazax.{sub}, but {package.name} does not "
                        f"declare {dist}"
                    )
            elif top in CHECKED_THIRD_PARTY:
                dist = CHECKED_THIRD_PARTY[top]
                if dist not in package.dependencies:
                    errors.append(
                        f"{rel}:{lineno}: imports {top}, but {package.name} does not declare {dist}"
                    )
            elif top == package.module:
                continue  # a top-level package importing itself
            elif top not in stdlib and top != "__future__":
                notes.append(f"{rel}:{lineno}: imports third-party {top} (not checked)")
    errors.extend(check_internal_imports(package))
    return errors, notes


def main(argv: list[str]) -> int:
    workspace = load_workspace()
    if not workspace:
        print("check_imports: no packages found")
        return 0
    packages = [find_package(workspace, key) for key in argv] if argv else workspace.values()
    failed = False
    for package in packages:
        errors, notes = check_package(package, workspace)
        files = len(list(package.src.rglob("*.py"))) if package.src.is_dir() else 0
        status = "FAIL" if errors else "ok"
        print(f"check_imports: {package.name} ({files} files): {status}")
        for line in errors:
            print(f"  error: {line}")
        for line in notes:
            print(f"  note: {line}")
        failed = failed or bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
