"""The knowledge base kopt reasons over: the optimization methods it may select (``methods``), with
the architectures they exist on, the ncu evidence that calls for them, their relations and numerics."""
