"""The exit rule every command shares (README, "Calling the tools"), kept where no command's own
code can: 0 it did what it said; 1 it ran and failed; 2 its command line is wrong; 128 + N a stop
signal N ended it (130 SIGINT, 143 SIGTERM). Every failure is one ``error:`` line on standard
error, never a traceback.

Each tool's top-level click group (or command) is built with ``cls=OneLineGroup`` (or
:class:`OneLineCommand`), which, while the command runs,

- turns SIGINT and SIGTERM into :class:`Stopped` (a ``KeyboardInterrupt``, so ``except
  Exception`` never swallows it and every ``finally`` still runs: temporary files are removed,
  nothing is marked complete), which ends the command with one line and 128 + the signal's
  number (under torchrun, only local rank 0 prints it: every process of a node receives the
  same Ctrl-C, and one line per node says it). Code that stops gracefully instead (``pretrain`` saves a checkpoint first) installs its
  own handlers and raises :class:`Stopped` itself once it has stopped; code whose libraries
  rewrap the exception (Beam's runners turn it into a ``RuntimeError``) asks
  :func:`stop_received` which signal came;
- turns a :class:`CommandError` into one ``error:`` line and its exit code (2 for a
  :class:`UsageError`, 1 otherwise), and an ``OSError`` no command caught (a full disk while
  writing) into one line naming the file (:func:`os_error_line`) and exit 1.

This is the one place where an error becomes a line and an exit code: commands raise, never
print and exit themselves. Click's own parsing errors keep click's form (Usage line, exit 2).
Flag defaults come from the typed configs (:func:`config_option`), declared once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click

from schemas.files import WriteError

EXIT_FAILED = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed (129)

_received: list[int] = []  # the stop signals this process received while a command ran


class CommandError(Exception):
    """A command ran and failed: one line (the message) and exit status ``exit_code`` (1). The
    message names the file or flag and says what to do."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    """The user's command line is wrong (a value or combination the settings refuse, an output
    over an input), found before anything is read: exit 2."""

    exit_code = 2


class InputError(CommandError):
    """An input the user named is missing, incomplete, damaged or of the wrong kind (a shard, a
    manifest, a vocabulary, a checkpoint, a data file, or a file this project wrote earlier)."""


class OutputError(CommandError):
    """The output the user named cannot be used: another writer holds it, it holds files that are
    not this command's, or it cannot be written."""


class Stopped(KeyboardInterrupt):
    """A stop signal ended the command: exit status 128 + ``signum``; ``detail`` says what is left
    (a checkpoint saved, an output not marked complete)."""

    def __init__(self, signum: int, detail: str = "") -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.detail = signum, detail

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process ended by it."""
        return 128 + self.signum

    def line(self) -> str:
        """``interrupted by SIGINT; <detail>``."""
        return f"{self.args[0]}; {self.detail}" if self.detail else self.args[0]


def stop_received() -> int | None:
    """The first stop signal received while the command ran (None: none)."""
    return _received[0] if _received else None


def raise_if_stopped(detail: str = "") -> None:
    """Raise :class:`Stopped` (with ``detail``) when a stop signal came: for code that catches a
    library's exception that may be a stop in disguise (Beam's runners rewrap it)."""
    signum = stop_received()
    if signum is not None:
        raise Stopped(signum, detail) from None


def raise_stopped(signum: int, frame: object) -> None:
    """The stop signals' handler: record the signal and raise :class:`Stopped`."""
    _received.append(signum)
    raise Stopped(_received[0])


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM raise :class:`Stopped` (each time: a second signal
    also interrupts a clean-up that hangs); the previous handlers are restored after it. Outside
    the main thread (where Python cannot install handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {s: signal.signal(s, raise_stopped) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def os_error_line(err: OSError) -> str:
    """One line for an ``OSError``: the file and the system's reason, or the error's first line."""
    if isinstance(err, WriteError):
        return str(err)
    if err.filename is not None and err.strerror:
        target = f" -> {err.filename2}" if err.filename2 is not None else ""
        return f"{err.filename}{target}: {err.strerror}"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else 'no message'}"


def one_line(text: str) -> str:
    """``text`` on one line: a newline or carriage return inside it (a path, a value read from a
    file) is shown escaped."""
    return text.strip().replace("\r", "\\r").replace("\n", "\\n")


def _invoke(invoke, ctx: click.Context):
    """Run a command's ``invoke`` under :func:`stopping_on_signals`, ending a stop, a
    :class:`CommandError` or an uncaught ``OSError`` with one ``error:`` line and its exit status."""
    with stopping_on_signals():
        try:
            return invoke(ctx)
        except KeyboardInterrupt as err:  # ours, or one a library raised again in its place
            stop = err if isinstance(err, Stopped) else Stopped(stop_received() or signal.SIGINT)
            if os.environ.get("LOCAL_RANK", "0") == "0":  # one line a node under torchrun
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


class OneLineGroup(click.Group):
    """A click group that keeps the exit rule for its subcommands (see the module's docstring)."""

    def invoke(self, ctx: click.Context):
        return _invoke(super().invoke, ctx)


class OneLineCommand(click.Command):
    """A click command that keeps the exit rule (see the module's docstring)."""

    def invoke(self, ctx: click.Context):
        return _invoke(super().invoke, ctx)


def config_default(config: type, name: str) -> Any:
    """The default of the field ``name`` of the dataclass ``config`` (a nested one is named by a
    dotted path, ``pairs.max_seq_length``): a flag's default is declared there, once."""
    head, _, rest = name.partition(".")
    field = {f.name: f for f in dataclasses.fields(config)}[head]
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        raise KeyError(f"{config.__name__}.{head} has no default")
    if not rest:
        return value
    return config_default(type(value), rest)


def config_option(config: type, name: str, *decls: str, **attrs: Any) -> Callable:
    """A click option whose default is the config's (:func:`config_default`), shown in ``--help``.
    ``decls`` default to ``--<name with dashes>`` (the last part of a dotted name)."""
    flag = "--" + name.rsplit(".", 1)[-1].replace("_", "-")
    attrs.setdefault("show_default", True)
    return click.option(*(decls or (flag,)), default=config_default(config, name), **attrs)
