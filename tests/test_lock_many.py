"""lock_many across processes: opposite orders cannot deadlock."""

from __future__ import annotations

import pytest

from tests.support import model_workers, multiproc
from tests.support.aliases import BACKEND_OF, SERVERS, database_params
from tests.testapp.models import Counter


@pytest.mark.multiprocess
@pytest.mark.parametrize("server", database_params(SERVERS))
def test_opposite_orders_both_finish(live_db: None, server: str) -> None:
    """Two processes lock the same two keys, named in opposite orders, 25 times each:
    both finish, and the counter they update inside shows no overlap."""
    Counter.objects.using(server).create(name="many")
    alias = BACKEND_OF[server]
    done = multiproc.run(
        model_workers.lock_many_loop,
        [
            (alias, ["k:a", "k:b"], 25, server),
            (alias, ["k:b", "k:a"], 25, server),
        ],
        timeout=120,
    )
    assert done == [25, 25]
    assert Counter.objects.using(server).get(name="many").value == 50
