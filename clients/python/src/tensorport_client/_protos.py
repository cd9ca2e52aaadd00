"""gRPC message classes, built from the packaged descriptor set in a private descriptor pool
(see scripts/gen_descriptors.py for why no generated _pb2 modules are used)."""

from __future__ import annotations

import functools
from importlib import resources

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
INFERENCE_SERVICE = "inference.GRPCInferenceService"


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    raw = resources.files(__package__).joinpath("_descriptors.binpb").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(raw).file:
        pool.Add(file)
    return pool


@functools.cache
def message(full_name: str):
    """The message class of `full_name`, e.g. `tensorflow.serving.PredictRequest`."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))


@functools.cache
def enum_value(enum: str, name: str) -> int:
    return _pool().FindEnumTypeByName(enum).values_by_name[name].number


@functools.cache
def enum_name(enum: str, number: int) -> str:
    values = _pool().FindEnumTypeByName(enum).values_by_number
    return values[number].name if number in values else str(number)
