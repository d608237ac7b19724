"""lazax.dynamo is importable and registers nothing yet."""

import lazax.dynamo


def test_importable_with_a_version():
    assert lazax.dynamo.__version__
