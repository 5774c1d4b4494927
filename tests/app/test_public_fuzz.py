"""Every named endpoint of the public app, called with what a stranger may send: wrong types, huge and
non-finite numbers, empty values, a 1 MB string, markup, a server path as a file. Each call must end in
a result or a clear message: never a server error (HTTP 500) nor an unhandled exception (Gradio's
error event without a message).

One app per module (public mode, tiny pair); calls go over raw HTTP (``/gradio_api/call/<name>``), as
an outside caller sends them. Model-running endpoints get a small token budget and one record where
their other parameters keep their defaults, so the module stays quick.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

from specsteer.models.tiny import TEST_PAIRING_ID

pytestmark = pytest.mark.slow  # the public app served on loopback and every endpoint fuzzed over HTTP

MEGABYTE_STRING = "x" * 1_000_000
MARKUP = '<img src=x onerror="window.__pwned=1"><script>alert(1)</script>{{7*7}}'
SERVER_FILE = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}

# What a stranger sends, one value per kind.
BAD_VALUES: dict[str, object] = {
    "none": None,
    "empty string": "",
    "empty list": [],
    "1 MB string": MEGABYTE_STRING,
    "markup": MARKUP,
    "huge int": 99999999999999999999,
    "huge float": 1e308,
    "negative": -1e308,
    "NaN": math.nan,
    "infinity": math.inf,
    "wrong type (object)": {"a": [1, {"b": None}]},
    "wrong type (bool)": True,
    "server path as a file": SERVER_FILE,
}
# Parameters that decide how much a model runs: kept small where they are not the one being fuzzed.
SMALL = {"max_new_tokens": 4, "records": 1, "methods": ["slm"], "pairing": TEST_PAIRING_ID, "input_text": "a pen"}


@pytest.fixture(scope="module")
def public_app(tmp_path_factory):
    """(base url, the named endpoints' parameters) of the public app."""
    import storage
    from specsteer.service import pairings
    from testkit import free_port

    data = tmp_path_factory.mktemp("fuzz-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(pairings.TEST_PAIR_ENV, "tiny")
        patch.setenv("SPECSTEER_DATA_DIR", str(data))
        patch.setenv("SPECSTEER_PUBLIC", "1")
        patch.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("fuzz-temp")))
        patch.delenv("DATABASE_URL", raising=False)
        storage.reset_engines()
        import app

        demo = app.build_app()
        port = free_port()
        demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.launch_options()
        )
        try:
            endpoints = {
                name.lstrip("/"): info["parameters"] for name, info in demo.get_api_info()["named_endpoints"].items()
            }
            yield f"http://127.0.0.1:{port}/", endpoints
        finally:
            demo.close()
            storage.reset_engines()


def defaults(parameters: list[dict]) -> dict[str, object]:
    values = {}
    for parameter in parameters:
        name = parameter["parameter_name"]
        values[name] = SMALL.get(
            name, parameter.get("parameter_default") if parameter.get("parameter_has_default") else None
        )
    return values


def call(http: httpx.Client, endpoint: str, values: dict[str, object], order: list[str]) -> str | None:
    """What is wrong with the endpoint's answer to ``values`` (by parameter name), or None."""
    body = json.dumps({"data": [values[name] for name in order]}, allow_nan=True)
    posted = http.post(f"gradio_api/call/{endpoint}", content=body, headers={"content-type": "application/json"})
    if posted.status_code == 413:  # the whole request over the size cap: a clear refusal
        return None
    if posted.status_code >= 500:
        return f"HTTP {posted.status_code}: {posted.text[:200]}"
    if posted.status_code != 200:
        return None if "detail" in posted.text or "error" in posted.text else f"HTTP {posted.status_code}"
    event_id = posted.json()["event_id"]
    stream = http.get(f"gradio_api/call/{endpoint}/{event_id}")
    if stream.status_code >= 500:
        return f"stream HTTP {stream.status_code}"
    lines = stream.text.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "event: error":
            data = lines[index + 1].removeprefix("data:").strip() if index + 1 < len(lines) else ""
            try:
                error = json.loads(data)
            except json.JSONDecodeError:
                return f"an error event that is not JSON: {data[:200]}"
            message = error.get("error") if isinstance(error, dict) else error
            if not message:  # Gradio hides an unhandled exception's message: the visitor sees "Error"
                return "an unhandled exception (an error event without a message)"
    return None


def fuzz_cases(parameters: list[dict]):
    """(label, values): every kind of bad value in every parameter at once, then two kinds in each parameter
    alone (the others at their defaults), taking turns through the kinds."""
    names = [parameter["parameter_name"] for parameter in parameters]
    if not names:
        yield "no parameters", {}
        return
    for kind, value in BAD_VALUES.items():
        yield f"all parameters {kind}", dict.fromkeys(names, value)
    kinds = list(BAD_VALUES.items())
    for position, name in enumerate(names):
        for kind, value in (kinds[position % len(kinds)], kinds[(position + 5) % len(kinds)]):
            yield f"{name} {kind}", {**defaults(parameters), name: value}


def test_every_named_endpoint_is_listed(public_app):
    _url, endpoints = public_app
    for name in ("generate", "compare", "evaluate", "cancel_evaluate", "open_comparison", "annotate", "open_runs"):
        assert name in endpoints


def test_no_endpoint_fails_with_a_server_error_or_an_unhandled_exception(public_app):
    url, endpoints = public_app
    problems = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for endpoint, parameters in endpoints.items():
            order = [parameter["parameter_name"] for parameter in parameters]
            for label, values in fuzz_cases(parameters):
                problem = call(http, endpoint, values, order)
                if problem:
                    problems.append(f"/{endpoint} with {label}: {problem}")
    assert not problems, "\n".join(problems)


def test_a_huge_comparison_id_gets_a_message(public_app):
    url, _endpoints = public_app
    with httpx.Client(base_url=url, timeout=60) as http:
        event = http.post("gradio_api/call/open_comparison", json={"data": ["99999999999999999999"]}).json()
        text = http.get(f"gradio_api/call/open_comparison/{event['event_id']}").text
    assert "event: complete" in text and "does not exist" in text
