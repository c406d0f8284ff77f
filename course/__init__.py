"""Support package for the transformer course notebooks: device, seeding, plots, references, checks."""

from course.device import get_device
from course.seeding import seed_everything

__all__ = ["get_device", "seed_everything"]
