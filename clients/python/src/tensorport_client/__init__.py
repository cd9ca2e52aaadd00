"""Typed client for tensorport: TF Serving Predict and KServe v2 inference over REST and gRPC,
model status and metadata, and system shared-memory helpers. numpy in, numpy out.

    from tensorport_client import RestClient, GrpcClient, SharedMemoryRegion
"""

from .errors import TensorportError
from .grpc_client import GrpcClient
from .rest import RestClient
from .shm import SharedMemoryRegion
from .types import ModelMetadata, TensorSpec, VersionStatus

__all__ = [
    "GrpcClient",
    "ModelMetadata",
    "RestClient",
    "SharedMemoryRegion",
    "TensorSpec",
    "TensorportError",
    "VersionStatus",
]
__version__ = "0.1.0"
