"""``trainguard config``: ``show`` the effective ``run`` settings and where each came from;
``check`` what a fault configuration file will do before it is rolled out."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from trainguard.cli import run_command
from trainguard.controller import fault_config
from trainguard.faults.device import fault_codes

__all__ = ["config_app", "effective"]

config_app = typer.Typer(help="trainguard's own settings (show) and fault configuration "
                              "files in the original's formats (check).", no_args_is_help=True)


def _toml(value: Any) -> str:
    """A value as TOML writes it, so that `config show` can seed a configuration file."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(str(value))


@config_app.command("show")
def show(
    config: Annotated[Path | None, typer.Option(
        metavar="FILE", envvar="TRAINGUARD_CONFIG",
        help="The configuration file `trainguard run --config` would read.")] = None,
) -> None:
    """Print the settings `trainguard run` would use, as TOML, each with where it came from
    (default, file, env); flags given to `run` override them all."""
    try:
        file = run_command.load_config(config, os.environ)
        rows = run_command.effective(file=file, environ=os.environ, file_name=str(config))
    except run_command.UsageError as error:
        typer.echo(f"trainguard: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo("# trainguard run settings; precedence: default < file"
               + (f" ({config})" if config else "") + " < env (TRAINGUARD_*) < flag")
    for key, value, source in rows:
        line = f"# {key} is not set" if value is None else f"{key} = {_toml(value)}"
        typer.echo(f"{line:<48} # {source}")


def effective(value: Any) -> Any:
    """A loaded configuration as plain JSON: codes in their configured spelling, levels by
    name, sets sorted."""
    spellings: Mapping[Any, str] = getattr(value, "spellings", {})

    def plain(item: Any) -> Any:
        if isinstance(item, enum.Enum):
            return str(item)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields = {field.name: plain(getattr(item, field.name))
                      for field in dataclasses.fields(item) if field.name != "spellings"}
            if "spelling" in fields:  # a rule: its code as configured, not as a number
                fields["event_id"] = fields.pop("spelling")
            return fields
        if isinstance(item, Mapping):
            return {(spellings.get(key) or fault_codes.spell(key) if isinstance(key, int)
                     else str(key)): plain(entry) for key, entry in item.items()}
        if isinstance(item, frozenset | set):
            return sorted(plain(entry) for entry in item)
        if isinstance(item, list | tuple):
            return [plain(entry) for entry in item]
        return item

    return plain(value)


@config_app.command("check")
def check(
    files: Annotated[list[Path], typer.Argument(
        metavar="FILE...", exists=True, dir_okay=False,
        help="faultCode.json, faultCustomization.json, SwitchFaultCode.json, "
             "NodeDConfiguration.json, publicFaultConfiguration.json or "
             "publicCustomization.json (the kind is taken from the name; see --kind).")],
    kind: Annotated[fault_config.ConfigKind | None, typer.Option(
        help="The kind of every FILE, for files named otherwise.")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Only the problems, not the effective configuration.")] = False,
) -> None:
    """Validate fault configuration files: list every entry ignored or replaced by a default,
    and why, then the configuration that takes effect. Exit code 0: no problem; 1: entries
    were ignored or defaulted; 2: a file cannot be used at all."""
    worst = 0
    for path in files:
        chosen = kind or fault_config.kind_of(path)
        if chosen is None:
            known = ", ".join(k.value for k in fault_config.ConfigKind)
            typer.echo(f"trainguard: {path}: which kind of file is it? Name it like the "
                       f"original ({known}) or pass --kind.", err=True)
            worst = 2
            continue
        loaded, problems = fault_config.parse_file(path, chosen)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        typer.echo(f"{path} ({chosen}): " + (count if problems else "no problems"))
        for problem in problems:
            typer.echo(f"  {problem.describe()}")
        if loaded is None:
            typer.echo("  the file cannot be used: the default (or, in a running job, the last "
                       "good configuration) stays in force")
            worst = 2
            continue
        worst = max(worst, 1 if problems else 0)
        if not quiet:
            typer.echo(json.dumps(effective(loaded), indent=2))
    raise typer.Exit(worst)
