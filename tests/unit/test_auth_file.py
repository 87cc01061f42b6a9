"""The TOML auth file: every token names its queues, and a bad file stops the server at once."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pytest

from jobwire.domain.errors import PermissionDenied
from jobwire.rpc.auth import load_tokens
from jobwire.runtime.serving import server_flags, settings_from

DIGEST = hashlib.sha256(b"t").hexdigest()


def _file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(f'[[token]]\nsha256 = "{DIGEST}"\ntenant = "acme"\nrole = "client"\n{body}')
    return path


def test_a_token_without_queues_is_refused_not_given_every_queue(tmp_path: Path) -> None:
    """Security review, finding 12: a token without `queues` silently got all queues."""
    with pytest.raises(ValueError, match=r'token 1: missing queues \(write queues = \["\*"\] for every queue\)'):
        load_tokens(_file(tmp_path, ""))


@pytest.mark.parametrize("queues", ["[]", '"default"', '[""]', "[1]"])
def test_queues_must_name_queues(tmp_path: Path, queues: str) -> None:
    with pytest.raises(ValueError, match="queues must be a non-empty list"):
        load_tokens(_file(tmp_path, f"queues = {queues}\n"))


def test_every_queue_is_asked_for_with_a_star(tmp_path: Path) -> None:
    principal = load_tokens(_file(tmp_path, 'queues = ["*"]\n'))[DIGEST]
    assert principal.may_use("anything")
    only = load_tokens(_file(tmp_path, 'queues = ["default"]\n'))[DIGEST]
    assert only.may_use("default") and not only.may_use("other")


def test_a_bad_auth_file_ends_the_server_before_it_serves(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    server_flags(parser)
    args = parser.parse_args(["--auth-file", str(_file(tmp_path, ""))])
    with pytest.raises(SystemExit, match=r"jobwire: auth file auth\.toml, token 1: missing queues"):
        settings_from(args)


def _entry(tmp_path: Path, roles_line: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(f'[[token]]\nsha256 = "{DIGEST}"\ntenant = "acme"\n{roles_line}\nqueues = ["*"]\n')
    return path


def test_a_token_may_carry_several_roles(tmp_path: Path) -> None:
    assert load_tokens(_entry(tmp_path, 'roles = ["client", "admin"]'))[DIGEST].roles == {"client", "admin"}
    assert load_tokens(_entry(tmp_path, 'role = "worker"'))[DIGEST].roles == {"worker"}


@pytest.mark.parametrize(
    ("roles_line", "why"),
    [
        ("", "missing role"),
        ("roles = []", "roles must be a non-empty list"),
        ('roles = "admin"', "roles must be a non-empty list"),
        ('roles = ["client", "root"]', "unknown role 'root'"),
        ('role = "client"\nroles = ["admin"]', "write role or roles, not both"),
    ],
)
def test_bad_roles_are_refused(tmp_path: Path, roles_line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        load_tokens(_entry(tmp_path, roles_line))


def _tenant_entry(tmp_path: Path, tenant: str, roles_line: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(f'[[token]]\nsha256 = "{DIGEST}"\ntenant = "{tenant}"\n{roles_line}\nqueues = ["*"]\n')
    return path


def test_a_shared_fleet_token_serves_every_tenant_as_a_worker_only(tmp_path: Path) -> None:
    fleet = load_tokens(_tenant_entry(tmp_path, "*", 'role = "worker"'))[DIGEST]
    assert (fleet.tenant, fleet.roles) == ("*", {"worker"})
    for roles_line in ('role = "client"', 'role = "admin"', 'roles = ["worker", "admin"]'):
        with pytest.raises(ValueError, match=r'tenant = "\*" \(a shared fleet\) is for worker tokens only'):
            load_tokens(_tenant_entry(tmp_path, "*", roles_line))


def test_a_tenant_must_have_a_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tenant must not be empty"):
        load_tokens(_tenant_entry(tmp_path, "", 'role = "client"'))


def test_a_token_is_named_by_its_entry_or_its_digest(tmp_path: Path) -> None:
    assert load_tokens(_entry(tmp_path, 'role = "admin"\nname = "alice"'))[DIGEST].name == "alice"
    assert load_tokens(_entry(tmp_path, 'role = "admin"'))[DIGEST].name == DIGEST[:8]


@pytest.mark.parametrize("name", ['""', '"   "', "1", '"a\\u001bb"', f'"{"x" * 65}"'])
def test_a_name_is_short_plain_text(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="name must be 1 to 64 characters of plain text"):
        load_tokens(_entry(tmp_path, f'role = "admin"\nname = {name}'))


def test_a_role_check_names_the_role_it_needs(tmp_path: Path) -> None:
    client = load_tokens(_entry(tmp_path, 'role = "client"'))[DIGEST]
    with pytest.raises(PermissionDenied, match="only a token with the admin role may force a retry"):
        client.check_role("admin", "force a retry")
    load_tokens(_entry(tmp_path, 'roles = ["client", "admin"]'))[DIGEST].check_role("admin", "force a retry")
