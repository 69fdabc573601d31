"""trainguard: resumable training for distributed PyTorch jobs.

Public surface: this package's version, :mod:`trainguard.train` (imported inside training
processes), :mod:`trainguard.testing`, the ``trainguard`` command, and the file, document and IPC
formats described in ``docs/``. Every other module may change without notice.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
