"""`python -m lab`: the same as the `lab` command."""
import sys

from lab.cli import main

sys.exit(main())
