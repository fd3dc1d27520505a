"""kopt's CUTLASS backend: kernels written with CUTLASS or CuTe (``.cu``/``.cuh`` files that include
``cutlass/`` or ``cute/`` headers) exposing the same ``extern "C" solve(...)`` entry point as the CUDA
backend, built with nvcc against CUTLASS headers found through ``CUTLASS_PATH``, ``CUTLASS_INCLUDE_DIR``,
the ``nvidia-cutlass`` wheel or a system install (``kopt_cutlass.headers``), with a heavier compile
budget than plain CUDA. It registers through the ``kopt`` entry-point group like any third-party backend;
without headers or nvcc it shows as unavailable with the reason.
"""
