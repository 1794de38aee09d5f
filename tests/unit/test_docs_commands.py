"""Every command line in README.md and docs/*.md names commands, subcommands and flags that exist.

The command blocks are parsed (continuation lines joined, comments and pipes cut) and each call of
``pipelines``, ``wordpiece``, ``pretrain``, ``finetune`` or ``chain`` is checked against
click's command objects directly: a renamed or removed flag fails here, not in a newcomer's shell.
Every Dataflow command shown is run up to its bucket probe: its Beam values parse and its own
checks (settings, worker paths on buckets, project, region, temp_location) pass.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from pathlib import Path

import click
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tests.clis import CLIS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
STOP = {"|", "&&", "||", ";", ">", "2>", ">>", "&"}


def command_lines(text: str) -> list[str]:
    """The lines of the fenced blocks of a Markdown text, continuation lines joined."""
    lines = []
    for block in FENCE.findall(text):
        lines.extend(block.replace("\\\n", " ").splitlines())
    return lines


def calls(line: str) -> list[tuple[str, list[str]]]:
    """(tool, arguments) for each call of one of the tools on a shell line."""
    try:
        tokens = shlex.split(line.lstrip("$ "), comments=True)
    except ValueError:
        return []
    found = []
    for i, token in enumerate(tokens):
        name = token.rsplit("/", 1)[-1]
        if tokens[i - 1 : i] == ["-m"] and name in CLIS or name in CLIS and i == 0:
            rest = []
            for arg in tokens[i + 1 :]:
                if arg in STOP:
                    break
                rest.append(arg)
            found.append((name, rest))
    return found


@functools.cache
def beam_flags() -> frozenset[str]:
    """Every flag Beam's pipeline options know (``pipelines`` and ``wordpiece`` pass them on)."""

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    parser = argparse.ArgumentParser(add_help=False)
    for cls in set(subclasses(PipelineOptions)):
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:  # a flag two option classes both declare
            pass
    return frozenset(opt for action in parser._actions for opt in action.option_strings)


def problems(tool: str, args: list[str]) -> list[str]:
    """What in ``tool args`` click does not know: an unknown subcommand or flag."""
    command: click.Command = CLIS[tool]
    path = [tool]
    found = []
    for arg in args:
        if isinstance(command, click.Group) and arg in command.commands:
            command = command.commands[arg]
            path.append(arg)
        elif arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            names = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
            if command.context_settings.get("ignore_unknown_options"):
                names |= beam_flags()
            if flag not in names and flag not in ("--help", "--version"):
                found.append(f"{' '.join(path)}: no flag {flag}")
    return found


def all_calls() -> list[tuple[str, str, list[str]]]:
    """(document, tool, arguments) for every call in the docs."""
    return [
        (doc.relative_to(ROOT).as_posix(), tool, args)
        for doc in DOCS
        for line in command_lines(doc.read_text(encoding="utf-8"))
        for tool, args in calls(line)
    ]


def test_the_docs_call_every_tool():
    assert {tool for _, tool, _ in all_calls()} >= set(CLIS)


@pytest.mark.parametrize("doc", [doc.relative_to(ROOT).as_posix() for doc in DOCS])
def test_every_command_and_flag_in_the_docs_exists(doc):
    found = [p for d, tool, args in all_calls() if d == doc for p in problems(tool, args)]
    assert not found, "\n".join(found)


def test_an_unknown_flag_is_caught():
    assert problems("pretrain", ["--shards", "x", "--no-such-flag"]) == ["pretrain: no flag --no-such-flag"]
    assert problems("pretrain", ["export", "--checkpoint", "c", "--output", "o"]) == []
    assert problems("pipelines", ["corpus", "--runner", "DataflowRunner", "--no_such_beam_flag"]) == [
        "pipelines corpus: no flag --no_such_beam_flag"
    ]


class Probed(Exception):
    """Raised where a command would probe its buckets: every check before it has passed."""


def dataflow_calls() -> list[tuple[str, str, list[str]]]:
    return [call for call in all_calls() if "DataflowRunner" in call[2]]


def test_the_docs_show_a_dataflow_command_for_every_beam_stage():
    shown = {(tool, args[0]) for _, tool, args in dataflow_calls()}
    stages = ("wikipedia", "books", "corpus", "examples")
    assert shown >= {("wordpiece", "train"), *(("pipelines", stage) for stage in stages)}


@pytest.mark.parametrize("call", dataflow_calls(), ids=lambda c: f"{c[0]}:{c[1]} {c[2][0]}")
def test_every_dataflow_command_in_the_docs_passes_the_checks_before_submission(call, monkeypatch):
    """Each option's value parses as Beam reads it, and the command's own checks (settings, every
    worker path a bucket, Dataflow's project, region and temp_location) pass up to the bucket probe."""
    from click.testing import CliRunner

    from schemas import buckets

    _, tool, args = call
    PipelineOptions(args).get_all_options()  # a bad choice or type is SystemExit here

    def probed(**paths):
        raise Probed(paths)

    monkeypatch.setattr(buckets, "probe", probed)
    result = CliRunner().invoke(CLIS[tool], args)
    assert isinstance(result.exception, Probed), result.output
