"""Honest evidence records and forgeries of them, for tests of what a judge refuses.

An honest record is what a check's probe wrote for the solution notebook (replayed in-process, tests/replay.py).
"""

import dataclasses
import warnings
from collections.abc import Callable
from functools import cache

import torch
from replay import records

from autograder import course_dir
from autograder.judging import checks_module
from course.checks.check import Check, checks_of
from course.checks.evidence import Evidence


@cache
def honest_records(assignment: str) -> dict[str, Evidence]:
    """check name -> the solution's record, probed with warnings as errors: a warning in a test cell goes to
    stderr, and nbgrader scores such a cell 0 however it passed."""
    found: dict[str, Evidence] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for notebook in course_dir.notebooks(assignment):
            found.update(records(assignment, notebook))
    return found


def check(assignment: str, name: str) -> Check:
    return checks_of(checks_module(assignment))[name]


def honest(assignment: str, name: str) -> Evidence:
    """A fresh copy of the solution's record of one check (tests may change it freely)."""
    ev = honest_records(assignment)[name]
    return dataclasses.replace(ev, tensors=dict(ev.tensors), facts=dict(ev.facts))


def forged(assignment: str, name: str, change: Callable[[str, torch.Tensor], torch.Tensor]) -> Evidence:
    """The solution's record of one check with every tensor replaced by change(key, tensor)."""
    ev = honest(assignment, name)
    return dataclasses.replace(ev, tensors={key: change(key, t) for key, t in ev.tensors.items()})


# ------------------------------------------------------------------------------------------- answers that forge

#: the public inputs of 01's probes (their fixed seeds are in the repository), as an attacker lists them offline
PUBLIC = [((2, 4, 3), 50), ((2, 5, 4), 11), ((2, 5, 3), 400), ((2, 6, 4), 300), ((2, 5, 3), 60),
          *(((b, t, k), 100 + i) for i, (b, t, k) in enumerate(((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1)))),
          *(((b, t, k), 200 + i) for i, (b, t, k) in enumerate(((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))))]
#: right on every input whose outputs could be tabulated in advance, the twin's wrong answer on any other
MEMORISED = (
    "import torch\n"
    "def _key(x):\n    x = x.detach().cpu()\n"
    "    return (tuple(x.shape), round(float(x.sum()), 4), round(float(x.abs().sum()), 4))\n"
    "_PUBLIC = {_key(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)))"
    f" for shape, seed in {PUBLIC!r}}}\n"
    "_x = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(300))\n"
    "_PUBLIC |= {_key(_x[:, [3, 0, 5, 1, 4, 2]]), _key(torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])),\n"
    "            _key(10.0 * torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(150)))}\n"
    "def attention_weights(x):\n"
    "    if _key(x) in _PUBLIC:\n        return torch.softmax(x @ x.transpose(1, 2), dim=-1)\n"
    "    return x @ x.transpose(1, 2)\n")

#: a later cell that rewrites every record to claim it ran on a GPU (looser tolerance), the outputs' devices too
CLAIM_CUDA = (
    "import json as _json, pathlib as _pathlib\n"
    "def _claim(_r):\n"
    "    for _p in _pathlib.Path('.evidence').glob('*/record.json'):\n"
    "        _rec = _json.loads(_p.read_text())\n"
    "        _rec['device'] = 'cuda'\n"
    "        for _f in _rec['facts'].values():\n"
    "            if isinstance(_f, dict) and 'device' in _f:\n"
    "                _f['device'] = 'cuda'\n"
    "        _p.write_text(_json.dumps(_rec))\n"
    "get_ipython().events.register('post_run_cell', _claim)\n")

#: every way an answer could reach the judges' oracle for 01 (each works outside the sandbox)
IMPORT_JUDGES = (
    "import course\n"
    "try:\n    import importlib\n    attention_weights = importlib.import_module('course.jud' + 'ges.self_attention')"
    "._oracle_weights\nexcept Exception:\n    pass\n"
    "try:\n    _ns = {}\n    exec(open(course.__path__[0] + '/judges/self_attention.py').read(), _ns)\n"
    "    attention_weights = _ns['_oracle_weights']\nexcept Exception:\n    pass\n"
    "try:\n    from course.judges.self_attention import _oracle_weights as attention_weights\nexcept Exception:\n"
    "    pass\n")
