"""``python -m blockir``: the ``blockir`` command."""

import sys

from blockir.cli import main

if __name__ == "__main__":
    sys.exit(main())
