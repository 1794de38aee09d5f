"""The exit rule every command shares: 0 it did what it said; 1 it ran and failed; 2 its command
line is wrong; 128 + N a stop signal N ended it (130 SIGINT, 143 SIGTERM); every failure one
``error:`` line on standard error, never a traceback.

Each tool's top-level click group or command uses ``cls=OneLineGroup`` (:class:`OneLineCommand`).
Commands raise, never print and exit. Flag defaults come from the configs (:func:`config_option`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import click

EXIT_FAILED = 1
MAX_SEED = 2**32 - 1
"""The largest seed of every command: each generator a seed reaches (torch, NumPy, Python) takes it."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed (129)
CHAIN_STAGE = "BERT_CHAIN_STAGE"  # set for a command `chain` runs as a stage: its stop line is the chain's

_received: list[int] = []  # the stop signals this process received while a command ran


class CommandError(Exception):
    """A command ran and failed: one line naming the file or flag and what to do; exit status 1."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    """The command line is wrong (a value the settings refuse, an output over an input): exit 2."""

    exit_code = 2


class InputError(CommandError):
    """An input (or a file this project wrote earlier) is missing, incomplete, damaged or wrong."""


class OutputError(CommandError):
    """The output is another writer's, holds files not this command's, or cannot be written."""


class WriteError(OSError):
    """A file could not be written (a full disk, no permission, a lost connection); nothing is left."""

    def __str__(self) -> str:
        return f"{self.filename}: cannot write it ({self.strerror})"


class Stopped(KeyboardInterrupt):
    """A stop signal ended the command: exit 128 + ``signum``; ``detail`` says what is left."""

    def __init__(self, signum: int, detail: str = "") -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.detail = signum, detail

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # as a shell reports a process a signal ended

    def line(self) -> str:
        return f"{self.args[0]}; {self.detail}" if self.detail else self.args[0]


def stop_received() -> int | None:
    """The first stop signal received while the command ran (None: none)."""
    return _received[0] if _received else None


def raise_if_stopped(detail: str = "") -> None:
    """Raise :class:`Stopped` if a stop signal came (a library's exception may be one in disguise)."""
    signum = stop_received()
    if signum is not None:
        raise Stopped(signum, detail) from None


def raise_stopped(signum: int, frame: object) -> None:
    """The stop signals' handler: record the signal and raise :class:`Stopped`."""
    _received.append(signum)
    raise Stopped(_received[0])


def os_error_line(err: OSError) -> str:
    """One line for an ``OSError``: the file and the system's reason, or the error's first line."""
    if isinstance(err, WriteError):
        return str(err)
    if err.filename is not None and err.strerror:
        target = f" -> {err.filename2}" if err.filename2 is not None else ""
        return f"{err.filename}{target}: {err.strerror}"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else 'no message'}"


def seed_problems(seed: int, count: int = 1, flag: str = "--seed") -> list[str]:
    """The problem with ``seed`` unless it and the ``count - 1`` seeds after it lie in 0..MAX_SEED."""
    top = MAX_SEED - (count - 1)
    return [] if 0 <= seed <= top else [f"{flag} must be between 0 and {top:,}, got {seed:,}"]


def one_line(text: str) -> str:
    """``text`` on one line: a newline or carriage return inside it is shown escaped."""
    return text.strip().replace("\r", "\\r").replace("\n", "\\n")


def _invoke(invoke, ctx: click.Context):
    """Run a command's ``invoke`` with SIGINT and SIGTERM raising :class:`Stopped` (each time: a
    second signal also interrupts a clean-up that hangs; in the main thread only, where Python can
    install handlers), ending a stop, a :class:`CommandError` or an ``OSError`` with one line."""
    main = threading.current_thread() is threading.main_thread()
    _received.clear()
    previous = {s: signal.signal(s, raise_stopped) for s in STOP_SIGNALS} if main else {}
    try:
        with _usage_in_one_line():  # a subcommand's command line
            return invoke(ctx)
    except KeyboardInterrupt as err:  # ours, or one a library raised again in its place
        stop = err if isinstance(err, Stopped) else Stopped(stop_received() or signal.SIGINT)
        if os.environ.get("LOCAL_RANK", "0") == "0" and CHAIN_STAGE not in os.environ:  # one line a node
            click.echo(f"error: {stop.line()}", err=True)
        ctx.exit(stop.exit_code)
    except CommandError as err:
        click.echo(f"error: {one_line(str(err))}", err=True)
        ctx.exit(err.exit_code)
    except OSError as err:
        if err.errno == errno.EPIPE:  # click ends a broken pipe quietly itself
            raise
        click.echo(f"error: {one_line(os_error_line(err))}", err=True)
        ctx.exit(EXIT_FAILED)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _usage_in_one_line() -> Iterator[None]:
    """A wrong command line (not ``--help``'s) as one ``error:`` line, exit 2; an unknown option
    named with the closest known one, as `pipelines` names one that is not Beam's either."""
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.UsageError as err:
        line = one_line(err.format_message())
        if isinstance(err, click.NoSuchOption):
            hint = f"; did you mean {err.possibilities[0]}?" if err.possibilities else ""
            line = f"{err.option_name}: not an option of `{err.ctx.command_path if err.ctx else ''}`{hint}"
        click.echo(f"error: {line}", err=True)
        raise click.exceptions.Exit(err.exit_code) from None


class _OneLine:
    def make_context(self, *args, **kwargs) -> click.Context:
        with _usage_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context):
        return _invoke(super().invoke, ctx)


class OneLineGroup(_OneLine, click.Group):
    """A click group that keeps the exit rule for its subcommands (see the module's docstring)."""


class OneLineCommand(_OneLine, click.Command):
    """A click command that keeps the exit rule (see the module's docstring)."""


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Python warnings raised in the block, each text once as one ``warning:`` line on standard
    error (never a source line), when the block ends."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for text in dict.fromkeys(one_line(str(w.message)) for w in caught):
        click.echo(f"warning: {text}", err=True)


def config_default(config: type, name: str) -> Any:
    """The default of the field ``name`` of the dataclass ``config`` (dotted for a nested one)."""
    head, _, rest = name.partition(".")
    field = {f.name: f for f in dataclasses.fields(config)}[head]
    value = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    return config_default(type(value), rest) if rest else value


def config_option(config: type, name: str, *decls: str, **attrs: Any) -> Callable:
    """A click option whose default is the config's, ``--<name with dashes>`` unless ``decls`` name it."""
    flag = "--" + name.rsplit(".", 1)[-1].replace("_", "-")
    attrs.setdefault("show_default", True)
    return click.option(*(decls or (flag,)), default=config_default(config, name), **attrs)
