"""A profile's network latencies (``topology.scale_up.latency_us``, ``topology.nics.latency_us``,
``transport_latency_us``, ``topology.fabric.latency_us``) have an upper bound,
:data:`schedsim.hardware.profile.NET_LATENCY_MAX_US`: the loader names a figure beyond it and the fix, where the
prediction would stop on an op's infinite solo time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schedsim.errors import ProfileError
from schedsim.hardware.profile import NET_LATENCY_MAX_US, load_profile
from tests.network.test_network import ROOT


def across_nodes(tmp_path: Path, section: str, field: str, value: float) -> Path:
    """h200 with one GPU and one NIC a node (tp_ffn's all_reduce crosses nodes), ``topology.section.field`` set."""
    d = yaml.safe_load((ROOT / "schedsim/hardware/profiles/h200.yaml").read_text())
    d["topology"]["gpus_per_node"] = 1
    d["topology"]["nics"]["per_node"] = 1
    d["topology"][section][field] = value
    path = tmp_path / f"{section}_{field}_{value:g}.yaml"  # a path a value (load_profile caches by path)
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.mark.parametrize(("section", "field"), [("nics", "transport_latency_us"), ("nics", "latency_us"),
                                                ("fabric", "latency_us"), ("scale_up", "latency_us")])
def test_a_network_latency_beyond_the_bound_names_its_field_and_exits_2(tmp_path: Path, section: str, field: str):
    assert NET_LATENCY_MAX_US == 1e6
    name = f"topology.{section}.{field}"
    assert load_profile(str(across_nodes(tmp_path, section, field, 1e6))).topology is not None  # the bound holds
    path = across_nodes(tmp_path, section, field, 1e308)
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert name in str(e.value) and f"fix: give {name} at most 1e+06" in str(e.value)
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/tp_ffn.yaml"),
                          "--profile", str(path), "--no-gantt", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and name in out.stderr
    assert "solo duration" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("section", "field", "floor"), [("nics", "bandwidth_Gbps", 1e-3), ("nics", "goodput", 1e-3),
                                                         ("scale_up", "bandwidth_GBps", 1e-6)])
def test_a_rate_below_its_floor_names_its_field_and_exits_2(tmp_path: Path, section: str, field: str, floor: float):
    """A denormal rate (5e-324) made an infinite solo time ("solo duration of inf s", no field named) or an
    internal ZeroDivisionError: rates have a floor (1 Mb/s a NIC, .001 of line rate, 1 kB/s a GB/s field)."""
    name = f"topology.{section}.{field}"
    assert load_profile(str(across_nodes(tmp_path, section, field, floor))).topology is not None  # the floor holds
    path = across_nodes(tmp_path, section, field, 5e-324)
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert name in str(e.value) and "greater than or equal to" in str(e.value) and "(got 5e-324)" in str(e.value)
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/tp_ffn.yaml"),
                          "--profile", str(path), "--no-gantt", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and name in out.stderr
    assert "solo duration" not in out.stderr and "Traceback" not in out.stderr


def test_a_link_class_latency_beyond_the_bound_names_its_field_and_exits_2(tmp_path: Path):
    """``links.<class>.latency_us`` (the alpha-beta fallback of profiles without a topology, pcie2's) had no bound:
    1e9 µs (ms written as µs, 1e3 times over) printed a 2,000 s makespan for a 1 GiB all_reduce on two ranks
    (2 steps x 1,000 s), 1e200 a makespan of 2e194 s, and 1e308 stopped on the op's "solo duration of inf s"."""
    d = yaml.safe_load((ROOT / "schedsim/hardware/profiles/pcie2.yaml").read_text())
    d["links"]["pcie"]["latency_us"] = NET_LATENCY_MAX_US
    (ok := tmp_path / "ok.yaml").write_text(yaml.safe_dump(d))
    assert load_profile(str(ok)).links["pcie"].latency_us == NET_LATENCY_MAX_US  # the bound holds
    sched = tmp_path / "ar.yaml"
    sched.write_text("schema_version: 1\nname: ar\nworld_size: 2\n"
                     "ops: [{name: x, kind: all_reduce, bytes: 1073741824}]\n")
    for value in (1e9, 1e200, 1e308):
        d["links"]["pcie"]["latency_us"] = value
        (path := tmp_path / f"lat_{value:g}.yaml").write_text(yaml.safe_dump(d))
        with pytest.raises(ProfileError) as e:
            load_profile(str(path))
        msg = str(e.value)
        assert "links.pcie.latency_us" in msg and "fix: give links.pcie.latency_us at most 1e+06" in msg
        out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(sched), "--profile", str(path),
                              "--no-gantt", "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and out.stderr.startswith("error: ") and "links.pcie.latency_us" in out.stderr
        assert "makespan" not in out.stdout and "solo duration" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("path", "value"), [
    (("links", "pcie", "bandwidth_GBps"), 7.65e9), (("gpu", "hbm_GBps"), 2e12), (("memcpy", "h2d_GBps"), 25e9),
    (("gpu", "peak_tflops", "fp32"), 51.2e12), (("collectives", "tables", "all_gather", 2, 0, 1), 7.652e9)])
def test_a_rate_in_another_unit_names_its_field_and_exits_2(tmp_path: Path, path: tuple[Any, ...], value: float):
    """A rate in B/s or FLOP/s where the field takes GB/s or TFLOP/s (pcie2's 7.65 GB/s link as 7.65e9) loaded
    and timed every op that used it as free: the 1 GiB all_reduce and 512 MiB all_gather of two ranks 35.1 ms
    for 175.5 (the link) or 140.4 (the table); MFU and GEMM rooflines likewise. Rates are at most RATE_MAX (1e6)."""
    from schedsim.hardware.profile import RATE_MAX

    assert RATE_MAX == 1e6
    d = yaml.safe_load((ROOT / "schedsim/hardware/profiles/pcie2.yaml").read_text())
    *parent, last = path
    at = d
    for key in parent:
        at = at[key]
    at[last] = RATE_MAX
    (ok := tmp_path / "ok.yaml").write_text(yaml.safe_dump(d))
    load_profile(str(ok))  # the bound holds
    at[last] = value
    (bad := tmp_path / "bad.yaml").write_text(yaml.safe_dump(d))
    name = ".".join(map(str, path))
    with pytest.raises(ProfileError) as e:
        load_profile(str(bad))
    assert name in str(e.value) and f"fix: give {name} at most 1e+06" in str(e.value)
