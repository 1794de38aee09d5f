"""The options a command hands on to Beam, checked as its command line is parsed: Beam drops what
its parser does not know without a word (``--runer=DataflowRunner`` would run a Dataflow job here),
so each must be one of Beam's own with a value Beam's parser (every ``PipelineOptions`` subclass's
``_add_argparse_args``, as ``get_all_options`` builds it) takes. Beam's ``PipelineOptionsValidator``
is not run: for Dataflow it reaches the network. ``chain`` (no Beam) runs this module as a program:
``python -m pipelines.beam_options ARGS`` prints each problem and exits 2 when there is one."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence

import click
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser

from schemas.commands import UsageError

PASS_ON = {"ignore_unknown_options": True, "allow_extra_args": True}
"""The click settings of a command whose other options go to Beam."""


def beam_parser() -> argparse.ArgumentParser:
    """Beam's own parser of every pipeline option it knows (an error raised, not printed)."""
    parser = _BeamArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return parser


def problems(args: Sequence[str], own: Iterable[str] = (), command: str = "") -> list[str]:
    """What is wrong with ``args`` as Beam options: an option Beam does not know (named with the
    closest of the command's options ``own`` and Beam's), a value Beam's parser refuses, a negative
    number where Beam's default is not one, a runner Beam has not."""
    parser = beam_parser()
    try:
        known, unknown = parser.parse_known_args(list(args))
    except argparse.ArgumentError as err:
        return [str(err).removeprefix("argument ")]
    names, where = [*own, *parser._option_string_actions], f"`{command}` or of Beam" if command else "Beam"
    found = [
        f"{a}: not an option of {where}{_closest(a.split('=')[0], names)}" for a in unknown if a[0] == "-"
    ]
    found += [f"{unknown[0]}: not an argument of {where}"] if unknown and not found else []
    for action in parser._actions:
        value = getattr(known, action.dest, None)
        if type(value) in (int, float) and value < 0 <= (action.default or 0):  # a count, a size, a port
            found.append(f"{action.option_strings[0]} {value}: Beam takes 0 or more here")
    runners = {n.lower().removesuffix("runner"): n for n in StandardOptions.KNOWN_RUNNER_NAMES}
    runner = known.runner or ""  # a module path is Beam's to import
    if runner and "." not in runner and (stem := runner.lower().removesuffix("runner")) not in runners:
        hint = _closest(stem, runners) or f"; Beam has {', '.join(runners.values())}"
        found.append(f"--runner {runner}: not a runner Beam has{hint}")
    return found


def _closest(name: str, known: Iterable[str] | dict[str, str]) -> str:
    """``; did you mean X?`` for the one of ``known`` (a dict: its value) closest to ``name``, or ""."""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {known[match[0]] if isinstance(known, dict) else match[0]}?" if match else ""


def refuse_unknown(ctx: click.Context) -> None:
    """:class:`UsageError` (exit 2) naming each option that ``ctx``'s command hands on to Beam
    (``ctx.args``) and :func:`problems` finds wrong."""
    own = [name for p in ctx.command.params for name in (*p.opts, *p.secondary_opts)]
    if found := problems(ctx.args, own, ctx.command_path):
        raise UsageError("; ".join(found))


class BeamCommand(click.Command):
    """A click command (with :data:`PASS_ON`) whose other options, handed on to Beam, are checked
    by :func:`refuse_unknown` as the command line is parsed, before anything runs."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        refuse_unknown(ctx)
        return rest


if __name__ == "__main__":
    print(*(found := problems(sys.argv[1:])), sep="\n")
    sys.exit(2 if found else 0)
