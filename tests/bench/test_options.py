"""The benchmarks' options that pick among names (``--stores``, ``--parts``, ``--faults``):
a name they do not know stops the run with an error that lists the names they do, never a
run that silently matches nothing."""

from __future__ import annotations

import argparse

import pytest

import bench.faults
import bench.scale
from bench.common import choose


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="python -m bench test")


def test_choose_reads_names_and_aliases_in_the_order_given() -> None:
    names = ("postgresql", "mariadb", "redis")
    aliases = {"mysql": "mariadb"}
    assert choose(_parser(), "--stores", "Redis, mysql,mariadb", names, aliases) == [
        "redis",
        "mariadb",
    ]
    assert choose(_parser(), "--stores", "", names, aliases) == []


def test_choose_names_the_unknown_and_the_known(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        choose(_parser(), "--stores", "redis,mysq", ("mariadb", "redis"), {"mysql": "mariadb"})
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "--stores: unknown 'mysq'; the names are mariadb, redis (or mysql)" in error


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--stores", "mysq"], "--stores: unknown 'mysq'; the names are postgresql, mariadb"),
        (["--parts", "live,sweeps"], "--parts: unknown 'sweeps'; the names are live, handoff"),
    ],
)
def test_scale_refuses_an_unknown_name_before_it_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv, said
) -> None:
    monkeypatch.setattr(bench.scale, "setup", lambda: pytest.fail("the run started"))
    with pytest.raises(SystemExit):
        bench.scale.main(argv)
    assert said in capsys.readouterr().err


def test_scale_takes_mysql_for_mariadb() -> None:
    parser = _parser()
    picked = choose(
        parser, "--stores", "mysql,db-postgresql", bench.scale.STORES, bench.scale.STORE_ALIASES
    )
    assert picked == ["mariadb", "postgresql"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--stores", "mysql,redis-rdb"],
            "--stores: unknown 'redis-rdb'; the names are postgresql",
        ),
        (["--faults", "restart,reboot"], "--faults: unknown 'reboot'; the names are restart"),
    ],
)
def test_faults_refuses_an_unknown_name_listing_the_names(
    capsys: pytest.CaptureFixture[str], argv, said
) -> None:
    with pytest.raises(SystemExit):
        bench.faults.main(argv)
    assert said in capsys.readouterr().err


def test_faults_takes_mysql_for_mariadb() -> None:
    options = argparse.Namespace(stores="mysql", require=False)
    stores, skipped = bench.faults._stores(_parser(), options)
    assert [s.name for s in stores] + list(skipped) == ["mariadb"]
