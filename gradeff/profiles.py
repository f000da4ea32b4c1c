"""Profiles: the size of everything, from CPU seconds (tiny) to the papers' GPU runs (paper)."""

from __future__ import annotations

__all__ = ["DEFAULT_PROFILE", "PROFILES", "validate_profile"]

PROFILES: tuple[str, ...] = ("tiny", "small", "paper")
DEFAULT_PROFILE = "tiny"


def validate_profile(profile: str) -> str:
    """Return ``profile`` if known, else raise ``ValueError`` naming the valid profiles."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    return profile
