"""Command line (Typer). Each module registers one group of commands on the app in ``main``."""
