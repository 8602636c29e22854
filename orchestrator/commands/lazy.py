"""Command groups whose commands are imported when they run, not when the CLI starts.

Every command module pulls in what it needs (Temporal's SDK, scipy, FastAPI, the
workflows), so importing them all up front made ``orchestrator --help`` take a second
and added that second to every command. A :class:`LazyGroup` knows each command by a
:class:`Lazy` entry (where it lives and the one line its parent's ``--help`` shows) and
imports the module only when the command is resolved to run, or asked for its own help.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

import typer
import typer.main
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperGroup

__all__ = ["Lazy", "LazyGroup", "all_commands"]


@dataclass(frozen=True)
class Lazy:
    """A command defined in ``module``.

    ``attr`` is either a Typer app or a ``register(app)`` function. With ``group`` the
    app itself is the command (a group of subcommands); otherwise the command is the one
    of that name among the app's (or the registered) commands. ``help`` is the line the
    parent group's ``--help`` lists; tests/platform/test_cli.py checks it against the
    command's own.
    """

    module: str
    attr: str
    help: str
    group: bool = False

    def load(self, name: str) -> Command:
        target: Any = getattr(importlib.import_module(self.module), self.attr)
        holder = typer.Typer()
        if isinstance(target, typer.Typer):
            if self.group:
                holder.add_typer(target, name=name)
            else:
                holder = target
        else:
            target(holder)
        command = typer.main.get_command(holder)
        if isinstance(command, TyperGroup):
            found = command.commands.get(name)
            if found is None:
                raise LookupError(f"{self.module}.{self.attr} defines no command {name!r}")
            return found
        return command


class LazyGroup(TyperGroup):
    """A Typer group with :class:`Lazy` commands besides its ordinary ones.

    A subclass sets ``lazy`` (``name -> Lazy`` or an already built command, in the order
    ``--help`` lists them), or an instance gets it as a keyword.
    """

    lazy: Mapping[str, Lazy | Command] = {}

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy | Command] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        if lazy is not None:
            self.lazy = lazy
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*self.lazy, *(n for n in super().list_commands(ctx) if n not in self.lazy)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        loaded = self.commands.get(cmd_name)
        if loaded is not None:
            return loaded
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        if isinstance(entry, Command):
            command = entry
        elif self._listing:
            # Listed in this group's help: the line is known without the import.
            return TyperCommand(cmd_name, help=entry.help)
        else:
            command = entry.load(cmd_name)
        self.commands[cmd_name] = command
        return command

    @contextmanager
    def _help_listing(self) -> Iterator[None]:
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def format_help(self, ctx: Context, formatter: Any) -> None:
        with self._help_listing():
            super().format_help(ctx, formatter)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as error:
            # Typer suggests near misses from the commands loaded so far: offer every name.
            if self.suggest_commands and args and "Did you mean" not in error.message:
                matches = get_close_matches(args[0], self.list_commands(ctx))
                if matches:
                    names = ", ".join(repr(m) for m in matches)
                    error.message = f"{error.message.rstrip('.')}. Did you mean {names}?"
            raise


def all_commands(group: TyperGroup, ctx: Context | None = None) -> dict[str, Command]:
    """Every command of ``group`` by name, lazy ones imported: for tests and docs checks."""
    ctx = ctx or Context(group)
    out: dict[str, Command] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None:
            out[name] = command
    return out
