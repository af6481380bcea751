"""Devices (seed 004 §6.2): what exists here and which one is current."""

from __future__ import annotations

from .. import _core

_manager = _core.DeviceManager.instance()


def device_kinds() -> tuple[str, ...]:
    """The device kinds of this build (its plugin table), accelerators first, e.g.
    ``("cuda", "cpu")``."""
    return tuple(_core.device_kinds())


def accelerator_kind() -> str:
    """The kind the seed API's integer device ids name (the plugin table's first)."""
    return str(_core.accelerator_kind())


class Device:
    """A device of one of :func:`device_kinds` and its properties.

    ``Device(0)`` is accelerator device 0 (the seed's form); ``Device("cpu")`` and
    ``Device("<kind>:1")`` name devices explicitly.
    """

    def __init__(self, device: int | str = 0) -> None:
        spec = _core.DeviceSpec(f"{accelerator_kind()}:{device}" if isinstance(device, int) else device)
        self._spec = spec
        self._info = _manager.get_device_info_for(str(spec))

    @property
    def id(self) -> int:
        """The device index (0 for the CPU)."""
        return self._spec.index

    @property
    def type(self) -> str:
        """The device kind, one of :func:`device_kinds`."""
        return self._info.device_type

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def info(self) -> _core.DeviceInfo:
        """The full DeviceInfo record."""
        return self._info

    @property
    def total_memory(self) -> int:
        """Total memory in bytes."""
        return self._info.total_memory

    @property
    def total_memory_gb(self) -> float:
        return self._info.total_memory / (1024**3)

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``; ``(0, 0)`` for the CPU."""
        return (self._info.compute_capability_major, self._info.compute_capability_minor)

    @property
    def supports_fp16(self) -> bool:
        return self._info.supports_fp16

    @property
    def supports_bf16(self) -> bool:
        return self._info.supports_bf16

    def synchronize(self) -> None:
        """Wait for all work on this device."""
        _manager.synchronize_spec(str(self))

    def __str__(self) -> str:
        return str(self._spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"<Device {self}: {self.name} ({self.total_memory_gb:.1f} GB)>"


def get_device_count() -> int:
    """Number of accelerator devices (0 without one; see :func:`cuda_unavailable_reason`)."""
    return _manager.get_device_count()


def get_all_devices() -> list[Device]:
    """Every device: each kind's devices by index in :func:`device_kinds` order (the CPU last)."""
    return [Device(f"{info.device_type}:{info.device_id}") for info in _manager.get_all_devices()]


def get_current_device() -> Device:
    """The calling thread's current device (the accelerator's if any, else the CPU)."""
    return Device(_manager.get_current_device())


def set_current_device(device: int | str | Device) -> None:
    """Make ``device`` current for the calling thread."""
    if isinstance(device, int):
        _manager.set_current_device(device)
    else:
        _manager.set_current_device_spec(str(device))


def synchronize(device_id: int | str | None = None) -> None:
    """Wait for all work on a device (the current one by default)."""
    if device_id is None:
        _manager.synchronize(-1)
    elif isinstance(device_id, int):
        _manager.synchronize(device_id)
    else:
        _manager.synchronize_spec(str(device_id))


def cuda_unavailable_reason() -> str:
    """Why the accelerator (CUDA) reports no devices (empty when it is usable)."""
    return _manager.accelerator_unavailable_reason()


def unavailable_reason(kind: str) -> str:
    """Why device kind ``kind`` reports no devices (empty when it is usable)."""
    return _manager.unavailable_reason(kind)


def device_attribute(device: str, key: str) -> str:
    """A device attribute by key from its backend ("capability", "arch"; "" when none)."""
    return _manager.attribute(device, key)


def best_device() -> str:
    """Accelerator device 0 (``"cuda:0"``) when one exists, else ``"cpu"``."""
    return f"{accelerator_kind()}:0" if get_device_count() > 0 else "cpu"
