"""The model fetcher's settings from the init container's environment (ocr_server.fetch.settings)."""

from __future__ import annotations

import pytest

from ocr_server.fetch import FETCH_FAILED, FetchError
from ocr_server.fetch.settings import from_env

BASE = {"FETCH_URL": "s3://models/ocr/v1", "FETCH_CACHE_DIR": "/cache"}


def test_the_url_gives_the_bucket_and_the_prefix_as_a_folder_and_the_defaults_hold_the_bounds():
    s = from_env({**BASE, "AWS_ENDPOINT_URL": "http://10.0.0.1:7070"})
    assert (s.bucket, s.prefix, s.url) == ("models", "ocr/v1/", "s3://models/ocr/v1/")
    assert s.endpoint_url == "http://10.0.0.1:7070" and s.checksums_file is None and s.link is None
    assert s.max_objects == 1000 and s.stall_seconds == 120 and s.cache_max_bytes == 0


@pytest.mark.parametrize("url", ["https://models/ocr", "s3://Models/ocr", "s3://models/a/../b", "s3://models/a?x=1", ""])
def test_a_url_that_is_not_s3_bucket_prefix_is_a_fetch_failure_naming_fetch_url(url):
    with pytest.raises(FetchError, match="FETCH_URL") as err:
        from_env({**BASE, "FETCH_URL": url})
    assert err.value.reason == FETCH_FAILED


def test_a_bound_that_is_not_a_positive_number_is_refused_naming_it():
    with pytest.raises(FetchError, match="FETCH_STALL_SECONDS: 'soon' is not a number"):
        from_env({**BASE, "FETCH_STALL_SECONDS": "soon"})
    with pytest.raises(FetchError, match="FETCH_MAX_OBJECTS: '0' must be positive"):
        from_env({**BASE, "FETCH_MAX_OBJECTS": "0"})
