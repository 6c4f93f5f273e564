"""One torch thread for the tiny-model tests: they run fastest on one, and far faster than on two when
the CPU is shared. Import ``one_torch_thread`` into a test module to apply it to that module."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
