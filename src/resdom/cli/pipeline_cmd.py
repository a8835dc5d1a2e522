"""Placeholder: commands are added by their issue."""

import typer


def register(app: typer.Typer) -> None:
    pass
