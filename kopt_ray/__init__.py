"""kopt-ray: the ``ray`` executor, which spreads kopt's bench commands over every GPU of a Ray cluster.

``kopt_ray.pool.RayPool`` is the pool (one bench worker actor per GPU, each hosting kopt's local
executor), ``kopt_ray.actor`` what runs on the nodes, ``kopt_ray.content`` how files travel (by content
key). The entry point ``kopt_ray`` (``kopt_ray.plugin``) registers the executor; docs/executors.md says
what it guarantees and how to run kopt on a cluster.
"""

__version__ = "0.1.0"
