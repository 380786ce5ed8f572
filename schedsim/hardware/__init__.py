"""Hardware profiles: measured GEMM rates, collective bandwidth tables, links, contention."""

from schedsim.hardware.profile import HardwareProfile, list_profiles, load_profile

__all__ = ["HardwareProfile", "load_profile", "list_profiles"]
