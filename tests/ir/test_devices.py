"""Device names: parsing, the canonical spelling, kinds, and the one error every layer raises."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockir.errors import BlockirError
from blockir.ir.devices import (
    HOST,
    checked_device,
    device_kind,
    format_device,
    is_valid_device,
    parse_device,
    require_device,
)


@pytest.mark.parametrize(
    ("device", "parsed", "canonical"),
    [
        ("cpu", ("cpu", 0), "cpu"),
        ("cpu:0", ("cpu", 0), "cpu"),
        ("cpu:3", ("cpu", 3), "cpu:3"),
        ("cuda", ("cuda", 0), "cuda:0"),
        ("cuda:0", ("cuda", 0), "cuda:0"),
        ("cuda:12", ("cuda", 12), "cuda:12"),
    ],
)
def test_parse_and_canonical_spelling(device: str, parsed: tuple[str, int], canonical: str) -> None:
    assert parse_device(device, "here") == parsed
    assert checked_device(device, "here") == canonical == format_device(*parsed)
    assert require_device(device, "here") == device  # the DSL keeps what the user wrote
    assert device_kind(canonical) == device_kind(device) == parsed[0]
    assert checked_device(canonical, "here") == canonical  # canonical spellings are fixed points


def test_host_is_the_canonical_cpu() -> None:
    assert HOST == checked_device("cpu:0", "here") == format_device("cpu", 0)


@pytest.mark.parametrize(
    "device", ["gpu", "cuda:", "cpu:-1", "cuda:01", "tpu:0", "", "CPU", " cpu", "cuda:1:2", 0, None]
)
def test_malformed_devices_fail_naming_where(device: object) -> None:
    assert not is_valid_device(device)
    for check in (parse_device, checked_device, require_device):
        with pytest.raises(BlockirError) as e:
            check(device, "op 3 of block 0")
        assert str(e.value) == f"{device!r} is not a device (expected cpu, cpu:N, cuda or cuda:N): op 3 of block 0"


@given(st.sampled_from(["cpu", "cuda"]), st.integers(0, 10**6))
def test_format_then_parse_is_the_identity(kind: str, index: int) -> None:
    assert parse_device(format_device(kind, index), "here") == (kind, index)
