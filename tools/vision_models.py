"""MobileNetV2 and ResNet-18 written out in torch, for tools/export_models.py (no torchvision, no pretrained weights).

The layouts and parameter names are torchvision's (`features.3.conv.1.0.weight`,
`layer2.0.downsample.1.running_var`), so torchvision's state dicts would load, but
nothing is downloaded: parameters and BatchNorm running statistics are drawn by
`randomize_vision` from one seeded generator.

- MobileNetV2 (width 1.0): a 3x3 stride-2 stem to 32 channels, the inverted residual
  blocks [t, c, n, s] of MOBILENET_V2_BLOCKS (1x1 expansion by t, depthwise 3x3,
  1x1 projection; the input added back where stride is 1 and channels are kept),
  BatchNorm after every conv, ReLU6 after all but the projection, a 1x1 conv to
  1280, global average pool, dropout 0.2 (nothing in eval mode), linear 1000.
- ResNet-18: 7x7 stride-2 stem to 64, BatchNorm, ReLU, 3x3 stride-2 max pool, four
  stages (64, 128, 256, 512 channels) of two BasicBlocks (two 3x3 convs; the first
  block of stages 2-4 strides by 2 and its shortcut is a 1x1 conv and BatchNorm),
  global average pool, linear 1000.

torch is imported inside the functions (`pip install torch==2.13.0`, the CPU build).
"""

from __future__ import annotations

import numpy as np

# (expansion t, output channels c, blocks n, first block's stride s), torchvision's
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, activation: bool = True):
    """Conv (no bias), BatchNorm, then ReLU6 unless `activation` is False: torchvision's Conv2dNormActivation."""
    from torch import nn

    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if activation:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


def inverted_residual(cin: int, cout: int, stride: int, expand: int):
    """MobileNetV2's block: `conv` holds [1x1 expansion], depthwise 3x3, 1x1 projection and its BatchNorm."""
    from torch import nn

    class InvertedResidual(nn.Module):
        def __init__(self):
            super().__init__()
            hidden = cin * expand
            layers = [conv_bn(cin, hidden, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                       nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.use_res_connect = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    return InvertedResidual()


def mobilenet_v2_module(classes: int = 1000):
    """MobileNetV2 at width 1.0 (torchvision's `mobilenet_v2()`), in train mode as built."""
    import torch
    from torch import nn

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = [conv_bn(3, 32, 3, 2)], 32
            for expand, cout, blocks, stride in MOBILENET_V2_BLOCKS:
                for i in range(blocks):
                    layers.append(inverted_residual(cin, cout, stride if i == 0 else 1, expand))
                    cin = cout
            layers.append(conv_bn(cin, 1280, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def basic_block(cin: int, cout: int, stride: int):
    """ResNet's BasicBlock: two 3x3 convs with BatchNorm, the input (or its 1x1 projection) added before the last
    ReLU."""
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    return BasicBlock()


def resnet18_module(classes: int = 1000, width: int = 64):
    """ResNet-18 (torchvision's `resnet18()`; stages of width, 2, 4 and 8 times width channels), in train mode
    as built."""
    import torch
    from torch import nn

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin = width
            for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width), start=1):
                stride = 1 if stage == 1 else 2
                blocks = (basic_block(cin, cout, stride), basic_block(cout, cout, 1))
                setattr(self, f"layer{stage}", nn.Sequential(*blocks))
                cin = cout
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8 * width, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet18()


def randomize_vision(module, seed: int) -> None:
    """Parameters, then BatchNorm running statistics, from one seeded generator (in sorted name order, as
    export_models' `randomize`): conv weights ~ N(0, 2/fan_in) with fan_in = in/groups * kh * kw (He: a
    ReLU network keeps its activations' scale), linear weights ~ N(0, 1/fan_in), BatchNorm scales ~
    1 + N(0, 0.1^2), biases ~ N(0, 0.1^2), running means ~ N(0, 0.1^2), running variances ~ exp(N(0, 0.2^2)):
    none of the BatchNorms is the identity it is when built."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if p.dim() == 4:
                p.copy_(noise * (2 / p[0].numel()) ** 0.5)
            elif p.dim() == 2:
                p.copy_(noise / p.shape[1] ** 0.5)
            elif name.endswith("weight"):  # a BatchNorm's scale
                p.copy_(1 + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)
        for name, b in sorted(module.named_buffers()):
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(torch.exp(0.2 * torch.randn(b.shape, generator=gen)))


def image_size(s) -> int:
    """224 at the bench size (export_models' Size with seq >= 128, as vit_model reads it), 32 for fixtures."""
    return 224 if s.seq >= 128 else 32


def pixels(s, rng: np.random.Generator):
    import torch

    n = image_size(s)
    return torch.from_numpy(rng.standard_normal((s.batch, 3, n, n)).astype(np.float32))


def mobilenet_v2(s, rng: np.random.Generator):
    """export_models' builder: (the module, {"pixel_values": images}) at s.batch images of image_size(s)."""
    return mobilenet_v2_module(), {"pixel_values": pixels(s, rng)}


def resnet18(s, rng: np.random.Generator):
    return resnet18_module(), {"pixel_values": pixels(s, rng)}


def resnet18_narrow(s, rng: np.random.Generator):
    """The committed fixture: ResNet-18's layers (the 7x7 stem, the 3x3 stride-2 max pool, four stages of two
    BasicBlocks with their 1x1 stride-2 shortcuts) at width 4 (4 to 32 channels), 10 classes, on image_size(s)
    images."""
    return resnet18_module(classes=10, width=4), {"pixel_values": pixels(s, rng)}


VISION = {"mobilenet_v2": mobilenet_v2, "resnet18": resnet18}  # exported by name, at the bench size
# among export_models' default fixtures, in tests/fixtures/models/vision
VISION_FIXTURES = {"resnet18_narrow": resnet18_narrow}
