"""tools/vision_models.py: MobileNetV2 and ResNet-18 written out in torch build, and give (1, 1000) logits.

At 64x64 (the layouts take any size the five stride-2 steps leave at least 1x1), in eval mode
after `randomize_vision`; the parameter counts are torchvision's for the same layouts. Skipped
without torch (`pip install torch==2.13.0`, the CPU build).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import vision_models  # noqa: E402

# torchvision's mobilenet_v2() and resnet18(): parameters (weights and biases; not the running statistics)
PARAMETERS = {"mobilenet_v2": 3_504_872, "resnet18": 11_689_512}


@pytest.fixture(autouse=True)
def one_thread():
    """torch on one thread: its pool spinning beside other work on a busy 2-core machine took seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_builds_and_gives_one_row_of_1000_logits(name):
    module = getattr(vision_models, f"{name}_module")()
    assert sum(p.numel() for p in module.parameters()) == PARAMETERS[name]
    vision_models.randomize_vision(module, seed=1)
    module.eval()
    image = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32))
    with torch.no_grad():
        logits = module(image)
    assert logits.shape == (1, 1000)
    assert torch.isfinite(logits).all() and logits.std() > 0.1


def test_batchnorm_statistics_are_drawn_not_the_identity():
    module = vision_models.resnet18_module()
    vision_models.randomize_vision(module, seed=1)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == 20
    for norm in norms:
        assert not torch.all(norm.running_mean == 0) and not torch.all(norm.running_var == 1)
        assert torch.all(norm.running_var > 0)
