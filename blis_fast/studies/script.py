"""What the study scripts beside the examples share (configs/examples/*/study.py): their
command line's usage errors as the project's one line."""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as the project's one line (``error: ...``, exit code 2)."""

    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
