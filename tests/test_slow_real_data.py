"""Long runs on real data (`make test-slow`): the paper's MLP config on real Fashion-MNIST."""

import pytest

from laya_cli.data.datasets import DEBIAN_FASHION_MNIST, load_dataset
from laya_cli.data.settings import DataSettings

needs_fashion = pytest.mark.skipif(
    not (DEBIAN_FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file(), reason="apt-get install dataset-fashion-mnist"
)


@needs_fashion
def test_fashion_mnist_loads_the_official_splits():
    data = load_dataset(DataSettings("fashion-mnist", seed=1337))
    assert len(data.test) == 10_000
    assert len(data.train) + len(data.val) == 60_000 and len(data.val) == 6_000
    assert data.image_shape == (1, 28, 28)
    assert data.classes[0] == "T-shirt/top" and data.classes[9] == "Ankle boot"


@pytest.mark.slow
@needs_fashion
def test_paper_mlp_config_reaches_088_on_fashion_mnist(tmp_path):
    from laya_cli.model.settings import HeadSettings
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    req = TrainJobSettings(
        head="laya",
        head_config=HeadSettings(96, 1.5, "identity", 192),
        data=DataSettings("fashion-mnist", seed=1337),
        train=TrainingSettings(seed=1337),
        out=str(tmp_path / "fm.pt"),
    )
    ckpt = train(req)
    assert ckpt["metrics"]["test_accuracy"] >= 0.88
