"""A model that fails to load is reported and skipped; the others keep serving."""

from __future__ import annotations

import numpy as np

from tfs import assert_close, reference


def test_broken_model_does_not_stop_others(http, rest_url):
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    resp = http.post(f"{rest_url}/v1/models/ranker:predict", json={"instances": x.tolist()}, timeout=10)
    assert resp.status_code == 200, resp.text
    assert_close(np.array(resp.json()["predictions"], dtype=np.float32),
                 reference("ranker", 2, {"features": x})["score"])


def test_broken_model_status(http, rest_url):
    resp = http.get(f"{rest_url}/v1/models/broken", timeout=10)
    body = resp.json()
    if resp.status_code == 404:
        assert isinstance(body.get("error"), str) and body["error"].strip()
        return
    assert resp.status_code == 200, f"HTTP {resp.status_code}: {resp.text[:300]}"
    statuses = body["model_version_status"]
    assert statuses, body
    for st in statuses:
        assert st["state"] == "END", st
        assert st["status"]["error_code"] != "OK", st
        assert st["status"].get("error_message", "").strip(), st


def test_broken_model_cannot_predict(http, rest_url):
    resp = http.post(f"{rest_url}/v1/models/broken:predict", json={"instances": [[1.0]]}, timeout=10)
    assert resp.status_code >= 400, resp.text
    assert isinstance(resp.json().get("error"), str) and resp.json()["error"].strip()


def test_broken_model_is_logged(server):
    log = server.log().lower()
    assert "broken" in log, "the server log does not mention the model that failed to load"
