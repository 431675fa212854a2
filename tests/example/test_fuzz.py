"""The example API fuzzed from its own OpenAPI schema (schemathesis): no request it
generates, anonymous or signed in with every permission, gets a server error.

Every operation is fuzzed with valid and invalid data, once with whatever ``id`` is
generated (mostly objects that do not exist) and once on an object that does, so that
the writes reach the preconditions, the leases and the guarded save.
"""

from __future__ import annotations

import base64
import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.support.example_site import PASSWORD, call

#: Examples per operation, mode and ``id``: enough to reach the contract's statuses
#: (400, 404, 409, 412, 423, 428) while the whole run stays within two minutes.
EXAMPLES = 25

SIGNED_IN = {"Authorization": "Basic " + base64.b64encode(f"editor:{PASSWORD}".encode()).decode()}


def _fuzz(operation, url: str, mode: GenerationMode, path_parameters: dict) -> None:
    @given(operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        for headers in ({}, SIGNED_IN):
            response = case.call(base_url=url, headers=headers)
            case.validate_response(response, checks=[not_a_server_error])

    run()


@pytest.mark.slow
def test_no_generated_request_gets_a_server_error(example_site) -> None:
    existing = {}
    for kind, body in (("books", {"name": "fuzzed"}), ("tasks", {"title": "fuzzed"})):
        status, _head, raw = call("POST", f"{example_site.url}/api/{kind}/", "editor", body)
        assert status == 201, raw
        existing[kind] = json.loads(raw)["id"]
    schema = schemathesis.openapi.from_url(f"{example_site.url}/api/schema/?format=json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 10
    failures = []
    for operation in operations:
        kind = operation.path.split("/")[2]
        ids = [{}, {"id": existing[kind]}] if "{id}" in operation.path else [{}]
        for path_parameters in ids:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    _fuzz(operation, example_site.url, mode, path_parameters)
                except Exception as e:  # every operation runs; all failures are told
                    failures.append(f"{operation.label} {mode.value} {path_parameters}: {e}")
    assert not failures, "\n\n".join(failures)
