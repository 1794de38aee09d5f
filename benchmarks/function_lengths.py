"""The longest functions and the module import graph of the project, measured with ``ast``.

``python -m benchmarks.function_lengths [--top N]`` prints the N longest functions (lines from
``def`` to the last line of the body, decorators excluded) and any import cycle among the
project's modules. ``tests/unit/test_structure.py`` uses the same two functions.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGES = ("pipelines", "wordpiece", "pretrain", "finetune", "schemas", "chain")
ROOT = Path(__file__).resolve().parent.parent


def project_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file under the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def function_lengths(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, ``file:line name``) of every function and method, longest first."""
    found = []
    for path in project_files(root).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
                found.append((lines, where))
    return sorted(found, reverse=True)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Module names one import statement names (relative imports resolved against ``module``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere in its source (top level, functions and
    ``TYPE_CHECKING`` blocks alike: a cycle hidden in a function is still a cycle)."""
    files = project_files(root)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets.update(name for name in _imported(node, module, is_package) if name in files)
        targets.discard(module)
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one module that import each other (strongly connected components), each
    sorted: every module's reachable set, and the modules that reach each other."""

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reach = {node: reachable(node) for node in graph}
    cycles = {tuple(sorted({node} | {m for m in reach[node] if node in reach.get(m, ())})) for node in graph}
    return sorted(list(c) for c in cycles if len(c) > 1)


def main() -> None:
    """Print the longest functions and the import cycles."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="how many functions to list")
    args = parser.parse_args()
    for lines, where in function_lengths()[: args.top]:
        print(f"{lines:5d}  {where}")
    cycles = import_cycles(import_graph())
    print("import cycles:", "; ".join(" <-> ".join(c) for c in cycles) if cycles else "none")


if __name__ == "__main__":
    main()
