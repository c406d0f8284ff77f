"""What the costs the catalogue's replays were cut by cost, one call each, on this machine.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/replay_costs.py

- a global seed (08's probes seed PyTorch's global generator before every draw): torch.manual_seed against
  course.seeding.manual_seed, 60 frames deep as in a replay under pytest (torch.manual_seed formats the whole stack
  as text for each GPU backend that is not initialised; with no accelerator there is none to seed);
- 08's generation oracle (course/judges/language_model.py) computed, and handed out again once computed;
- a check's weights (course/checks/weights.py) drawn, and handed out again once drawn;
- a forward of 08's stand-in GPU case (course/checks/device.py) on the meta device under its rules, and on the CPU:
  the part of 08's replays that is left.
"""

import time
from collections.abc import Callable
from dataclasses import astuple

import torch

from course import seeding
from course.checks import device, weights
from course.checks import language_model as probes
from course.judges import language_model as judges
from course.language_model import LanguageModel


def per_call_ms(run: Callable[[], object], repeat: int = 200) -> float:
    run()
    start = time.process_time()
    for _ in range(repeat):
        run()
    return (time.process_time() - start) / repeat * 1000


def deep(depth: int, run: Callable[[], object]) -> Callable[[], object]:
    """run, called depth frames down the stack."""
    return run if depth == 0 else lambda: deep(depth - 1, run)()


def main() -> None:
    print(f"torch {torch.__version__}, accelerator available: {torch.accelerator.is_available()}; CPU ms per call")
    print(f"  torch.manual_seed, 60 frames deep        {per_call_ms(deep(60, lambda: torch.manual_seed(7))):8.3f}")
    print(f"  course.seeding.manual_seed, 60 deep      {per_call_ms(deep(60, lambda: seeding.manual_seed(7))):8.3f}")
    spec = probes.SAMPLED_GENERATIONS[1]
    print(f"  08 generation oracle, computed           "
          f"{per_call_ms(lambda: judges._generated_once.__wrapped__(spec, None), 20):8.3f}")
    print(f"  08 generation oracle, once computed      {per_call_ms(lambda: judges._oracle_generate(spec)):8.3f}")
    print(f"  a 64 x 16 weight, drawn                  "
          f"{per_call_ms(lambda: weights._value(3, 'blocks.0.ff.net.0.weight', (64, 16), 1.0)):8.3f}")
    print(f"  a 64 x 16 weight, once drawn             "
          f"{per_call_ms(lambda: weights.value(3, 'blocks.0.ff.net.0.weight', (64, 16))):8.3f}")
    model = lambda d: LanguageModel(*astuple(probes.ON_GPU_CASE)[2:]).to(d)(torch.randint(11, (2, 6), device=d))  # noqa: E731
    print(f"  08's stand-in GPU case, meta under rules {per_call_ms(lambda: device.outcome(model, 'mps'), 20):8.3f}")
    print(f"  the same model and tokens on the CPU     {per_call_ms(lambda: model(torch.device('cpu')), 20):8.3f}")


if __name__ == "__main__":
    main()
