"""What devices are called in the device document: ``deviceNameCustomization.json`` (SPEC D1;
the seed's table 7).

The file has four fields, with the seed's rules:

* ``ResourceType`` (required): Ascend910, Ascend310 or Ascend310P; ours adds GPU, the type of
  the nvml backend's default names;
* ``DevicePublicType`` (required): the resource name, ``xxx.xxx/xxx`` where each ``xxx`` is
  letters and digits, 10 to 32 characters (``huawei.com/Ascend910``);
* ``DevicePublicNamePre`` (required): the prefix a device's physical id follows, letters,
  digits and ``-``, starting with a letter, 2 to 16 characters (``Ascend910-``);
* ``PodConfigurationName`` (required when ResourceType is Ascend910): the pod annotation that
  names the mounted chips, letters, digits, ``-``, ``/`` and ``.``, starting with a letter and
  ending with a letter or digit, 10 to 63 characters.

A file with any bad value is not used: the defaults stay, and each problem names its field. A
missing file is no problem (the defaults are what operators know). Defaults: the original's
(``huawei.com/Ascend910``, ``Ascend910-<id>``) for the sim and npu backends, so that its
documents read unchanged; ``nvidia.com/gpu`` and ``gpu-<id>`` (the NVIDIA device plugin's
resource name) for nvml, where Ascend names would mislead.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from trainguard.faults.config_problems import Action, ConfigProblem

__all__ = ["ASCEND_NAMING", "FILE", "GPU_NAMING", "RESOURCE_TYPES", "DeviceNaming",
           "NamingError", "default_naming"]

FILE = "deviceNameCustomization.json"
RESOURCE_TYPES = ("Ascend910", "Ascend310", "Ascend310P", "GPU")
_PUBLIC_TYPE = re.compile(r"[A-Za-z0-9]+\.[A-Za-z0-9]+/[A-Za-z0-9]+")
_NAME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_POD_CONFIGURATION = re.compile(r"[A-Za-z]([A-Za-z0-9./-]*[A-Za-z0-9])?")
_KEYS = {"ResourceType": "resource_type", "DevicePublicType": "public_type",
         "DevicePublicNamePre": "name_prefix", "PodConfigurationName": "pod_configuration_name"}


class NamingError(ValueError):
    """A naming value that breaks the seed's rule; ``field`` is the file's key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _problem(value: str, *, low: int, high: int, pattern: re.Pattern[str],
             rule: str) -> str:
    if not low <= len(value) <= high:
        return f"{value!r} has {len(value)} characters; {low} to {high} are allowed"
    if not pattern.fullmatch(value):
        return f"{value!r} is not {rule}"
    return ""


@dataclasses.dataclass(frozen=True)
class DeviceNaming:
    resource_type: str
    public_type: str
    name_prefix: str
    pod_configuration_name: str = ""

    def __post_init__(self) -> None:
        """Raises: NamingError: a value breaks its rule (the first one found)."""
        if self.resource_type not in RESOURCE_TYPES:
            raise NamingError("ResourceType", f"{self.resource_type!r} is not one of "
                              f"{', '.join(RESOURCE_TYPES)}")
        checks = [
            ("DevicePublicType", self.public_type, 10, 32, _PUBLIC_TYPE,
             "xxx.xxx/xxx with letters and digits for each xxx"),
            ("DevicePublicNamePre", self.name_prefix, 2, 16, _NAME_PREFIX,
             "letters, digits and '-', starting with a letter"),
        ]
        if self.pod_configuration_name or self.resource_type == "Ascend910":
            checks.append(("PodConfigurationName", self.pod_configuration_name, 10, 63,
                           _POD_CONFIGURATION, "letters, digits, '-', '/' and '.', starting "
                           "with a letter and ending with a letter or digit (required for "
                           "Ascend910)"))
        for field, value, low, high, pattern, rule in checks:
            problem = _problem(value, low=low, high=high, pattern=pattern, rule=rule)
            if problem:
                raise NamingError(field, problem)

    def public_name(self, physical_id: int) -> str:
        """``Ascend910-3``: what the document calls the device with this physical id."""
        return f"{self.name_prefix}{physical_id}"

    @classmethod
    def from_document(cls, document: object, *, default: DeviceNaming, file: str = FILE
                      ) -> tuple[DeviceNaming, list[ConfigProblem]]:
        """The naming a parsed file gives; ``default`` and the problems when it is bad."""
        def rejected(field: str, message: str) -> tuple[DeviceNaming, list[ConfigProblem]]:
            problems.append(ConfigProblem(file, "", field, f"{message}; the default names "
                                          "stay", Action.DEFAULT_USED))
            return default, problems

        problems: list[ConfigProblem] = []
        if not isinstance(document, dict):
            return rejected("", "the file is not a JSON object")
        for key in document:
            if key not in _KEYS:
                problems.append(ConfigProblem(file, "", str(key), f"unknown field (known: "
                                              f"{', '.join(_KEYS)})", Action.IGNORED))
        values = {}
        for key, field in _KEYS.items():
            value = document.get(key, "")
            if not isinstance(value, str):
                return rejected(key, f"expected a string, got {value!r}")
            if not value and key != "PodConfigurationName":
                return rejected(key, "required")
            values[field] = value
        try:
            return cls(**values), problems
        except NamingError as error:
            return rejected(error.field, error.message)

    @classmethod
    def load(cls, path: Path, *, default: DeviceNaming
             ) -> tuple[DeviceNaming, list[ConfigProblem]]:
        """The naming in ``path``: ``default`` when there is no file, or when it is bad (and
        the problems)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return default, []
        except OSError as error:
            return default, [ConfigProblem(str(path), "", "", f"cannot be read "
                                           f"({error.strerror}); the default names stay",
                                           Action.DEFAULT_USED)]
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            return default, [ConfigProblem(str(path), "", "", f"not JSON ({error.msg}, line "
                                           f"{error.lineno}); the default names stay",
                                           Action.DEFAULT_USED)]
        return cls.from_document(document, default=default, file=str(path))


ASCEND_NAMING = DeviceNaming("Ascend910", "huawei.com/Ascend910", "Ascend910-",
                             "ascend.kubectl.kubernetes.io/ascend-910-configuration")
"""The original's names."""
GPU_NAMING = DeviceNaming("GPU", "nvidia.com/gpu", "gpu-")


def default_naming(backend: str) -> DeviceNaming:
    """The names a backend's devices get without a customization file."""
    return GPU_NAMING if backend == "nvml" else ASCEND_NAMING
