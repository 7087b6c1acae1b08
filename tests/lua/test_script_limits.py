"""Each script stays clear of Lua's limit of 200 local variables per function.

Includes are inlined at the top of a script, so every helper a script includes is a local of its
main chunk: a script grows toward the limit with every include, and past it Redis refuses to
load it ("main function has more than 200 local variables"). The check is Redis's own
compiler: each script, with :data:`MARGIN` more locals declared in front of it, must still
load.
"""

from __future__ import annotations

import pytest
from redis import Redis
from redis.exceptions import ResponseError

from echomq._ops import scripts

#: Locals a script must leave free under the limit (200): room for the next includes.
MARGIN = 40
NAMES = scripts.all_script_names()


def padded(text: str, extra: int) -> str:
    """``text`` with ``extra`` more locals of its main chunk declared in front of it."""
    names = ", ".join(f"_pad{i}" for i in range(extra))
    return f"local {names}\n{text}"


def test_the_padding_reaches_the_limit(sync_redis: Redis) -> None:
    # the check can fail: 200 locals in front of any script are refused
    with pytest.raises(ResponseError, match="more than 200 local variables"):
        sync_redis.script_load(padded(scripts.get(NAMES[0]).text, 200))


@pytest.mark.parametrize("name", NAMES)
def test_a_script_leaves_room_for_more_locals(sync_redis: Redis, name: str) -> None:
    text = scripts.get(name).text
    try:
        sync_redis.script_load(padded(text, MARGIN))
    except ResponseError as exc:
        pytest.fail(
            f"{name}.lua (includes inlined) has fewer than {MARGIN} locals left under Lua's "
            f"limit of 200: {exc}; move steps of its main chunk into functions or includes"
        )
