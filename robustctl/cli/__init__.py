"""Command-line interface: thin typer apps over the core (parse → call core → render → exit code)."""
