import numpy as np
import pytest

from cute_prof import jit


def test_disabled_scope_turns_compiled_paths_off_and_restores():
    before = jit.enabled()
    with jit.disabled():
        assert not jit.enabled()
    assert jit.enabled() == before


def test_environment_switch_disables(monkeypatch):
    monkeypatch.setenv("CUTE_PROF_NO_JIT", "1")
    assert not jit.enabled()


@pytest.mark.skipif(not jit.available(), reason="numba not installed")
def test_kernel_compiles_a_loop():
    @jit.kernel(cache=False)
    def running_max(values):
        out = np.empty_like(values)
        best = values[0]
        for i in range(values.size):
            best = max(best, values[i])
            out[i] = best
        return out

    values = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)
    np.testing.assert_array_equal(running_max(values), np.maximum.accumulate(values))
