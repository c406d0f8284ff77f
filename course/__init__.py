"""Support package for the transformer course notebooks: device, seeding, plots, references, checks."""

from course.device import announce_device, get_device, tolerance
from course.seeding import seed_everything

__all__ = ["announce_device", "get_device", "seed_everything", "tolerance"]
