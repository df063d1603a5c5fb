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
