"""Ray, for the commands that also run on a cluster: ``avey-b embed --backend ray`` (a Ray Data pipeline of
model-holding actors) and ``avey-b evaluate --backend ray`` (one Ray task per sweep cell).

* ``BACKENDS`` — ``local`` (the default, which never imports Ray) and ``ray``.
* ``check_backend(backend, ray_only)`` — a known backend, and no Ray-only option given with the local one.
* ``start_ray(address, cleanup)`` — join the cluster at ``address`` (``auto``: the one this machine belongs to) or
  start a local Ray, which ``cleanup`` shuts down; a Ray this process started before is used as it is. A clear
  error names the extra to install when Ray is missing.
* ``cluster_gpus(ray)`` — how many GPUs the cluster has (the commands give each task or actor one where it has any).

Ray is an optional extra (``pip install 'avey-b[ray]'``), imported only by ``start_ray``. This module imports
nothing else from the package.
"""

from __future__ import annotations

import contextlib
from types import ModuleType

BACKENDS = ("local", "ray")


def check_backend(backend: str, ray_only: dict[str, bool]) -> None:
    """Raise ``ValueError`` for an unknown ``backend``, or for the local backend given options that only Ray uses
    (``ray_only``: flag -> whether it was given)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    given = [flag for flag, was_given in ray_only.items() if was_given]
    if backend == "local" and given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} with --backend ray "
                         "(the default backend, local, runs on this machine)")


def start_ray(address: str | None, cleanup: contextlib.ExitStack, data: bool = False) -> ModuleType:
    """The ``ray`` module, connected to the cluster at ``address`` (``auto``: the one this machine belongs to; None:
    a new local Ray on this machine). A Ray started here is shut down when ``cleanup`` closes, however the command
    ends; one already initialized in this process is used as it is. ``data``: Ray Data is needed too."""
    try:
        import ray

        if data:
            import ray.data  # noqa: F401
    except ImportError:
        raise ImportError(f"--backend ray needs Ray{' Data' if data else ''}: pip install 'avey-b[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
        cleanup.callback(ray.shutdown)
    return ray


def cluster_gpus(ray: ModuleType) -> float:
    """The GPUs of the cluster ``ray`` is connected to (0 on a CPU-only cluster)."""
    return float(ray.cluster_resources().get("GPU", 0))
