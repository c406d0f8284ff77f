"""Where the course's folders are, and which assignments and notebooks it has."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_dir(root: Path = ROOT) -> Path:
    return root / "source"


def assignments(root: Path = ROOT) -> list[str]:
    """Assignment names (the folders of source/), in course order."""
    return sorted(p.name for p in source_dir(root).iterdir() if p.is_dir() and p.name[:2].isdigit())


def notebooks(assignment: str, root: Path = ROOT) -> list[str]:
    """Notebook file names of one assignment, e.g. ['self_attention.ipynb']."""
    return sorted(p.name for p in (source_dir(root) / assignment).glob("*.ipynb"))
