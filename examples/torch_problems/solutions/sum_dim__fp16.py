"""Broken: sums in float16 and casts back, which misses float32's tolerance over 4096 terms."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x.half(), dim=1).float()
