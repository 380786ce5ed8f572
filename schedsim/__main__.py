"""``python -m schedsim`` (also the entry under ``torchrun -m schedsim execute``) and the ``schedsim`` console
script: a plain ``check`` or ``predict`` command line runs without typer (:func:`schedsim.clicore.fast_command`),
any other through :func:`schedsim.cli.main`; with Ctrl-C during the imports (a second or so of numpy, pydantic
and typer) ending as it does later, exit 130 without a traceback."""

import sys


def main() -> None:
    """Import the command line and run it (:func:`schedsim.clicore.fast_command`, else :func:`schedsim.cli.main`)."""
    try:
        from schedsim.clicore import fast_command, run_process

        run = fast_command(sys.argv[1:])
        if run is None:
            from schedsim.cli import main as cli_main
    except KeyboardInterrupt:
        import os

        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)  # not SystemExit: CPython may re-raise SIGINT at exit (see schedsim.clicore.exit_interrupted)
    if run is None:
        cli_main()
    else:
        run_process(run)


if __name__ == "__main__":
    main()
