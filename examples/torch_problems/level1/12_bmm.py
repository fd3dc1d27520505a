"""Batched matrix multiplication."""

import torch
import torch.nn as nn

batch = 64
M = 512
N = 512
K = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch, M, K), torch.randn(batch, K, N)]


def get_init_inputs():
    return []
