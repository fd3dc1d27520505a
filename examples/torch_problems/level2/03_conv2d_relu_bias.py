"""Conv2d, ReLU, then a per-channel bias add."""

import torch
import torch.nn as nn

batch_size = 32
channels = 64
out_channels = 128
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, out_channels, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, out_channels]
