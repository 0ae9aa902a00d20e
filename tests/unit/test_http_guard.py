"""Who may reach the HTTP server (issue 45, findings 5, 14, 18): a request must name
the server in Host, come from no page but the server's own origin and carry its token;
the token comes from a file only its owner reads, the environment, or is made at start,
never from argv. Each table row is one member of the class."""

from __future__ import annotations

import socket

import pytest

from mcp_server.http_guard import (
    TOKEN_ENV,
    Guard,
    TokenRefused,
    allowed_hosts,
    server_token,
)

TOKEN = "a-test-token-of-enough-length"
PORT = 8123


def _guard(host: str) -> Guard:
    return Guard(TOKEN, tuple(allowed_hosts(host, PORT)))


def _headers(host: str, token: str | None = TOKEN, origin: str | None = None) -> dict:
    headers = {b"host": host.encode()}
    if token is not None:
        headers[b"authorization"] = f"Bearer {token}".encode()
    if origin is not None:
        headers[b"origin"] = origin.encode()
    return headers


# (bound address, Host, token, Origin, expected status or None: let through)
CASES = {
    "the bound address with the token is let through": (
        "127.0.0.1", f"127.0.0.1:{PORT}", TOKEN, None, None),
    "localhost names a loopback server": ("127.0.0.1", f"localhost:{PORT}", TOKEN, None, None),
    "the server's own origin is let through": (
        "127.0.0.1", f"127.0.0.1:{PORT}", TOKEN, f"http://127.0.0.1:{PORT}", None),
    "an IPv6 loopback bind is named in brackets": ("::1", f"[::1]:{PORT}", TOKEN, None, None),
    "a request without a token is refused": ("127.0.0.1", f"127.0.0.1:{PORT}", None, None, 401),
    "a wrong token is refused": ("127.0.0.1", f"127.0.0.1:{PORT}", TOKEN + "x", None, 401),
    "a token's prefix is refused": ("127.0.0.1", f"127.0.0.1:{PORT}", TOKEN[:-1], None, 401),
    "an empty bearer is refused": ("127.0.0.1", f"127.0.0.1:{PORT}", "", None, 401),
    "a page on another local port is refused": (
        "127.0.0.1", f"127.0.0.1:{PORT}", TOKEN, "http://127.0.0.1:1", 403),
    "a page on localhost's other port is refused": (
        "127.0.0.1", f"localhost:{PORT}", TOKEN, "http://localhost:1", 403),
    "a null origin is refused": ("127.0.0.1", f"127.0.0.1:{PORT}", TOKEN, "null", 403),
    "a rebinding page's Host is refused on 127.0.0.2": (
        "127.0.0.2", f"evil.example:{PORT}", TOKEN, None, 421),
    "a rebinding page's Host is refused on 127.0.0.1": (
        "127.0.0.1", f"evil.example:{PORT}", TOKEN, None, 421),
    "a rebinding page's Host is refused on [::1]": (
        "::1", f"evil.example:{PORT}", TOKEN, None, 421),
    "a Host with another port is refused": ("127.0.0.1", "127.0.0.1:1", TOKEN, None, 421),
    "another loopback address is not this server": (
        "127.0.0.2", f"127.0.0.1:{PORT}", TOKEN, None, 421),
    "a missing Host is refused": ("127.0.0.1", "", TOKEN, None, 421),
    "an off-loopback bind checks Host too": (
        "10.1.2.3", f"evil.example:{PORT}", TOKEN, None, 421),
    "an off-loopback bind answers to its address": (
        "10.1.2.3", f"10.1.2.3:{PORT}", TOKEN, None, None),
}  # fmt: skip


@pytest.mark.parametrize(("bound", "host", "token", "origin", "status"), CASES.values(),
                         ids=CASES.keys())  # fmt: skip
def test_a_request_reaches_the_server_only_when_named_from_nowhere_and_with_the_token(
    bound, host, token, origin, status
):
    refused = _guard(bound).refusal(_headers(host, token, origin))
    assert (refused and refused[0]) == status
    assert refused is None or TOKEN not in refused[1]


def test_a_wildcard_bind_answers_to_loopback_and_this_machines_names_only():
    hosts = allowed_hosts("0.0.0.0", PORT, ["mcp.example.org"])
    for name in ("127.0.0.1", "localhost", "[::1]", "mcp.example.org", socket.gethostname()):
        assert f"{name}:{PORT}".lower() in hosts
    assert f"0.0.0.0:{PORT}" not in hosts and not any(h.startswith("evil") for h in hosts)


def test_the_token_comes_from_the_file_then_the_environment_then_is_made(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    assert server_token(str(path), {TOKEN_ENV: "x" * 20}) == (TOKEN, False)
    assert server_token(None, {TOKEN_ENV: TOKEN}) == (TOKEN, False)
    made, generated = server_token(None, {})
    other, _ = server_token(None, {})
    assert generated and len(made) >= 32 and made != other


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_token_file_other_accounts_may_read_or_write_is_refused(tmp_path, mode):
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(mode)
    with pytest.raises(TokenRefused, match="chmod 600") as refused:
        server_token(str(path), {})
    assert TOKEN not in str(refused.value)


BAD_TOKENS = {
    "too short to resist guessing": "short",
    "a space inside": "a token with spaces inside",
    "a control character": "token-with-a-newline\x01inside",
    "not ASCII": "token-with-é-not-ascii-chars",
}


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_a_token_no_header_could_carry_safely_is_refused(token):
    with pytest.raises(TokenRefused):
        server_token(None, {TOKEN_ENV: token})


def test_a_token_file_that_is_missing_or_a_directory_is_refused(tmp_path):
    with pytest.raises(TokenRefused, match="cannot read"):
        server_token(str(tmp_path / "absent"), {})
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    with pytest.raises(TokenRefused):
        server_token(str(folder), {})
