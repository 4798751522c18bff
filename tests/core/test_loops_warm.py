"""The CPU's numba loops loaded in a background thread (`core/health/loops_warm.py`): once per
process, and after it the first scan and timeline reduction compile nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_prepare_loads_the_loops_once_and_the_first_scan_compiles_nothing():
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import inspector
        from inspector.core.health import loops_warm
        assert "numba" not in sys.modules
        thread = loops_warm.prepare_in_background()
        assert loops_warm.prepare_in_background() is thread  # once per process
        thread.join(120)
        assert not thread.is_alive() and "numba" in sys.modules
        from inspector.core.health import scan_loops, step_loops
        before = (len(scan_loops.segment_pass.signatures),
                  len(step_loops.pair_sums.signatures))
        assert before[0] == 2 and before[1] == 1, before  # writable and read-only buffers
        x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
        s = inspector.scan(inspector.pack({"x": x}))
        assert s.leaf("['x']").max == x.max()
        after = (len(scan_loops.segment_pass.signatures), len(step_loops.pair_sums.signatures))
        assert after == before, (before, after)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
