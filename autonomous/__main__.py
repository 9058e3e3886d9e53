"""``python -m autonomous``: the same as the ``autonomous`` command."""

import sys

from ._cli import main
from ._cli._signals import exit_status

if __name__ == "__main__":
    sys.exit(exit_status(main()))  # no thread a stop abandoned holds the exit
