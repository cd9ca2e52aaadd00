"""A public Triton ensemble served as-is: the wine-quality pipeline of
hemuku90/mlops-demo@efed66c31fb1edbdf659f3697baf8f8776a16cd3:model_repository/ensemble_model/config.pbtxt
(13 named FP32 features -> preprocessing -> wine_model -> postprocessing -> prediction).

Its wine_model step is ONNX (config kept as-is, from
hemuku90/mlops-demo@efed66c31fb1edbdf659f3697baf8f8776a16cd3:model_repository/wine_model/config.pbtxt);
its preprocessing and postprocessing steps are Python-backend models there, recreated here as
ONNX graphs with the same tensor names, dtypes and shapes (their config.pbtxt files from
model_repository/{preprocessing,postprocessing}/config.pbtxt at the same commit, with
`backend: "python"` read as `backend: "onnxruntime"`): preprocessing concatenates the features
into `float_input` [13], wine_model is a linear model, postprocessing clips the score to [0, 10].
The ensemble answers as the three graphs run one after another, over KServe HTTP and gRPC."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper, save

from tensorport_server import start_server

SOURCE = "hemuku90/mlops-demo@efed66c31fb1edbdf659f3697baf8f8776a16cd3"
FEATURES = ["alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
            "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
            "od280_od315_of_diluted_wines", "proline"]

ENSEMBLE_PBTXT = """name: "ensemble_model"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "alcohol", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "malic_acid", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "ash", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "alcalinity_of_ash", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "magnesium", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "total_phenols", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "flavanoids", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "nonflavanoid_phenols", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "proanthocyanins", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "color_intensity", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "hue", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "od280_od315_of_diluted_wines", data_type: TYPE_FP32, dims: [ 1 ] },
  { name: "proline", data_type: TYPE_FP32, dims: [ 1 ] }
]
output [
  {
    name: "prediction"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocessing"
      model_version: -1
      input_map { key: "alcohol" value: "alcohol" }
      input_map { key: "malic_acid" value: "malic_acid" }
      input_map { key: "ash" value: "ash" }
      input_map { key: "alcalinity_of_ash" value: "alcalinity_of_ash" }
      input_map { key: "magnesium" value: "magnesium" }
      input_map { key: "total_phenols" value: "total_phenols" }
      input_map { key: "flavanoids" value: "flavanoids" }
      input_map { key: "nonflavanoid_phenols" value: "nonflavanoid_phenols" }
      input_map { key: "proanthocyanins" value: "proanthocyanins" }
      input_map { key: "color_intensity" value: "color_intensity" }
      input_map { key: "hue" value: "hue" }
      input_map { key: "od280_od315_of_diluted_wines" value: "od280_od315_of_diluted_wines" }
      input_map { key: "proline" value: "proline" }
      output_map { key: "float_input" value: "preprocessed_data" }
    },
    {
      model_name: "wine_model"
      model_version: -1
      input_map { key: "float_input" value: "preprocessed_data" }
      output_map { key: "variable" value: "model_output" }
    },
    {
      model_name: "postprocessing"
      model_version: -1
      input_map { key: "variable" value: "model_output" }
      output_map { key: "prediction" value: "prediction" }
    }
  ]
}
"""

WINE_MODEL_PBTXT = """name: "wine_model"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "float_input"
    data_type: TYPE_FP32
    dims: [ 13 ]
  }
]
output [
  {
    name: "variable"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
"""

PREPROCESSING_PBTXT = ('name: "preprocessing"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninput [\n'
                       + ",\n".join(f'  {{ name: "{n}", data_type: TYPE_FP32, dims: [ 1 ] }}'
                                    for n in FEATURES)
                       + '\n]\noutput [\n  {\n    name: "float_input"\n    data_type: TYPE_FP32\n'
                       '    dims: [ 13 ]\n  }\n]\n')

POSTPROCESSING_PBTXT = """name: "postprocessing"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "variable"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
output [
  {
    name: "prediction"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
"""

WEIGHTS = (np.arange(13, dtype=np.float32) - 6.0) / 10.0
BIAS = np.array([5.0], dtype=np.float32)


def _save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))


def _fp32(name, *dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", *dims])


def _write_repository(models):
    _save(helper.make_graph([helper.make_node("Concat", FEATURES, ["float_input"], axis=1)],
                            "preprocessing", [_fp32(n, 1) for n in FEATURES], [_fp32("float_input", 13)]),
          models / "preprocessing" / "1" / "model.onnx")
    _save(helper.make_graph(
        [helper.make_node("MatMul", ["float_input", "w"], ["raw"]),
         helper.make_node("Add", ["raw", "b"], ["variable"])],
        "wine_model", [_fp32("float_input", 13)], [_fp32("variable", 1)],
        initializer=[numpy_helper.from_array(WEIGHTS.reshape(13, 1), "w"),
                     numpy_helper.from_array(BIAS, "b")]),
        models / "wine_model" / "1" / "model.onnx")
    _save(helper.make_graph(
        [helper.make_node("Clip", ["variable", "low", "high"], ["prediction"])],
        "postprocessing", [_fp32("variable", 1)], [_fp32("prediction", 1)],
        initializer=[numpy_helper.from_array(np.array(0.0, dtype=np.float32), "low"),
                     numpy_helper.from_array(np.array(10.0, dtype=np.float32), "high")]),
        models / "postprocessing" / "1" / "model.onnx")
    for name, text in (("ensemble_model", ENSEMBLE_PBTXT), ("wine_model", WINE_MODEL_PBTXT),
                       ("preprocessing", PREPROCESSING_PBTXT),
                       ("postprocessing", POSTPROCESSING_PBTXT)):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.pbtxt").write_text(text)
    # Triton lays an ensemble out with an empty version folder.
    (models / "ensemble_model" / "1").mkdir(exist_ok=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("wine")
    _write_repository(root / "models")
    server = start_server(root / "models", root / "server.log")
    yield server
    server.stop()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_public_wine_ensemble_answers_as_its_steps(server, module):
    target = server.rest_url.removeprefix("http://") if module is httpclient else server.grpc_target
    client = module.InferenceServerClient(target)
    rows = np.random.default_rng(17).uniform(0, 20, size=(3, 13)).astype(np.float32)
    inputs = []
    for column, name in enumerate(FEATURES):
        given = module.InferInput(name, [3, 1], "FP32")
        given.set_data_from_numpy(np.ascontiguousarray(rows[:, column:column + 1]))
        inputs.append(given)
    got = client.infer("ensemble_model", inputs).as_numpy("prediction")
    want = np.clip(rows @ WEIGHTS.reshape(13, 1) + BIAS, 0.0, 10.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert client.is_model_ready("ensemble_model")
