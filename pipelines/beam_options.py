"""The options a command hands on to Beam, checked when its command line is parsed. Beam drops an
option its parser does not know without a word (a typo such as ``--runer=DataflowRunner`` would run
a Dataflow job here), so each must be one of Beam's own options with a value it takes, else the
command stops (exit 2) naming it with the closest known option, the command's or Beam's.

The parser is Beam's: every ``PipelineOptions`` subclass's ``_add_argparse_args``, as
``PipelineOptions.get_all_options`` builds it. Beam's ``PipelineOptionsValidator`` is not run:
for Dataflow it reaches the network (it may create a staging bucket); ``check_job`` states what a
remote runner needs. ``chain`` (no Beam) runs this module as a program: ``python -m
pipelines.beam_options ARGS`` prints each problem and exits 2 when there is one."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence

import click
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser

from schemas.commands import UsageError


class _Parser(_BeamArgumentParser):
    def error(self, message: str):  # argparse would print the usage and exit
        raise ValueError(message.removeprefix("argument "))


def beam_parser() -> argparse.ArgumentParser:
    """Beam's own parser of every pipeline option it knows."""
    parser = _Parser(allow_abbrev=False, add_help=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return parser


def problems(args: Sequence[str], own: Iterable[str] = (), command: str = "") -> list[str]:
    """What is wrong with ``args`` as Beam options (empty: nothing): an option Beam does not know
    (named with the closest of ``own``, the command's options, and Beam's), a value its parser
    refuses, a negative number where Beam's default is not one, a runner it does not have."""
    parser = beam_parser()
    try:
        known, unknown = parser.parse_known_args(list(args))
    except ValueError as err:
        return [str(err)]
    names = [*own, *(s for a in parser._actions for s in a.option_strings)]
    where = f"`{command}` or of Beam" if command else "Beam"
    found = [
        f"{arg}: not an option of {where}{_closest(arg.split('=', 1)[0], names)}"
        for arg in unknown
        if arg[0] == "-"
    ]
    if not found and unknown:
        found.append(f"{unknown[0]}: not an argument of {where}")
    for action in parser._actions:
        value = getattr(known, action.dest, None)
        if type(value) in (int, float) and value < 0 <= (action.default or 0):
            found.append(f"{action.option_strings[0]} {value}: Beam takes 0 or more here")
    runner = known.runner or StandardOptions.DEFAULT_RUNNER
    try:
        from apache_beam.runners.runner import create_runner

        create_runner(runner)
    except (ValueError, ImportError, AttributeError) as err:
        stems = {n.lower().removesuffix("runner"): n for n in StandardOptions.KNOWN_RUNNER_NAMES}
        hint = _closest(runner.lower().removesuffix("runner"), stems) or f"; {type(err).__name__}: {err}"
        found.append(f"--runner {runner}: not a runner Beam has{hint}")
    return found


def _closest(name: str, known: Iterable[str] | dict[str, str]) -> str:
    """``; did you mean X?`` for the one of ``known`` (a dict: its value) closest to ``name``, or ""."""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {known[match[0]] if isinstance(known, dict) else match[0]}?" if match else ""


def refuse_unknown(ctx: click.Context) -> None:
    """:class:`UsageError` (exit 2) naming each of the options ``ctx``'s command hands on to Beam
    (``ctx.args``) that :func:`problems` finds wrong; a ``file://`` URL among the command's own
    option values becomes the local path it names (Beam's filesystems take none)."""
    own = [name for p in ctx.command.params for name in (*p.opts, *p.secondary_opts)]
    if found := problems(ctx.args, own, ctx.command_path):
        raise UsageError("; ".join(found))
    ctx.params.update((name, _local(value)) for name, value in ctx.params.items())


class BeamCommand(click.Command):
    """A click command that hands the options it does not know on to Beam, each checked by
    :func:`refuse_unknown` as the command line is parsed, before anything runs."""

    def __init__(self, *args, **kwargs) -> None:
        settings = {"ignore_unknown_options": True, "allow_extra_args": True}
        kwargs["context_settings"] = {**settings, **(kwargs.get("context_settings") or {})}
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        refuse_unknown(ctx)
        return rest


def _local(value):
    if isinstance(value, tuple):
        return tuple(map(_local, value))
    return value.removeprefix("file://") if isinstance(value, str) else value


if __name__ == "__main__":
    found = problems(sys.argv[1:])
    if found:
        print(*found, sep="\n")
    sys.exit(2 if found else 0)
