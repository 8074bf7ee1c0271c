"""``python -m robustctl``."""

from robustctl.cli.main import run

if __name__ == "__main__":
    run()
