from pathlib import Path

import pytest

from tests.cli.adversarial import model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved model, a batch, a data feed and a data file (:func:`tests.cli.adversarial.model`)."""
    work = tmp_path_factory.mktemp("model")
    model(work)
    return work
