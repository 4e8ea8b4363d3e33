"""Keys and certificates re-read from Secret files (ocr_server.runtime.credentials): what is applied, what is kept."""

from __future__ import annotations

import ssl

import pytest

from ocr_server.runtime import credentials as reload
from ocr_server.runtime.config import ConfigError, load_config
from tests.server.secret_volume import self_signed, write_secret_volume

KEY_A, KEY_B = "key-aaaaaaaa-0001", "key-bbbbbbbb-0002"


def test_keys_are_read_one_per_line_or_comma_separated_skipping_blanks_and_comments():
    text = f"# rotated 2024-05\n{KEY_A}\n\n {KEY_B} , key-cccccccc-3\n{KEY_A}\n"
    assert reload.parse_keys(text) == (KEY_A, KEY_B, "key-cccccccc-3")


@pytest.mark.parametrize("text,why", [("", "holds no key"), ("# only a comment\n\n", "holds no key"),
                                      (f"{KEY_A}\nshort\n", r"1 key\(s\) shorter than 8")])
def test_a_key_file_without_valid_keys_is_refused_without_quoting_a_key(text, why):
    with pytest.raises(reload.ReloadError, match=why) as err:
        reload.parse_keys(text, "API_KEYS_FILE=/k")
    assert KEY_A not in str(err.value) and "short" not in str(err.value).replace("shorter", "")


def test_decide_reads_only_when_the_stat_changed_and_applies_only_new_content():
    reads = []

    def read():
        reads.append(1)
        return [b"same"]

    seen, apply = reload.decide(reload.Seen(), ((1, 2, 3, 4),), read)
    assert apply == [b"same"] and len(reads) == 1
    again, apply = reload.decide(seen, ((1, 2, 3, 4),), read)
    assert apply is None and again == seen and len(reads) == 1  # same stat: no read
    touched, apply = reload.decide(seen, ((1, 9, 3, 4),), read)
    assert apply is None and touched.stat == ((1, 9, 3, 4),) and len(reads) == 2  # same bytes: nothing to do


def test_a_key_file_swapped_like_kubelet_replaces_the_keys_and_a_bad_one_keeps_them(tmp_path):
    vol = tmp_path / "keys"
    write_secret_volume(vol, {"api-keys": KEY_A.encode()})
    store = reload.KeyStore(reload.load_keys(str(vol / "api-keys")))
    (w,) = reload.watches(str(vol / "api-keys"), store, None, None, None)
    w.prime()
    assert w.poll() is None and store.keys == (KEY_A,)

    write_secret_volume(vol, {"api-keys": f"{KEY_B}\n".encode()})
    assert w.poll() == "ok" and store.keys == (KEY_B,)

    for bad in (b"", b"short", b"\xff\xfe not utf-8"):
        write_secret_volume(vol, {"api-keys": bad})
        assert w.poll() == "failed" and store.keys == (KEY_B,), bad
        assert w.poll() is None  # the same refused content is not tried again at every poll

    write_secret_volume(vol, {"api-keys": f"{KEY_A},{KEY_B}".encode()})
    assert w.poll() == "ok" and store.keys == (KEY_A, KEY_B)


def test_a_missing_key_file_for_a_moment_keeps_the_keys(tmp_path):
    vol = tmp_path / "keys"
    write_secret_volume(vol, {"api-keys": KEY_A.encode()})
    store = reload.KeyStore((KEY_A,))
    (w,) = reload.watches(str(vol / "api-keys"), store, None, None, None)
    w.prime()
    (vol / "api-keys").unlink()
    assert w.poll() is None and store.keys == (KEY_A,)


def _served_serial(context: ssl.SSLContext, cafile_pems: list[bytes]) -> str:
    """Handshake in memory against `context`; the serial number of the certificate it presented."""
    client_ctx = ssl.create_default_context(cadata="".join(p.decode() for p in cafile_pems))
    client_ctx.check_hostname = False
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    server = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return client.getpeercert()["serialNumber"]


