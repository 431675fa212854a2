"""Every Python snippet of README.md and docs/ runs, in a scratch project.

The pages run in subprocesses (tests/support/snippets.py explains how, and the
``<!-- snippet: … -->`` comments that give a fragment its context or skip it with a
reason). A new snippet that fails fails this test, naming its page and line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings

from tests.support.snippets import ROOT, blocks_of, pages

#: The share of blocks that must run (not skipped): the test cannot pass on nothing.
MOST = 0.8


def _run(group: list[str]) -> list[dict[str, Any]]:
    env = {**os.environ}
    if "redis" not in settings.SKIPS:
        env["SNIPPETS_REDIS_URL"] = f"redis://127.0.0.1:6379/{settings.REDIS_DB_CACHE}"
        env["SNIPPETS_PREFIX"] = f"{settings.REDIS_KEY_PREFIX}-snippets"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.snippets", *group],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the snippet runner failed on {group}:\n{done.stderr}"
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def _forget_redis_keys() -> None:
    """Delete the Redis keys the snippets wrote (all under the runner's prefix)."""
    if "redis" in settings.SKIPS:
        return
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=settings.REDIS_DB_CACHE)
    try:
        for name in client.scan_iter(f"{settings.REDIS_KEY_PREFIX}-snippets*"):
            client.delete(name)
    finally:
        client.close()


@pytest.mark.slow
def test_every_python_snippet_in_the_docs_runs() -> None:
    names = [str(page.relative_to(ROOT)) for page in pages() if blocks_of(page)]
    groups = [names[0::2], names[1::2]]
    try:
        with ThreadPoolExecutor(len(groups)) as pool:
            blocks = [block for result in pool.map(_run, groups) for block in result]
    finally:
        _forget_redis_keys()
    failed = [f"{b['page']}:{b['line']}: {b['error']}" for b in blocks if b["outcome"] == "failed"]
    skipped = [
        f"{b['page']}:{b['line']}: {b['argument']}" for b in blocks if b["outcome"] == "skipped"
    ]
    ran = [b for b in blocks if b["outcome"] == "ran"]
    print(f"{len(ran)} of {len(blocks)} snippets ran; skipped:\n  " + "\n  ".join(skipped))
    assert not failed, f"{len(failed)} snippets failed:\n\n" + "\n\n".join(failed)
    assert len(ran) >= MOST * len(blocks), (
        f"only {len(ran)} of {len(blocks)} snippets ran; skipped:\n" + "\n".join(skipped)
    )
    assert any("makemigrations" in b["checked"] for b in ran)  # the models were checked
