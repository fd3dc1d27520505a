"""Matmul, divide by a constant, then sum over the last dim."""

import torch
import torch.nn as nn

batch_size = 4096
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))

    def forward(self, x):
        return (torch.matmul(x, self.weight.t()) / 2.0).sum(dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
