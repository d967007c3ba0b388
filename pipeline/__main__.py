"""`python -m pipeline` runs the spark-nightly command line."""

import sys

from pipeline.cli import main

sys.exit(main())
