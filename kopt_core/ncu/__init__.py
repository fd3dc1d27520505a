"""Nsight Compute: running it, reading its reports."""
