#!/usr/bin/env python3
"""The collocated-training benchmark: `python bench/collocated.py --help`.

The runner is the package beside this script, bench/collocated_bench/ (its
__init__.py says what it measures and which module does what). The child
processes it starts (trainers, producers) are this script again, run with
--role.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded by path rather than run as a script
    sys.path.insert(0, _HERE)

from collocated_bench import main  # noqa: E402 - after the path is set

if __name__ == "__main__":
    sys.exit(main())
