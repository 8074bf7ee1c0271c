"""``python -m bench``: run the fan-out benchmark (see :mod:`bench.fanout`)."""

from bench.fanout import main

raise SystemExit(main())
