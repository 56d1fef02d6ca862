"""``python -m h5sidecar.cli ...``: the ``h5sidecar`` command."""

import sys

from h5sidecar.cli import main

sys.exit(main())
