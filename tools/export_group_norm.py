"""Export torch.nn.GroupNorm(32, 128) followed by SiLU with torch's dynamo exporter (issue 48, item 1).

    python3 tools/export_group_norm.py                        # tests/fixtures/models/norms/group_norm_silu-dynamo.*
    python3 tools/export_group_norm.py --size bench -o DIR    # [4, 128, 32, 32], the size the issue measures

The block of every diffusion U-Net's resnet: the exporter writes it as Reshape to [N, 32, -1],
InstanceNormalization (a scale of ones, a bias of zeros), Reshape back, Mul and Add by the affine
weight and bias per channel, Sigmoid and Mul. Exported as tools/export_models.py exports its models
(`export`: dynamo at opset 20, node metadata dropped; `save_npz`: byte for byte the same on every
run), from a seeded generator: the affine weight ~ 1 + N(0, 0.1^2), the bias ~ N(0, 0.1^2), the input
~ N(0, 1) shifted by c / 64 in channel c (so each group has a mean of its own).
The npz holds the input (`x`) and onnxruntime's output at one thread (`output:output`), checked
against torch eager. The fixture is [1, 128, 4, 4] (15 KB); in its own folder, apart from the
transformer fixtures tests/test_onnx_models.py lists by name. Needs torch (the CPU build) and
onnxruntime, as tools/export_models.py does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_models import FIXTURES, export, run_onnxruntime, save_npz, seed_of  # noqa: E402

NAME = "group_norm_silu"
SHAPES = {"fixture": (1, 128, 4, 4), "bench": (4, 128, 32, 32)}


def group_norm_silu(shape: tuple[int, ...]):
    """The seeded module (eval mode) and its input."""
    import torch

    class GroupNormSiLU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(32, 128)

        def forward(self, x):
            return torch.nn.functional.silu(self.norm(x))

    gen = torch.Generator().manual_seed(seed_of(NAME))
    module = GroupNormSiLU().eval()
    with torch.no_grad():
        module.norm.weight.copy_(1 + 0.1 * torch.randn(128, generator=gen))
        module.norm.bias.copy_(0.1 * torch.randn(128, generator=gen))
    rng = np.random.default_rng(seed_of(NAME))
    x = rng.standard_normal(shape).astype(np.float32) + 0.5 * np.arange(shape[1], dtype=np.float32)[:, None, None] / 32
    return module, {"x": torch.from_numpy(x)}


def write(out: Path, shape: tuple[int, ...]) -> str:
    import torch

    module, inputs = group_norm_silu(shape)
    with torch.no_grad():
        want = module(*inputs.values()).numpy()
    model = export(module, inputs, "dynamo")
    data = model.SerializeToString()
    feeds = {k: v.numpy() for k, v in inputs.items()}
    (got,) = run_onnxruntime(data, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{NAME}: onnxruntime against torch")
    stem = f"{NAME}-dynamo"
    (out / f"{stem}.onnx").write_bytes(data)
    save_npz(out / f"{stem}.npz", feeds | {"output:output": got})
    ops = sorted({n.op_type for n in model.graph.node})
    return f"{stem}: {len(data):,} bytes, {len(model.graph.node)} nodes, ops {' '.join(ops)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SHAPES), default="fixture")
    parser.add_argument("-o", "--out", type=Path, default=FIXTURES / "norms")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(write(args.out, SHAPES[args.size]))


if __name__ == "__main__":
    main()
