"""The names that become a directory, a file, a store key or a document name, checked at every
entry (command-line flags, a host's Register message at the controller, a public fault's
influence), so that no name escapes its directory or key prefix.

Two rules:

* **node names** (a host, a namespace): a DNS-1123 subdomain, as Kubernetes names nodes and
  the original's public faults name them: 1 to 253 lower-case letters, digits, ``-`` and
  ``.``, starting and ending with a letter or digit; :func:`node_name` also refuses ``..``,
  which DNS never has in a name;
* **job ids** (torchrun's ``--rdzv-id``, the run id): looser, because torchrun's accept upper
  case and ``_`` and people's scripts use them: 1 to 128 letters, digits, ``.``, ``_`` and
  ``-``, starting with a letter or digit. Neither ``/`` nor a leading ``.`` can pass, so a job
  id is always one plain path component (never ``..``) and never holds a key separator.

Device names (``HOST/device-N``) are built from a checked node name and an index, never taken
as text from outside.
"""

from __future__ import annotations

import re

__all__ = ["JOB_ID_RULE", "NODE_NAME_RULE", "InvalidNameError", "job_id", "node_name"]

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
JOB_ID_RULE = ("1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit "
               "(it names a directory and a store key)")
_NODE_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
NODE_NAME_RULE = ("a DNS-1123 subdomain: 1 to 253 lower-case letters, digits, '-' and '.', "
                  "starting and ending with a letter or digit")


class InvalidNameError(ValueError):
    """A name that breaks its rule; the message names what it names, the value and the rule."""


def job_id(value: str, *, what: str = "job id") -> str:
    """``value`` when it is a valid job id.

    Raises:
        InvalidNameError: it is not.
    """
    if not _JOB_ID.fullmatch(value):
        raise InvalidNameError(f"{what} {_show(value)} is not valid: a job id is {JOB_ID_RULE}")
    return value


def node_name(value: str, *, what: str = "node name") -> str:
    """``value`` when it is a valid node name.

    Raises:
        InvalidNameError: it is not.
    """
    if not _NODE_NAME.fullmatch(value) or ".." in value:
        raise InvalidNameError(f"{what} {_show(value)} is not valid: a node name is "
                               f"{NODE_NAME_RULE}")
    return value


def _show(value: str) -> str:
    """The name as the message shows it: quoted and cut short (it may come from anyone)."""
    text = repr(value)
    return text if len(text) <= 70 else f"{text[:67]}..."
