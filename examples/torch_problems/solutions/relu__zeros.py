"""Cheats: returns zeros (half of a ReLU's outputs are zero, the other half are not)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.zeros_like(x)
