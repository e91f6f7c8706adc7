"""``python -m adapters.cli``: the ``foldline`` command."""

import sys

from adapters.cli.main import main

sys.exit(main())