def _serving(tmp_path, cert: bytes, key: bytes):
    """A TLS Secret volume holding `cert`/`key`, the live context serving it, and its primed watch."""
    vol = tmp_path / "tls"
    write_secret_volume(vol, {"tls.crt": cert, "tls.key": key})
    live = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    live.load_cert_chain(vol / "tls.crt", vol / "tls.key")
    (w,) = reload.watches(None, None, str(vol / "tls.crt"), str(vol / "tls.key"), live)
    w.prime()
    return vol, live, w


def test_a_renewed_certificate_loaded_into_the_live_context_is_served_to_new_handshakes(tmp_path):
    cert1, key1 = self_signed(tmp_path / "c", "one", 0x1001)
    cert2, key2 = self_signed(tmp_path / "c", "two", 0x2002)
    vol, live, w = _serving(tmp_path, cert1, key1)
    assert _served_serial(live, [cert1, cert2]) == "1001"

    write_secret_volume(vol, {"tls.crt": cert2, "tls.key": key2})
    assert w.poll() == "ok"
    assert _served_serial(live, [cert1, cert2]) == "2002"


def test_a_certificate_with_a_key_that_does_not_match_keeps_the_served_pair(tmp_path):
    cert1, key1 = self_signed(tmp_path / "c", "one", 0x1001)
    cert2, _ = self_signed(tmp_path / "c", "two", 0x2002)
    vol, live, w = _serving(tmp_path, cert1, key1)
    write_secret_volume(vol, {"tls.crt": cert2, "tls.key": key1})  # mismatched pair
    assert w.poll() == "failed"
    assert _served_serial(live, [cert1, cert2]) == "1001"
    write_secret_volume(vol, {"tls.crt": b"not a certificate", "tls.key": key1})
    assert w.poll() == "failed"
    assert _served_serial(live, [cert1, cert2]) == "1001"


def test_a_failed_load_into_a_context_would_break_it_which_is_why_a_scratch_context_checks_first(tmp_path):
    """What apply_certificate guards against: load_cert_chain with a mismatched key leaves the
    context with the new certificate and no usable key."""
    cert1, key1 = self_signed(tmp_path / "c", "one", 0x1001)
    cert2, _ = self_signed(tmp_path / "c", "two", 0x2002)
    for name, data in (("c1", cert1), ("k1", key1), ("c2", cert2)):
        (tmp_path / name).write_bytes(data)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "c1", tmp_path / "k1")
    with pytest.raises(ssl.SSLError):
        ctx.load_cert_chain(tmp_path / "c2", tmp_path / "k1")
    with pytest.raises(ssl.SSLError):
        _served_serial(ctx, [cert1, cert2])


def test_api_keys_file_is_checked_at_start_naming_it(tmp_path):
    f = tmp_path / "keys"
    with pytest.raises(ConfigError, match="API_KEYS_FILE=.*cannot be read"):
        load_config(env={"API_KEYS_FILE": str(f)})
    f.write_text("\n")
    with pytest.raises(ConfigError, match="API_KEYS_FILE=.*holds no key"):
        load_config(env={"API_KEYS_FILE": str(f)})
    f.write_text(KEY_A)
    with pytest.raises(ConfigError, match="API_KEYS or API_KEYS_FILE, not both"):
        load_config(env={"API_KEYS_FILE": str(f), "API_KEYS": KEY_B})
    assert load_config(env={"API_KEYS_FILE": str(f)}).service.api_keys_file == str(f)


@pytest.mark.parametrize("value", ["0", "3601"])
def test_body_timeout_is_bounded_naming_it(value):
    with pytest.raises(ConfigError, match=f"BODY_TIMEOUT_SEC={float(value)!r}"):
        load_config(env={"BODY_TIMEOUT_SEC": value})


@pytest.mark.parametrize("key,value", [("HEADER_TIMEOUT_SEC", "0"), ("HEADER_TIMEOUT_SEC", "301"),
                                       ("MAX_CONNECTIONS", "0"), ("MAX_CONNECTIONS", "65537")])
def test_the_header_timeout_and_connection_cap_are_bounded_naming_them(key, value):
    with pytest.raises(ConfigError, match=f"{key}="):
        load_config(env={key: value})
