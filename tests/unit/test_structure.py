"""Structure checks over the project's source (``ast`` only, no imports): no import cycles among
the modules of pipelines/ wordpiece/ pretrain/ finetune/ schemas/ chain/, and no function over
``MAX_LINES`` lines except the few listed in ``LONG_FUNCTIONS`` (each with its current ceiling)."""

from __future__ import annotations

from benchmarks.function_lengths import function_lengths, import_cycles, import_graph

MAX_LINES = 80

# name -> the most lines it may have now. Entries leave this table as their function is split.
LONG_FUNCTIONS = {}


def _key(where: str) -> str:
    path_line, name = where.split(" ", 1)
    return f"{path_line.rsplit(':', 1)[0]} {name}"


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_import_cycle_finder_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_function_over_the_line_limit():
    too_long = []
    for lines, where in function_lengths():
        ceiling = LONG_FUNCTIONS.get(_key(where), MAX_LINES)
        if lines > ceiling:
            too_long.append(f"{where} ({lines} lines, limit {ceiling})")
    assert not too_long, "split these functions: " + ", ".join(too_long)


def test_long_function_table_is_not_stale():
    lengths = {_key(where): lines for lines, where in function_lengths()}
    stale = [name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_LINES]
    assert not stale, f"now under {MAX_LINES} lines (remove from LONG_FUNCTIONS): {stale}"
