"""The backbone of the mini ssd (RetinaNet) and maskrcnn models: a small strided conv body (each model's
own) under a feature pyramid network, as torchvision's ``BackboneWithFPN`` puts a ResNet under one. The
module names (``body``, ``fpn.inner_blocks``, ``fpn.layer_blocks``) are torchvision's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    """3x3 convolution, batch norm, ReLU: the bodies' building block."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class FPN(nn.Module):
    """Top-down pathway: each level adds its lateral 1x1 conv to the upsampled coarser level, so the
    fine levels that see small objects also get the context of the coarse ones."""

    def __init__(self, in_channels: list[int], ch: int) -> None:
        super().__init__()
        self.inner_blocks = nn.ModuleList(nn.Conv2d(c, ch, 1) for c in in_channels)
        self.layer_blocks = nn.ModuleList(nn.Conv2d(ch, ch, 3, padding=1) for _ in in_channels)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        last = self.inner_blocks[-1](feats[-1])
        outs = [self.layer_blocks[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            last = self.inner_blocks[i](feats[i]) + F.interpolate(last, size=feats[i].shape[-2:])
            outs.insert(0, self.layer_blocks[i](last))
        return outs


class Backbone(nn.Module):
    """``body`` (a module returning its feature maps, finest first, with their widths in ``out_channels``)
    under an FPN of ``fpn_channels``: one map per level of ``body``."""

    def __init__(self, body: nn.Module, fpn_channels: int) -> None:
        super().__init__()
        self.body = body
        self.fpn = FPN(body.out_channels, fpn_channels)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.fpn(self.body(x))
