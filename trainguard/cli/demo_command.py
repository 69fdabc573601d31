"""Placeholder until the demonstration is wired."""
import click


def command() -> click.Command:
    return click.Command("demo")
