"""The Python client's export and import against a real `om serve`: a thread exported line by line as it
streams, erased, imported back from those lines (idempotently), and exported again the same."""

from __future__ import annotations

import uuid

import pytest

from om_client import OMClient
from om_client.errors import OMAPIError
from tests.support.api_server import ApiServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_export_delete_import_through_the_client(stack: ApiServer, key: str) -> None:
    thread, resource = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    with OMClient(stack.base_url, key, timeout=60) as client:
        for i in range(3):
            client.post_turn(
                thread, [{"id": f"m{i}", "role": "user", "text": f"fact {i}"}], resource_id=resource
            )
        lines = list(client.export_thread(thread))
        assert [line["kind"] for line in lines][:3] == ["header", "resource", "thread"]
        assert next(iter(client.export_resource(resource)))["scope"] == "resource"
        client.delete_thread(thread)
        report = client.import_records(lines)
        assert report["messages"] == 3 and report["threads"] == 1
        assert client.import_records(lines)["messages_skipped"] == 3
        messages = [line for line in client.export_thread(thread) if line["kind"] == "message"]
        assert messages == [line for line in lines if line["kind"] == "message"]
        with pytest.raises(OMAPIError) as missing:
            list(client.export_thread("no-such-thread"))
        assert missing.value.status == 404
