"""``python -m blockir.cli``: the ``blockir`` command."""

import sys

from blockir.cli import main

sys.exit(main())
