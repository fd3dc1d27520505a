"""The executor seam: where candidates are built and timed (``local``, ``gpus``, and plugins' own, such
as kopt-ray's ``ray``), found by name like backends and generators; docs/executors.md."""
