import pytest

import blockir as bir


@pytest.fixture
def progs():
    """Fresh (main, startup) programs installed as the defaults, with fresh unique names."""
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        yield main, startup
