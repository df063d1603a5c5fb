"""The errors tvm_ext raises for bad input.

Every one of them carries a one-line message that names the problem (the CLI prints it as is and
exits with code 2). Failures *during* tuning (a config that does not build, a kernel that crashes
or gives a wrong answer) are not exceptions: they become records with an error number.
"""


class TvmExtError(ValueError):
    """Base class: bad input given to tvm_ext (a user error, not a bug)."""


class WorkloadError(TvmExtError):
    """Unknown op, malformed shape, unsupported dtype or layout."""


class SpaceError(TvmExtError):
    """A tuning-space file or knob definition that cannot be used."""


class LogError(TvmExtError):
    """A tuning log that is missing, unreadable, corrupt, or for another target."""


class TemplateError(TvmExtError):
    """No template applies to a workload on a target."""


def run_command(prog: str, run, argv=None) -> int:
    """A command line's ``main``: ``run(argv)``, a TvmExtError printed as the one line
    ``<prog>: error: <message>`` with exit code 2 (tvm_ext.tune, tvm_ext.report)."""
    import logging  # noqa: PLC0415
    import sys  # noqa: PLC0415
    logging.basicConfig(format="%(message)s")  # no-op when the caller configured logging
    try:
        return run(argv)
    except TvmExtError as err:
        sys.stderr.write(f"{prog}: error: {err}\n")
        return 2
