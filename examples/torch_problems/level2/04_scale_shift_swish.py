"""x * scale + shift, then sigmoid, times x."""

import torch
import torch.nn as nn

batch_size = 8192
dim = 8192


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.sigmoid(x * self.scale + self.shift) * x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
