"""``python -m autonomous``: the same as the ``autonomous`` command."""

from ._cli import main

if __name__ == "__main__":
    main()
