"""``python -m schedsim`` (also the entry under ``torchrun -m schedsim execute``) and the ``schedsim`` console
script: :func:`schedsim.cli.main`, with Ctrl-C during its import (a second or so of numpy, pydantic and typer)
ending as it does later, exit 130 without a traceback."""

import sys


def main() -> None:
    """Import the command line and run it (:func:`schedsim.cli.main`)."""
    try:
        from schedsim.cli import main as cli_main
    except KeyboardInterrupt:
        import os

        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)  # not SystemExit: CPython may re-raise SIGINT at exit (see schedsim.cli._exit_interrupted)
    cli_main()


if __name__ == "__main__":
    main()
