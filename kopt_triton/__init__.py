"""kopt's Triton backend: kernels written as Python modules that import Triton and expose
``setup(**dims, seed)`` (build the inputs) and ``run_kernel(**inputs)`` (launch the kernel). It
registers through the ``kopt`` entry-point group like any third-party backend; Triton itself is the
toolchain, a dependency of kopt-triton; should it go missing, the backend shows as unavailable with
the reason rather than breaking kopt.
"""
